//! A tiny SentencePiece ("llama") vocabulary: merges come from scores, bytes fall back to
//! `<0xNN>`, spaces are `▁`, and a `▁` is put before each run of text.

use specdec_gguf::Value;

use super::{gguf, s, strings};
use crate::{ModelKind, StreamDecoder, Tokenizer};

/// Normal pieces and scores: higher scores merge first.
const PIECES: [(&str, f32); 20] = [
    ("▁", -100.0),
    ("h", -100.0),
    ("e", -100.0),
    ("l", -100.0),
    ("o", -100.0),
    ("w", -100.0),
    ("r", -100.0),
    ("d", -100.0),
    ("ll", -1.0),
    ("he", -2.0),
    ("▁he", -3.0),
    ("llo", -4.0),
    ("▁hello", -5.0),
    ("▁w", -6.0),
    ("or", -7.0),
    ("▁wor", -8.0),
    ("ld", -9.0),
    ("▁world", -10.0),
    // Worse than "ll", so "hello" never splits as h-el-lo.
    ("el", -20.0),
    ("lo", -21.0),
];

/// <unk>=0, <s>=1, </s>=2, <0x00>..<0xFF> = 3..=258, pieces from 259, then "<tool>"
/// (user-defined). `with_bytes = false` leaves the byte tokens out (ids shift down by 256).
fn llama_gguf(extra: &[(&str, Value)], with_bytes: bool) -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    if with_bytes {
        tokens.extend((0..=255).map(|b| format!("<0x{b:02X}>")));
        types.extend([6; 256]);
    }
    tokens.extend(PIECES.iter().map(|(p, _)| p.to_string()));
    types.extend([1; PIECES.len()]);
    tokens.push("<tool>".into());
    types.push(4);
    let mut scores: Vec<f32> = vec![0.0; tokens.len()];
    let first = tokens.len() - 1 - PIECES.len();
    for (i, (_, score)) in PIECES.iter().enumerate() {
        scores[first + i] = *score;
    }
    let mut kvs = vec![
        ("tokenizer.ggml.model", s("llama")),
        (
            "tokenizer.ggml.tokens",
            strings(tokens.iter().map(String::as_str)),
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(scores.into_iter().map(Value::F32).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
    ];
    kvs.extend(extra.iter().cloned());
    Tokenizer::from_gguf(&gguf(&kvs)).expect("synthetic llama tokenizer")
}

fn id(t: &Tokenizer, piece: &str) -> u32 {
    t.id_of(piece)
        .unwrap_or_else(|| panic!("{piece:?} not in vocab"))
}

#[test]
fn words_merge_by_score_with_a_space_prefix() {
    let t = llama_gguf(&[], true);
    assert_eq!(t.model_kind(), ModelKind::Llama);
    let ids = t.encode("hello world", false).unwrap();
    assert_eq!(ids, [id(&t, "▁hello"), id(&t, "▁world")]);
    assert_eq!(t.decode(&ids, false), "hello world");
    // Without the prefix, "hello" is not a piece: h-e-ll-o merges to he + llo.
    let t = llama_gguf(
        &[("tokenizer.ggml.add_space_prefix", Value::Bool(false))],
        true,
    );
    assert_eq!(
        t.encode("hello", false).unwrap(),
        [id(&t, "he"), id(&t, "llo")]
    );
    assert_eq!(t.decode(&[id(&t, "▁hello")], false), " hello");
}

#[test]
fn unknown_characters_fall_back_to_bytes() {
    let t = llama_gguf(&[], true);
    let byte = |b: u8| 3 + u32::from(b);
    let ids = t.encode("hi é\n", false).unwrap();
    let want = [
        id(&t, "▁"),
        id(&t, "h"),
        byte(b'i'),
        id(&t, "▁"),
        byte(0xC3),
        byte(0xA9),
        byte(b'\n'),
    ];
    assert_eq!(ids, want);
    assert_eq!(t.decode(&ids, false), "hi é\n");
    assert_eq!(t.token_text(byte(b'\n')).as_deref(), Some("\n"));
    // Half a character streams as nothing until the other half arrives.
    let mut dec = StreamDecoder::new(false);
    let chunks: Vec<String> = ids.iter().map(|&i| dec.push(&t, i)).collect();
    assert_eq!(chunks, ["", "h", "i", " ", "", "é", "\n"]);
    assert_eq!(dec.finish(&t), "");
}

#[test]
fn without_byte_tokens_unknown_characters_become_unk() {
    let t = llama_gguf(&[], false);
    assert_eq!(t.encode("hez", false).unwrap(), [id(&t, "▁he"), 0]);
    assert_eq!(t.encode("hezz", false).unwrap(), [id(&t, "▁he"), 0]); // fused
    assert_eq!(t.decode(&[id(&t, "▁he"), 0], true), "he");
}

#[test]
fn special_tokens_and_bos() {
    let t = llama_gguf(&[], true);
    let hello = id(&t, "▁hello");
    assert_eq!((t.bos_id(), t.eos_id()), (Some(1), Some(2)));
    assert_eq!(t.stop_ids(), &[2]);
    assert!(t.adds_bos()); // llama models add BOS unless told not to
                           // Parsed: <s> is one id, and the text after it gets its own ▁ prefix (as in llama.cpp).
    assert_eq!(t.encode("<s>hello", true).unwrap(), [1, hello]);
    assert_eq!(t.encode_prompt("hello").unwrap(), [1, hello]);
    assert_eq!(t.encode_prompt("<s>hello").unwrap(), [1, hello]);
    // Not parsed: "<s>" is text, spelled with byte tokens.
    let byte = |c: char| 3 + c as u32;
    assert_eq!(
        t.encode("<s>hello", false).unwrap(),
        [
            id(&t, "▁"),
            byte('<'),
            byte('s'),
            byte('>'),
            id(&t, "he"),
            id(&t, "llo")
        ]
    );
    // User-defined tokens are always matched whole, and never skipped.
    let tool = id(&t, "<tool>");
    assert!(!t.is_special(tool) && t.is_special(1) && t.is_special(0));
    assert_eq!(
        t.encode("hello<tool>hello", false).unwrap(),
        [hello, tool, hello]
    );
    let ids = [1, hello, tool, id(&t, "▁world"), 2];
    assert_eq!(t.decode(&ids, false), "<s> hello<tool> world</s>");
    assert_eq!(t.decode(&ids, true), "hello<tool> world");
    let t = llama_gguf(
        &[("tokenizer.ggml.add_bos_token", Value::Bool(false))],
        true,
    );
    assert_eq!(t.encode_prompt("hello").unwrap(), [hello]);
}

#[test]
fn stream_strips_only_the_first_space() {
    let t = llama_gguf(&[], true);
    let ids = [1, id(&t, "▁hello"), id(&t, "▁world"), 2];
    for skip in [false, true] {
        let mut dec = StreamDecoder::new(skip);
        let mut out: String = ids.iter().map(|&i| dec.push(&t, i)).collect();
        out += &dec.finish(&t);
        assert_eq!(out, t.decode(&ids, skip));
    }
}

mod props {
    use proptest::prelude::*;

    use super::llama_gguf;
    use crate::{StreamDecoder, Tokenizer};

    fn tok() -> &'static Tokenizer {
        static TOK: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
        TOK.get_or_init(|| llama_gguf(&[], true))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        // Byte fallback covers every byte, so text comes back whole. Excluded: a literal `▁`
        // (it reads as a space), and `<` so no token like `<tool>` is matched: the text after
        // one gets its own `▁` prefix, as in llama.cpp, which adds a space.
        #[test]
        fn any_text_round_trips(text in "[^▁<]{0,30}", parse_special: bool) {
            let ids = tok().encode(&text, parse_special).unwrap();
            prop_assert_eq!(tok().decode(&ids, false), text);
        }

        #[test]
        fn stream_equals_decode(ids in prop::collection::vec(0u32..290, 0..30), skip: bool) {
            let mut dec = StreamDecoder::new(skip);
            let mut out: String = ids.iter().map(|&i| dec.push(tok(), i)).collect();
            out += &dec.finish(tok());
            prop_assert_eq!(out, tok().decode(&ids, skip));
        }
    }
}

#[test]
fn tokenizer_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<crate::ChatTemplate>();
}
