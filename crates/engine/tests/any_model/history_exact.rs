//! Drafting from the history of past requests, through the tier's model: repeats, edited
//! repeats and concurrent requests feeding one index all give exactly the plain output,
//! and a repeat is decoded in at most half the forwards.

use crate::common;

use common::{chat, fixture};
use specdec_engine::budget::CostModel;
use specdec_engine::{DraftMethod, Engine, GenerateRequest, SamplingParams};

const PROMPTS: [&str; 3] = [
    "Explain in three sentences why the sky is blue.",
    "Write a short poem about 12 cats on a boat.",
    "What are the main differences between TCP and UDP?",
];

fn request(prompt: &str, method: DraftMethod, sampling: &SamplingParams) -> GenerateRequest {
    GenerateRequest {
        sampling: sampling.clone(),
        ..GenerateRequest::new(chat(fixture(), prompt), 48)
    }
    .speculate(method)
}

#[test]
fn repeats_and_edited_repeats_equal_plain_and_repeats_take_few_forwards() {
    let f = fixture();
    // Draft sizes from the runtime's cost shape, not from this machine's timings, so the
    // forward count below does not depend on how loaded the machine is.
    let mut engine = Engine::new(&f.model, &f.tokenizer).with_cost_model(CostModel::frozen());
    let samplings = common::greedy_and_seeded(5);
    for sampling in &samplings {
        for method in [DraftMethod::History, DraftMethod::Auto] {
            for prompt in [PROMPTS[0], PROMPTS[1], PROMPTS[1], PROMPTS[0]] {
                let plain = engine
                    .generate(&request(prompt, DraftMethod::None, sampling), &mut |_| true)
                    .unwrap();
                let spec = engine
                    .generate(&request(prompt, method, sampling), &mut |_| true)
                    .unwrap();
                assert_eq!(
                    spec.token_ids,
                    plain.token_ids,
                    "{} on {prompt:?}",
                    method.name()
                );
            }
            // An edited repeat (one number changed) is still exact.
            let edited = PROMPTS[1].replace("12", "13");
            let plain = engine
                .generate(&request(&edited, DraftMethod::None, sampling), &mut |_| {
                    true
                })
                .unwrap();
            let spec = engine
                .generate(&request(&edited, method, sampling), &mut |_| true)
                .unwrap();
            assert_eq!(
                spec.token_ids,
                plain.token_ids,
                "{} on the edit",
                method.name()
            );
        }
    }
    // The history drafter alone decodes a greedy repeat in at most half the forwards.
    let greedy = SamplingParams::default();
    let plain = engine
        .generate(
            &request(PROMPTS[0], DraftMethod::None, &greedy),
            &mut |_| true,
        )
        .unwrap();
    let repeat = engine
        .generate(
            &request(PROMPTS[0], DraftMethod::History, &greedy),
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(repeat.token_ids, plain.token_ids);
    let decode = |o: &specdec_engine::GenerateOutput| o.forward_passes;
    assert!(
        decode(&repeat) * 2 <= decode(&plain),
        "{} forwards for a repeat vs {} plain",
        decode(&repeat),
        decode(&plain)
    );
}

#[test]
fn concurrent_requests_feeding_one_index_equal_plain() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let greedy = SamplingParams::default();
    // Requests with different lengths finish (and feed the shared index) while the others
    // are mid-flight, so drafters see the index change under them.
    let cases: Vec<(GenerateRequest, DraftMethod)> = [
        (PROMPTS[0], DraftMethod::History, 20),
        (PROMPTS[1], DraftMethod::Auto, 48),
        (PROMPTS[0], DraftMethod::Auto, 40),
        (PROMPTS[2], DraftMethod::History, 48),
        (PROMPTS[1], DraftMethod::History, 30),
    ]
    .into_iter()
    .map(|(p, m, max)| {
        let mut r = request(p, m, &greedy);
        r.max_tokens = max;
        (r, m)
    })
    .collect();
    let alone: Vec<Vec<u32>> = cases
        .iter()
        .map(|(r, _)| {
            let plain = GenerateRequest {
                speculation: Default::default(),
                ..r.clone()
            };
            engine.generate(&plain, &mut |_| true).unwrap().token_ids
        })
        .collect();
    for round in 0..2 {
        let mut gens: Vec<_> = cases
            .iter()
            .map(|(r, _)| engine.start(r.clone(), Box::new(|_| true)).unwrap())
            .collect();
        while gens.iter().any(|g| !g.is_finished()) {
            let mut batch: Vec<_> = gens.iter_mut().filter(|g| !g.is_finished()).collect();
            engine.step(&mut batch).unwrap();
        }
        for (i, g) in gens.into_iter().enumerate() {
            let out = engine.finish(g);
            assert_eq!(
                out.token_ids, alone[i],
                "request {i} differs (round {round})"
            );
        }
    }
    assert!(!engine.pools().global().history.lock().unwrap().is_empty());
}
