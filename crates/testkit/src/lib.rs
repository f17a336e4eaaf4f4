//! Test support: a tiny synthetic model for the tests that need *a* model but not a
//! particular one (the offline tier: plain `cargo test`, no model file, no network).
//!
//! [`tiny_model_path`] writes, once per process, a `llama` GGUF of [`LAYERS`] layers,
//! [`HIDDEN`] wide, [`HEADS`] query heads over [`KV_HEADS`] key/value heads, with random
//! but deterministic weights (Q8_0 matrices and embeddings, F32 norms), a byte-level
//! ("gpt2") tokenizer of the ChatML control tokens (at SmolLM2's ids: `<|endoftext|>` 0,
//! `<|im_start|>` 1, `<|im_end|>` 2), the 256 byte tokens and a few merges, and a ChatML
//! chat template. The same bytes every time: tests may pin what it computes.
//!
//! The output head's rows of the control tokens are zero, so their logit is 0 while the
//! largest of the other rows' is positive: greedy decoding never stops by itself (runs
//! end at their token limit) and long streams stay open as long as a test needs.

mod redis_server;

pub use redis_server::RedisServer;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use specdec_gguf::write::Builder;
use specdec_gguf::{names, GgmlType, GgufFile, Value};
use specdec_runtime::{Executor, Model};
use specdec_tokenizer::{ChatTemplate, Tokenizer, CHATML_TEMPLATE};

/// Transformer blocks.
pub const LAYERS: usize = 2;
/// Hidden (embedding) width.
pub const HIDDEN: usize = 64;
/// Query heads.
pub const HEADS: usize = 4;
/// Key/value heads (grouped-query attention: two query heads per key/value head).
pub const KV_HEADS: usize = 2;
/// Width of one head.
pub const HEAD_DIM: usize = HIDDEN / HEADS;
/// The feed-forward block's inner width.
pub const FFN: usize = 128;
/// The context length the file declares. Byte-level text takes about four times the
/// tokens SmolLM2's vocabulary does, so four times SmolLM2's 8192: what fits there fits here.
pub const CONTEXT: usize = 32768;

/// Merges of the byte-level vocabulary, in rank order (each adds the token it makes).
pub const MERGES: [&str; 10] = [
    "Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "r e", "Ġ s", "e n",
];
/// The control tokens, ids 0, 1 and 2 (as in SmolLM2's vocabulary).
pub const CONTROL: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// `<|endoftext|>`'s id.
pub const ENDOFTEXT: u32 = 0;
/// `<|im_start|>`'s id (the file's BOS, which the tokenizer does not add).
pub const IM_START: u32 = 1;
/// `<|im_end|>`'s id: the file's EOS, where a chat turn stops.
pub const IM_END: u32 = 2;
/// The id of byte 0; byte `b` is `FIRST_BYTE + b`.
pub const FIRST_BYTE: u32 = CONTROL.len() as u32;
/// The id of the first merge's token; merge `i` makes `FIRST_MERGE + i`.
pub const FIRST_MERGE: u32 = FIRST_BYTE + 256;
/// Vocabulary size.
pub const VOCAB: usize = FIRST_MERGE as usize + MERGES.len();

/// The tiny model's file, written once per process (and shared between processes: its
/// name carries a hash of its bytes) under the system's temporary directory.
pub fn tiny_model_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let bytes = tiny_model().build();
        let dir = std::env::temp_dir().join("specdec-testkit");
        std::fs::create_dir_all(&dir).expect("a temporary directory for the tiny model");
        let path = dir.join(format!("tiny-llama-{:016x}.gguf", fnv1a(&bytes)));
        if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            // Written under a name of this process's own, then renamed: a reader never
            // sees a partial file, whoever wins.
            let part = dir.join(format!(
                "tiny-llama-{:016x}.{}.part",
                fnv1a(&bytes),
                std::process::id()
            ));
            std::fs::write(&part, &bytes).expect("writing the tiny model");
            std::fs::rename(&part, &path).expect("placing the tiny model");
        }
        path
    })
}

/// The tiny model's file, opened.
pub fn tiny_gguf() -> GgufFile {
    GgufFile::open(tiny_model_path()).expect("the tiny model opens")
}

/// The tiny model, loaded (a new instance each call) with `threads` kernel threads.
pub fn load_model(threads: usize) -> Model {
    Model::from_gguf(&tiny_gguf(), Executor::new(threads)).expect("the tiny model loads")
}

/// The tiny model's tokenizer.
pub fn tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&tiny_gguf()).expect("the tiny model's tokenizer")
}

/// The tiny model's chat template (ChatML, from the file).
pub fn chat_template() -> ChatTemplate {
    ChatTemplate::from_gguf(&tiny_gguf())
        .expect("the tiny model's chat template")
        .expect("the tiny model has a chat template")
}

