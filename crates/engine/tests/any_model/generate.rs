//! The generation loop on the tier's model: determinism, the token limit, seeded sampling,
//! cancellation and bad requests.

use crate::common;

use common::{chat, fixture};
use specdec_engine::{Engine, EngineError, FinishReason, GenerateRequest, SamplingParams};

pub(crate) fn request(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest::new(prompt, max_tokens)
}

#[test]
fn greedy_is_deterministic_and_max_tokens_is_honoured() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let req = request(chat(f, "Write a poem about the sea."), 24);
    let a = engine.generate(&req, &mut |_| true).unwrap();
    let b = engine.generate(&req, &mut |_| true).unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    assert_eq!(a.completion_tokens, 24);
    assert_eq!(a.finish_reason, FinishReason::Length);
}

#[test]
fn seeded_sampling_reproduces_and_seeds_differ() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let mut req = request(chat(f, "Tell me a story about a dragon."), 32);
    req.sampling = SamplingParams {
        temperature: 1.0,
        top_p: 0.95,
        top_k: 50,
        seed: 11,
        ..SamplingParams::default()
    };
    let a = engine.generate(&req, &mut |_| true).unwrap();
    let b = engine.generate(&req, &mut |_| true).unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    req.sampling.seed = 12;
    let c = engine.generate(&req, &mut |_| true).unwrap();
    assert_ne!(a.token_ids, c.token_ids);
}

#[test]
fn a_sink_that_refuses_cancels() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let req = request(chat(f, "Write a long essay about rivers."), 100);
    let out = engine.generate(&req, &mut |_| false).unwrap();
    assert_eq!(out.finish_reason, FinishReason::Cancelled);
    assert!(out.completion_tokens < 100);
}

#[test]
fn bad_requests_are_clear_errors() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let err = engine
        .generate(&request(vec![], 8), &mut |_| true)
        .unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let ctx = f.model.config().context_length;
    let err = engine
        .generate(&request(vec![1; ctx], 8), &mut |_| true)
        .unwrap_err();
    assert!(matches!(err, EngineError::ContextOverflow { .. }), "{err}");
    assert!(err.to_string().contains("context"), "{err}");
    let mut req = request(vec![1, 2, 3], 8);
    req.sampling.temperature = f32::NAN;
    let err = engine.generate(&req, &mut |_| true).unwrap_err();
    assert!(err.to_string().contains("temperature"), "{err}");
}
