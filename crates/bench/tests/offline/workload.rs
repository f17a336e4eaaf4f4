//! The workload harness on a fake target: outputs checked against plain decoding's, and
//! repetitions of a record that start from the same learned state.

use specdec_bench::workload::{self, run_together, Options, Prepared, Slot};
use specdec_engine::budget::CostModel;
use specdec_engine::{DraftMethod, Engine, Scheduler};
use specdec_runtime::FakeTarget;
use specdec_workloads::Record;

use crate::replay::{curve, requests};

fn run(repeats: usize) -> Vec<(String, &'static str, f64, usize)> {
    let tok = specdec_testkit::tokenizer();
    let fake = FakeTarget::new(tok.vocab_size(), 512).with_eos(tok.eos_id().unwrap(), 30);
    // A frozen cost model: draft sizes depend on acceptance alone, not on the fake's
    // timings.
    let engine =
        Engine::new(&fake, &tok).with_cost_model(CostModel::measured(curve().points()).unwrap());
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(engine, 1);
    let work: Vec<Prepared> = requests(tok.vocab_size() as u32)
        .into_iter()
        .enumerate()
        .map(|(i, request)| Prepared {
            record: Record {
                id: format!("r{i}"),
                prompt: String::new(),
                references: Vec::new(),
                max_tokens: request.max_tokens,
                chat: false,
                answer: None,
                class: None,
            },
            request,
            forced: None,
        })
        .collect();
    let opts = Options {
        methods: vec![DraftMethod::Suffix, DraftMethod::Auto],
        repeats,
        max_draft: 16,
        forced: None,
        verify: "strict",
        model: None,
    };
    let run = workload::run(
        &mut sched,
        &fake,
        &tok,
        &work,
        Vec::new(),
        &opts,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(run.records.len(), work.len() * 3);
    assert!(run.records.iter().all(|r| r.identical_to_plain));
    assert_eq!(run.summary[0].method, "none");
    run.records
        .iter()
        .map(|r| {
            (
                r.id.clone(),
                r.method,
                r.mean_accepted_length,
                r.forward_passes,
            )
        })
        .collect()
}

#[test]
fn repetitions_of_a_record_start_from_what_its_first_started_from() {
    // Every repetition starts from the pools and the acceptance memory the first one
    // started from, so each is the single run's step for step (a repetition that learned
    // from the one before it would draft more and report a higher MAL).
    let once = run(1);
    assert!(once.iter().any(|r| r.2 > 1.0), "the workload must draft");
    assert_eq!(run(3), once);
}

#[test]
fn steps_that_read_a_prompt_count_as_prefill() {
    // Two in flight, four requests: the first step reads two prompts, and each later
    // admission's prompt is read in a step beside the other request's decoding; every
    // other step decodes only.
    let tok = specdec_testkit::tokenizer();
    let fake = FakeTarget::new(tok.vocab_size(), 512).with_eos(tok.eos_id().unwrap(), 30);
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(Engine::new(&fake, &tok), 2);
    let reqs = requests(tok.vocab_size() as u32);
    let n = reqs.len();
    assert!(n >= 3, "later admissions");
    let got = run_together(&mut sched, reqs).unwrap();
    assert_eq!(got.outs.len(), n);
    let forwards: usize = got.outs.iter().map(|o| o.forward_passes).sum();
    assert!(
        got.prefill_steps >= n - 1,
        "{} prefill steps",
        got.prefill_steps
    );
    let steps = got.step_rows.len();
    assert!(got.prefill_steps < steps && steps <= forwards);
    assert!(got.prefill_secs <= got.secs);
}

#[test]
fn every_step_reports_the_rows_of_its_forward() {
    // A step's rows are what its requests put in one forward: every prompt token but the
    // last (prefill, in chunks), and per decode step the pending token and its draft
    // nodes. Summed over the steps they are what the outputs' own counts say, drafted or
    // not, two in flight.
    let tok = specdec_testkit::tokenizer();
    let fake = FakeTarget::new(tok.vocab_size(), 512).with_eos(tok.eos_id().unwrap(), 30);
    let mut drafted = Vec::new();
    for method in [DraftMethod::None, DraftMethod::Suffix] {
        let mut sched: Scheduler<'_, Slot> = Scheduler::new(Engine::new(&fake, &tok), 2);
        let reqs = requests(tok.vocab_size() as u32)
            .into_iter()
            .map(|mut r| {
                r.speculation.method = method;
                r
            })
            .collect();
        let got = run_together(&mut sched, reqs).unwrap();
        assert!(got.step_rows.iter().all(|&rows| rows > 0));
        let expected: usize = got
            .outs
            .iter()
            .map(|o| {
                let decode: usize = o
                    .spec
                    .steps_by_size
                    .iter()
                    .enumerate()
                    .map(|(k, &n)| n * (1 + k))
                    .sum();
                o.prompt_tokens - 1 + decode
            })
            .sum();
        assert_eq!(
            got.step_rows.iter().sum::<usize>(),
            expected,
            "{}",
            method.name()
        );
        drafted.push(
            got.outs
                .iter()
                .map(|o| o.spec.drafted_tokens)
                .sum::<usize>(),
        );
    }
    assert_eq!(drafted[0], 0);
    assert!(drafted[1] > 0, "the copying method must draft");
}