/// The tiny model's GGUF, in memory: metadata, tokenizer and weights.
pub fn tiny_model() -> Builder {
    let u = |v: usize| Value::U32(v as u32);
    let s = |v: &str| Value::String(v.into());
    let mut tokens: Vec<String> = CONTROL.iter().map(|c| c.to_string()).collect();
    tokens.extend(byte_chars().iter().map(|c| c.to_string()));
    tokens.extend(MERGES.iter().map(|m| m.replace(' ', "")));
    assert_eq!(tokens.len(), VOCAB);
    // Control tokens (type 3), then normal ones (1).
    let types = (0..VOCAB)
        .map(|id| Value::I32(if id < CONTROL.len() { 3 } else { 1 }))
        .collect();
    let mut b = Builder::default()
        .kv("general.architecture", s("llama"))
        .kv("general.name", s("specdec-testkit tiny llama"))
        .kv("llama.block_count", u(LAYERS))
        .kv("llama.context_length", u(CONTEXT))
        .kv("llama.embedding_length", u(HIDDEN))
        .kv("llama.feed_forward_length", u(FFN))
        .kv("llama.attention.head_count", u(HEADS))
        .kv("llama.attention.head_count_kv", u(KV_HEADS))
        .kv("llama.rope.dimension_count", u(HEAD_DIM))
        .kv("llama.rope.freq_base", Value::F32(10000.0))
        .kv("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
        .kv("llama.vocab_size", u(VOCAB))
        .kv("tokenizer.ggml.model", s("gpt2"))
        .kv("tokenizer.ggml.pre", s("smollm"))
        .kv(
            "tokenizer.ggml.tokens",
            Value::Array(tokens.iter().map(|t| s(t)).collect()),
        )
        .kv("tokenizer.ggml.token_type", Value::Array(types))
        .kv(
            "tokenizer.ggml.merges",
            Value::Array(MERGES.iter().map(|m| s(m)).collect()),
        )
        .kv("tokenizer.ggml.bos_token_id", Value::U32(IM_START))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(IM_END))
        .kv("tokenizer.ggml.padding_token_id", Value::U32(ENDOFTEXT))
        .kv("tokenizer.chat_template", s(CHATML_TEMPLATE));

    let mut rng = Rng(specdec_verify::Rng::new(0x5eed_7e57_0000_0001));
    // Embeddings of unit scale; matrices scaled by 1/sqrt(fan-in); a head whose logits
    // spread by a few units, so distributions are neither flat nor one-hot.
    b = q8_tensor(b, names::TOKEN_EMBD, HIDDEN, VOCAB, 1.0, &mut rng, None);
    b = b.f32_tensor(
        names::OUTPUT_NORM,
        &[HIDDEN as u64],
        &norm(HIDDEN, &mut rng),
    );
    b = q8_tensor(
        b,
        names::OUTPUT,
        HIDDEN,
        VOCAB,
        0.4,
        &mut rng,
        Some(0..CONTROL.len()),
    );
    let kv = KV_HEADS * HEAD_DIM;
    let w = 1.0 / (HIDDEN as f32).sqrt();
    for i in 0..LAYERS {
        let name = |part: &str| names::block(i, part);
        b = b.f32_tensor(
            &name(names::ATTN_NORM),
            &[HIDDEN as u64],
            &norm(HIDDEN, &mut rng),
        );
        b = q8_tensor(b, &name(names::ATTN_Q), HIDDEN, HIDDEN, w, &mut rng, None);
        b = q8_tensor(b, &name(names::ATTN_K), HIDDEN, kv, w, &mut rng, None);
        b = q8_tensor(b, &name(names::ATTN_V), HIDDEN, kv, w, &mut rng, None);
        b = q8_tensor(
            b,
            &name(names::ATTN_OUTPUT),
            HIDDEN,
            HIDDEN,
            w,
            &mut rng,
            None,
        );
        b = b.f32_tensor(
            &name(names::FFN_NORM),
            &[HIDDEN as u64],
            &norm(HIDDEN, &mut rng),
        );
        b = q8_tensor(b, &name(names::FFN_GATE), HIDDEN, FFN, w, &mut rng, None);
        b = q8_tensor(b, &name(names::FFN_UP), HIDDEN, FFN, w, &mut rng, None);
        let down = 1.0 / (FFN as f32).sqrt();
        b = q8_tensor(b, &name(names::FFN_DOWN), FFN, HIDDEN, down, &mut rng, None);
    }
    b
}

/// GPT-2's byte-level alphabet: the character standing for each byte, in byte order.
pub fn byte_chars() -> [char; 256] {
    let printable = |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    let mut out = ['\0'; 256];
    let mut next = 256;
    for (b, slot) in out.iter_mut().enumerate() {
        let b = b as u32;
        *slot = if printable(b) {
            char::from_u32(b).unwrap()
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap()
        };
    }
    out
}

