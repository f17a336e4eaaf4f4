//! llama-perplexity's measure, for checking a model's arithmetic against llama.cpp on the
//! same file: the text's tokens cut into chunks of `n_ctx`, each opening with BOS where the
//! vocabulary adds one, each scored on its second half.

use specdec_runtime::{Logits, Model, Node, SeqInput, Want};

pub fn log_softmax_at(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let z: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    logits[target] as f64 - max - z.ln()
}

/// Chunk `c` of `n_ctx` tokens as llama-perplexity runs it (its first token replaced by
/// `bos` where the vocabulary adds one) and every node's logits over it.
pub fn chunk_logits(
    m: &Model,
    tokens: &[u32],
    n_ctx: usize,
    c: usize,
    bos: Option<u32>,
) -> (Vec<u32>, Logits) {
    let mut chunk = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
    if let Some(bos) = bos {
        chunk[0] = bos;
    }
    let mut seq = m.new_sequence();
    let out = m
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(&chunk),
            want: Want::All,
        }])
        .unwrap();
    (chunk, out.into_iter().next().unwrap())
}

/// Mean NLL per scored token over `text` and its chunk count; `tokenizer` is the file's.
pub fn nll(
    m: &Model,
    tokenizer: &specdec_tokenizer::Tokenizer,
    text: &str,
    n_ctx: usize,
) -> (f64, usize) {
    let bos = tokenizer.bos_id().filter(|_| tokenizer.adds_bos());
    let tokens = tokenizer.encode_prompt(text).unwrap();
    let chunks = tokens.len() / n_ctx;
    assert!(chunks >= 1, "{} tokens", tokens.len());
    let (mut nll, mut scored) = (0f64, 0usize);
    for c in 0..chunks {
        let (chunk, out) = chunk_logits(m, &tokens, n_ctx, c, bos);
        for j in n_ctx / 2..n_ctx - 1 {
            nll -= log_softmax_at(out.row(j), chunk[j + 1] as usize);
            scored += 1;
        }
    }
    (nll / scored as f64, chunks)
}

/// Asserts that our perplexity of `text` is within `tolerance` (relative) of llama.cpp's
/// `ppl_ref` on the same file and context.
pub fn agrees_with_llama_cpp(
    name: &str,
    m: &Model,
    tokenizer: &specdec_tokenizer::Tokenizer,
    text: &str,
    n_ctx: usize,
    ppl_ref: f64,
    tolerance: f64,
) {
    let (nll, chunks) = nll(m, tokenizer, text, n_ctx);
    let ppl = nll.exp();
    println!(
        "{name}, {chunks} chunks of {n_ctx}: ppl ours {ppl:.4} (NLL {nll:.4}), llama.cpp {ppl_ref:.4} (NLL {:.4}): {:+.3}%",
        ppl_ref.ln(),
        100.0 * (ppl / ppl_ref - 1.0)
    );
    assert!(
        ((ppl - ppl_ref) / ppl_ref).abs() < tolerance,
        "{name}: perplexity ours {ppl} vs llama.cpp {ppl_ref}"
    );
}
