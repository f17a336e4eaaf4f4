//! Cross-check of the "llama" path against SentencePiece itself: a small BPE model trained by
//! `tests/fixtures/make_spm_reference.py`, with the ids SentencePiece gives for some texts.

use serde_json::Value as Json;
use specdec_gguf::Value;

use super::{gguf, s, strings};
use crate::Tokenizer;

fn ints(v: &Json) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

#[test]
fn score_derived_merges_match_sentencepiece() {
    let r: Json = serde_json::from_str(include_str!("../../tests/fixtures/spm_reference.json"))
        .expect("fixture");
    let tokens: Vec<&str> = r["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let scores = r["scores"].as_array().unwrap().iter();
    let scores = scores
        .map(|x| Value::F32(x.as_f64().unwrap() as f32))
        .collect();
    let types = ints(&r["types"]).into_iter().map(|t| Value::I32(t as i32));
    let id = |key: &str| Value::U32(r[key].as_u64().unwrap() as u32);
    let file = gguf(&[
        ("tokenizer.ggml.model", s("llama")),
        ("tokenizer.ggml.tokens", strings(tokens)),
        ("tokenizer.ggml.scores", Value::Array(scores)),
        ("tokenizer.ggml.token_type", Value::Array(types.collect())),
        ("tokenizer.ggml.bos_token_id", id("bos")),
        ("tokenizer.ggml.eos_token_id", id("eos")),
        ("tokenizer.ggml.unknown_token_id", id("unk")),
    ]);
    let t = Tokenizer::from_gguf(&file).unwrap();
    let mut failures = Vec::new();
    for case in r["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = ints(&case["ids"]).into_iter().map(|i| i as u32).collect();
        let got = t.encode(text, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}\n  got  {got:?}\n  want {want:?}"));
        }
        assert_eq!(t.decode(&want, true), case["decoded"].as_str().unwrap());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
