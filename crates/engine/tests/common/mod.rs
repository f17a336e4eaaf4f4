//! The real model, tokenizer and chat template, loaded once per test binary.

#![allow(dead_code)] // each test binary uses part of this

use std::sync::OnceLock;

use specdec_gguf::GgufFile;
use specdec_runtime::{Executor, Model};
use specdec_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

pub struct Fixture {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
}

pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let path = specdec_model_store::resolve(None, true).expect("default model");
        let file = GgufFile::open(path).unwrap();
        Fixture {
            tokenizer: Tokenizer::from_gguf(&file).unwrap(),
            template: ChatTemplate::from_gguf_or_chatml(&file).unwrap(),
            model: Model::from_gguf(&file, Executor::new(2)).unwrap(),
        }
    })
}

/// Prompt tokens of a one-turn chat.
pub fn chat(f: &Fixture, user: &str) -> Vec<u32> {
    let text = f
        .template
        .render(&[ChatMessage::new("user", user)], true)
        .unwrap();
    f.tokenizer.encode_prompt(&text).unwrap()
}

/// The samplings every exactness test runs: greedy, and seeded sampling at temperature
/// 0.8, top-p 0.95 with `seed`.
pub fn greedy_and_seeded(seed: u64) -> [specdec_engine::SamplingParams; 2] {
    let sampled = specdec_engine::SamplingParams {
        temperature: 0.8,
        top_p: 0.95,
        seed,
        ..Default::default()
    };
    [Default::default(), sampled]
}
