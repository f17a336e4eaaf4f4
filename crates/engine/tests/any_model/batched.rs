//! Generations stepped together in one forward (mixed prefill and decode, mixed draft
//! methods, requests joining and leaving) produce exactly what each produces alone.

use crate::common;

use common::{chat, fixture};
use specdec_engine::{DraftMethod, Engine, GenerateRequest, Pool, SamplingParams};

#[test]
fn batched_generations_equal_each_alone() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let pool = Pool::default();
    let long = "Summarize: ".to_string() + &"The river flows to the sea. ".repeat(40);
    let cases = [
        ("Name three colors.", DraftMethod::None, 0.0, 24),
        (long.as_str(), DraftMethod::Auto, 0.0, 40),
        (
            "Count from one to ten in words.",
            DraftMethod::Prompt,
            0.7,
            30,
        ),
        ("What is Rust?", DraftMethod::Suffix, 0.0, 8),
    ];
    let reqs: Vec<(GenerateRequest, DraftMethod)> = cases
        .iter()
        .map(|&(p, m, temperature, max)| {
            let req = GenerateRequest {
                sampling: SamplingParams {
                    temperature,
                    seed: 11,
                    ..SamplingParams::default()
                },
                ..GenerateRequest::new(chat(f, p), max)
            };
            (req, m)
        })
        .collect();
    let alone: Vec<Vec<u32>> = reqs
        .iter()
        .map(|(req, _)| engine.generate(req, &mut |_| true).unwrap().token_ids)
        .collect();

    let mut gens: Vec<_> = reqs
        .iter()
        .map(|(req, m)| {
            let d = m.drafter(&pool, None).map(|d| d as Box<_>);
            engine
                .start_with(req.clone(), d, Box::new(|_| true))
                .unwrap()
        })
        .collect();
    // The last request joins after a few steps, as a server admits requests mid-flight.
    let late = gens.pop().unwrap();
    let mut late = Some(late);
    let mut steps = 0;
    while gens.iter().any(|g| !g.is_finished()) || late.is_some() {
        if steps == 3 {
            gens.extend(late.take());
        }
        let mut batch: Vec<_> = gens.iter_mut().filter(|g| !g.is_finished()).collect();
        engine.step(&mut batch).unwrap();
        steps += 1;
    }
    for (i, g) in gens.into_iter().enumerate() {
        let out = engine.finish(g);
        assert_eq!(out.token_ids, alone[i], "request {i} differs when batched");
    }
}

#[test]
fn a_cancelled_generation_stops_and_reports_it() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let mut seen = 0;
    let req = GenerateRequest::new(chat(f, "Tell me a long story."), 100);
    let out = engine
        .generate(&req, &mut |_| {
            seen += 1;
            seen < 3
        })
        .unwrap();
    assert_eq!(out.finish_reason.as_str(), "cancelled");
    assert!(out.completion_tokens < 10);
}
