//! Gemma 3's SentencePiece vocabulary (262,144 pieces) against SentencePiece itself: ids made
//! by `tests/fixtures/make_gemma_reference.py`. Skipped, saying so, when the model is not cached.

use std::sync::OnceLock;

use serde_json::Value as Json;
use specdec_gguf::GgufFile;
use specdec_tokenizer::{ModelKind, Tokenizer};

fn tok() -> Option<&'static Tokenizer> {
    static TOK: OnceLock<Option<Tokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let Some(path) = specdec_model_store::cached(&specdec_model_store::GEMMA3_270M) else {
            eprintln!("skipping Gemma 3: not cached (`specdec model fetch gemma-3-270m`)");
            return None;
        };
        let file = GgufFile::open(path).expect("open Gemma 3");
        Some(Tokenizer::from_gguf(&file).expect("tokenizer"))
    })
    .as_ref()
}

fn cases() -> Vec<(String, Vec<u32>, String)> {
    let r: Json =
        serde_json::from_str(include_str!("../fixtures/gemma_reference.json")).expect("fixture");
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let ids = c["ids"].as_array().unwrap();
            (
                c["text"].as_str().unwrap().to_string(),
                ids.iter().map(|x| x.as_u64().unwrap() as u32).collect(),
                c["decoded"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn metadata_is_read() {
    let Some(t) = tok() else { return };
    assert_eq!(t.model_kind(), ModelKind::Llama);
    assert_eq!(t.vocab_size(), 262_144);
    assert_eq!((t.bos_id(), t.eos_id()), (Some(2), Some(1)));
    assert!(t.adds_bos(), "the file asks for BOS");
    assert_eq!(t.id_of("▁capital"), Some(5279));
    assert_eq!(t.id_of("<0x0A>"), Some(248));
    assert!(t.is_special(2) && !t.is_special(5279));
    assert_eq!(t.encode_prompt("The").unwrap(), [2, 818]);
}

#[test]
fn ids_match_sentencepiece_on_real_text() {
    let Some(t) = tok() else { return };
    let mut failures = Vec::new();
    for (text, want, _) in cases() {
        let got = t.encode(&text, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}\n  got  {got:?}\n  want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn decoding_gives_sentencepieces_text() {
    let Some(t) = tok() else { return };
    for (text, ids, decoded) in cases() {
        assert_eq!(t.decode(&ids, true), decoded, "{text:?}");
    }
}