/// A matrix of `rows` rows of `k` values (GGUF dims `[k, rows]`), uniform with standard
/// deviation `std`, quantized to Q8_0; the rows in `zero` are zeros.
fn q8_tensor(
    b: Builder,
    name: &str,
    k: usize,
    rows: usize,
    std: f32,
    rng: &mut Rng,
    zero: Option<std::ops::Range<usize>>,
) -> Builder {
    let mut values: Vec<f32> = (0..k * rows).map(|_| rng.uniform() * std).collect();
    if let Some(z) = zero {
        values[z.start * k..z.end * k].fill(0.0);
    }
    let data = quantize_q8_0(&values);
    b.tensor(name, &[k as u64, rows as u64], GgmlType::Q8_0.id(), data)
}

/// RMSNorm gains near 1.
fn norm(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| 1.0 + 0.1 * rng.uniform()).collect()
}

/// GGML's Q8_0: blocks of 32 values as an f16 scale and 32 signed bytes.
pub fn quantize_q8_0(values: &[f32]) -> Vec<u8> {
    assert_eq!(values.len() % 32, 0, "Q8_0 rows are whole blocks of 32");
    let mut out = Vec::with_capacity(values.len() / 32 * 34);
    for block in values.chunks(32) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
        out.extend(half::f16::from_f32(d).to_le_bytes());
        out.extend(block.iter().map(|v| (v * inv).round() as i8 as u8));
    }
    out
}

/// The fixture's only source of randomness: sampling's SplitMix64 stream, so the model's
/// bytes are fixed by the seed on every platform.
struct Rng(specdec_verify::Rng);

impl Rng {
    /// Uniform with mean 0 and standard deviation 1.
    fn uniform(&mut self) -> f32 {
        ((self.0.next_f64() * 2.0 - 1.0) * 3f64.sqrt()) as f32
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_runtime::{Node, SeqInput, Want};

    #[test]
    fn the_file_is_the_same_bytes_every_time() {
        assert_eq!(tiny_model().build(), tiny_model().build());
        assert_eq!(
            std::fs::read(tiny_model_path()).unwrap(),
            tiny_model().build()
        );
    }

    #[test]
    fn the_runtime_loads_it_with_the_declared_shape() {
        let m = load_model(1);
        let c = m.config();
        assert_eq!(
            (c.n_layers, c.hidden, c.head_dim, c.vocab, c.context_length),
            (LAYERS, HIDDEN, HEAD_DIM, VOCAB, CONTEXT)
        );
    }

    #[test]
    fn the_tokenizer_round_trips_bytes_and_keeps_control_tokens() {
        let t = tokenizer();
        assert_eq!(t.vocab_size(), VOCAB);
        for text in [
            "the theory",
            "Hello, world!",
            "€ 🦀 你好\n\t",
            "\u{0}\u{7f}",
        ] {
            let ids = t.encode(text, false).unwrap();
            assert_eq!(t.decode(&ids, false), text);
        }
        assert_eq!(t.encode(" the", false).unwrap(), [FIRST_MERGE + 2]);
        assert_eq!(t.encode("A", false).unwrap(), [FIRST_BYTE + b'A' as u32]);
        assert_eq!(
            t.encode("<|im_start|>x<|im_end|>", true).unwrap(),
            [IM_START, FIRST_BYTE + b'x' as u32, IM_END]
        );
        assert!(t.stop_ids().contains(&IM_END));
        assert_eq!(
            t.encode_prompt("hi").unwrap(),
            t.encode("hi", true).unwrap()
        );
    }

    #[test]
    fn the_chat_template_is_chatml() {
        let tmpl = chat_template();
        let msgs = [specdec_tokenizer::ChatMessage::new("user", "Hi")];
        assert_eq!(
            tmpl.render(&msgs, true).unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn greedy_decoding_runs_and_never_picks_a_control_token() {
        let m = load_model(2);
        let t = tokenizer();
        let mut seq = m.new_sequence();
        let mut tokens = t.encode("Once upon a time", false).unwrap();
        let mut fed = 0;
        for _ in 0..64 {
            let nodes = Node::chain(&tokens[fed..]);
            let out = m
                .forward(&mut [SeqInput {
                    seq: &mut seq,
                    nodes: &nodes,
                    want: Want::Last,
                }])
                .unwrap();
            seq.commit_all().unwrap();
            fed = tokens.len();
            let row = out[0].row(0);
            assert!(row.iter().all(|v| v.is_finite()));
            let next = (0..row.len())
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap();
            assert!(next >= CONTROL.len(), "greedy picked control token {next}");
            tokens.push(next as u32);
        }
        let distinct: std::collections::HashSet<_> = tokens.iter().collect();
        assert!(distinct.len() > 4, "{tokens:?}");
    }
}
