//! What both tiers' engine tests share: the tier's model (`crate::models`: the tiny
//! synthetic model offline, the default model in the real tier) with its tokenizer and chat
//! template, loaded once per test binary, the real models when cached, and prompts.

#![allow(dead_code)] // each test binary uses part of this

use std::sync::OnceLock;

use specdec_gguf::GgufFile;
use specdec_runtime::{Executor, Model};
use specdec_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

pub struct Fixture {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub template: ChatTemplate,
    /// Whether the file has its own chat template (`template` is ChatML otherwise).
    pub has_template: bool,
}

fn load(path: &std::path::Path) -> Fixture {
    let file = GgufFile::open(path).unwrap();
    Fixture {
        tokenizer: Tokenizer::from_gguf(&file).unwrap(),
        template: ChatTemplate::from_gguf_or_chatml(&file).unwrap(),
        has_template: ChatTemplate::from_gguf(&file).unwrap().is_some(),
        model: Model::from_gguf(&file, Executor::new(2)).unwrap(),
    }
}

/// This tier's model (see `crate::models`).
pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| load(&crate::models::path()))
}

/// Gemma 3 270M if it is cached (suites skip it, saying so, when it is not).
pub fn gemma_fixture() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        let Some(path) = specdec_model_store::cached(&specdec_model_store::GEMMA3_270M) else {
            eprintln!("skipping Gemma 3: not cached (`specdec model fetch gemma-3-270m`)");
            return None;
        };
        Some(load(&path))
    })
    .as_ref()
}

/// Qwen2.5-Coder-1.5B-Instruct if it is cached (CI fetches it; suites skip it, saying
/// so, when it is not).
pub fn qwen_fixture() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        let known = &specdec_model_store::QWEN25_CODER_15B;
        let Some(path) = specdec_model_store::cached(known) else {
            eprintln!(
                "skipping {}: not cached (`specdec model fetch {}`)",
                known.name, known.short_name
            );
            return None;
        };
        Some(load(&path))
    })
    .as_ref()
}

/// A model file loaded as a draft model (its own copy of the weights).
fn draft_from(path: &std::path::Path) -> specdec_engine::DraftModel {
    let file = GgufFile::open(path).unwrap();
    let model = Model::from_gguf(&file, Executor::new(2)).unwrap();
    specdec_engine::DraftModel::new(std::sync::Arc::new(model), 0.5)
}

/// The tier's model as a draft for itself: its greedy drafts are what greedy decoding
/// emits, so every path of the loop (deep accepts, sampled rejections, the draft's cache
/// rolled back and caught up) runs on a real runtime.
pub fn self_draft() -> &'static specdec_engine::DraftModel {
    static D: OnceLock<specdec_engine::DraftModel> = OnceLock::new();
    D.get_or_init(|| draft_from(&crate::models::path()))
}

/// Qwen2.5-Coder-0.5B-Instruct, the 1.5B's draft, if it is cached.
pub fn qwen_draft() -> Option<&'static specdec_engine::DraftModel> {
    static D: OnceLock<Option<specdec_engine::DraftModel>> = OnceLock::new();
    D.get_or_init(|| {
        let known = &specdec_model_store::QWEN25_CODER_05B;
        let Some(path) = specdec_model_store::cached(known) else {
            eprintln!(
                "skipping the {} draft: not cached (`specdec model fetch {}`)",
                known.name, known.short_name
            );
            return None;
        };
        Some(draft_from(&path))
    })
    .as_ref()
}

/// A prefix cache for the exactness suites, which run every method on the same prompts:
/// enough for all of them (copy-on-write forks of the finished sequences).
pub const PREFIX_CACHE_BYTES: usize = 1 << 30;

/// The models a suite runs on: this tier's model, and in the real tier Gemma 3 when cached.
pub fn fixtures() -> Vec<&'static Fixture> {
    std::iter::once(fixture())
        .chain(crate::models::others())
        .collect()
}

/// Prompt tokens for `user`: a one-turn chat through the file's template, or, for a model
/// without one (Gemma 3 base), the text itself as a completion prompt.
pub fn prompt(f: &Fixture, user: &str) -> Vec<u32> {
    if f.has_template {
        chat(f, user)
    } else {
        f.tokenizer.encode_prompt(user).unwrap()
    }
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
