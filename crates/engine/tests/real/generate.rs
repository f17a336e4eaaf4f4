//! The generation loop on the real model: what only a model that answers shows (a factual
//! answer ending at the end of its turn, a stop string in a count).

use crate::any_model::generate::request;
use crate::common;

use common::{chat, fixture};
use specdec_engine::{Engine, FinishReason};

#[test]
fn greedy_answers_a_factual_question_and_stops_at_end_of_turn() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let req = request(
        chat(f, "What is the capital of France? Answer in one sentence."),
        64,
    );
    let mut streamed = String::new();
    let out = engine
        .generate(&req, &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    assert!(out.text.contains("Paris"), "{}", out.text);
    assert_eq!(out.finish_reason, FinishReason::Stop);
    assert_eq!(streamed, out.text);
    assert_eq!(out.completion_tokens, out.token_ids.len());
    assert_eq!(
        f.tokenizer.decode(&out.token_ids, true),
        out.text,
        "text is the decoded tokens"
    );
}

#[test]
fn a_stop_string_ends_generation_and_is_not_emitted() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let mut req = request(chat(f, "Count from 1 to 20, separated by commas."), 80);
    let full = engine.generate(&req, &mut |_| true).unwrap();
    assert!(full.text.contains('5'), "{}", full.text);
    req.stop = vec!["5".into()];
    let mut streamed = String::new();
    let out = engine
        .generate(&req, &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    assert_eq!(out.finish_reason, FinishReason::Stop);
    assert_eq!(out.text, full.text[..full.text.find('5').unwrap()]);
    assert_eq!(streamed, out.text);
}
