//! A replay reproduces a real run step for step: on a fake target, with the same measured
//! cost curve behind both, every method's steps, draft sizes and accepted lengths of the
//! replay equal the real run's, and the output is the recording's.

use specdec_bench::cost::CostCurve;
use specdec_bench::replay::{replay, summarize, Recorded, COPY_ORACLE};
use specdec_bench::workload::method_pool;
use specdec_bench::BenchError;
use specdec_engine::budget::CostModel;
use specdec_engine::{
    DraftMethod, Engine, GenerateOutput, GenerateRequest, PoolName, Speculation, Target, Tokenizer,
};
use specdec_runtime::{FakeTarget, ReplayTarget};

pub(crate) fn curve() -> CostCurve {
    CostCurve::from_points(vec![
        (1, 30.0),
        (2, 33.0),
        (4, 39.0),
        (16, 100.0),
        (64, 330.0),
    ])
    .unwrap()
}

/// Prompts that repeat themselves in part, so the copying drafters find matches, one with
/// a reference the output may copy.
pub(crate) fn requests(vocab: u32) -> Vec<GenerateRequest> {
    (0..6u32)
        .map(|i| {
            let base: Vec<u32> = (0..24)
                .map(|j| 3 + (i * 7 + j * 13) % (vocab - 3))
                .collect();
            let prompt = [base.as_slice(), &base[4..16], &base[..8]].concat();
            let references = if i % 2 == 0 {
                vec![base[8..].to_vec()]
            } else {
                Vec::new()
            };
            GenerateRequest {
                speculation: Speculation {
                    references,
                    ..Speculation::default()
                },
                ..GenerateRequest::new(prompt, 48)
            }
        })
        .collect()
}

/// The real run a replay must reproduce: record by record, every method in turn, each
/// drafting from (and feeding) the pool `pool` names for the request and method.
fn real_run(
    fake: &FakeTarget,
    tok: &Tokenizer,
    reqs: &[GenerateRequest],
    methods: &[DraftMethod],
    pool: impl Fn(&GenerateRequest, DraftMethod) -> PoolName,
) -> Vec<GenerateOutput> {
    let mut real =
        Engine::new(fake, tok).with_cost_model(CostModel::measured(curve().points()).unwrap());
    let mut outs = Vec::new();
    for req in reqs {
        for &m in methods {
            let mut q = req.clone();
            q.speculation.method = m;
            q.speculation.pool = Some(pool(req, m));
            outs.push(real.generate(&q, &mut |_| true).unwrap());
        }
    }
    outs
}

#[test]
fn a_replay_takes_the_real_runs_steps_without_its_forwards() {
    let tok = specdec_testkit::tokenizer();
    let fake = FakeTarget::new(tok.vocab_size(), 512).with_eos(tok.eos_id().unwrap(), 30);
    let methods = [
        DraftMethod::None,
        DraftMethod::Reference,
        DraftMethod::Suffix,
        DraftMethod::Auto,
    ];
    let reqs = requests(tok.vocab_size() as u32);
    // The real run: record by record, every method in turn, each from its own pool.
    let outs = real_run(&fake, &tok, &reqs, &methods, |_, m| method_pool(m));
    let recorded: Vec<Recorded> = reqs
        .iter()
        .enumerate()
        .map(|(i, req)| Recorded {
            id: format!("r{i}"),
            request: req.clone(),
            output: outs[i * methods.len()].token_ids.clone(),
            stop_token: outs[i * methods.len()].stop_token,
            oracle_sources: Vec::new(),
        })
        .collect();
    let shape = ReplayTarget::new(fake.config());
    let mut engine =
        Engine::new(&shape, &tok).with_cost_model(CostModel::measured(curve().points()).unwrap());
    let all = replay(&mut engine, &curve(), &recorded, &methods, 32).unwrap();
    let (oracle, rows): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| r.method == COPY_ORACLE);
    assert_eq!(rows.len(), outs.len());
    // The copy oracle's plan is at least as cheap as the reference drafter's (which copies
    // only from what the oracle may copy from), and no slower than plain.
    for (o, mine) in oracle.iter().zip(rows.chunks(methods.len())) {
        assert_eq!(o.completion_tokens, mine[0].completion_tokens, "{}", o.id);
        assert!(o.modeled_decode_ms <= mine[0].modeled_decode_ms, "{}", o.id);
        assert!(
            o.modeled_decode_ms <= mine[1].modeled_decode_ms + 1e-9,
            "{}",
            o.id
        );
    }
    let mut drafted = 0;
    for (row, out) in rows.iter().zip(&outs) {
        assert_eq!(row.completion_tokens, out.completion_tokens, "{}", row.id);
        assert_eq!(
            row.decode_steps, out.spec.steps,
            "{} {}",
            row.id, row.method
        );
        assert_eq!(
            row.accepted_by_position, out.spec.accepted_by_position,
            "{} {}",
            row.id, row.method
        );
        assert_eq!(
            row.modeled_decode_ms,
            curve().steps_ms(&out.spec.steps_by_size),
            "{} {} replay {:?}, real {:?}",
            row.id,
            row.method,
            row.steps_by_size,
            out.spec.steps_by_size
        );
        drafted += out.spec.accepted_tokens;
    }
    assert!(drafted > 0, "the workload must exercise drafting");
    let summary = summarize(&rows);
    assert_eq!(summary[0].method, "none");
    assert_eq!(summary[0].modeled_speedup_vs_none, 1.0);
    assert!(summary.iter().any(|s| s.modeled_speedup_vs_none > 1.0));
}

#[test]
fn a_recording_from_another_vocabulary_is_an_error_not_a_replay() {
    let tok = specdec_testkit::tokenizer();
    let fake = FakeTarget::new(tok.vocab_size(), 512);
    let shape = ReplayTarget::new(fake.config());
    let mut engine =
        Engine::new(&shape, &tok).with_cost_model(CostModel::measured(curve().points()).unwrap());
    let rec = Recorded {
        id: "x".into(),
        request: GenerateRequest::new(vec![5, 6, 7], 4),
        // A token outside the vocabulary cannot be the target's output.
        output: vec![5, tok.vocab_size() as u32 + 3],
        stop_token: None,
        oracle_sources: Vec::new(),
    };
    let err = replay(&mut engine, &curve(), &[rec], &[DraftMethod::Suffix], 32).unwrap_err();
    assert!(matches!(err, BenchError::ReplayToken { .. }), "{err}");
    assert!(err.to_string().contains("vocabulary"), "{err}");
}

/// A knowledge job's replay (`rec replay`): records naming a pool draft from what the
/// records before them taught it, one copy per method, exactly as a real run with those
/// pools drafts; the copy oracle may copy from the sources the record says its pool held.
#[test]
fn records_naming_a_pool_replay_from_what_earlier_records_taught_it() {
    let tok = specdec_testkit::tokenizer();
    let fake = FakeTarget::new(tok.vocab_size(), 512);
    let methods = [DraftMethod::None, DraftMethod::History, DraftMethod::Auto];
    // Each request twice in a row: the repeat's output is in its pool's history.
    let reqs: Vec<GenerateRequest> = requests(tok.vocab_size() as u32)
        .into_iter()
        .take(3)
        .flat_map(|mut r| {
            r.speculation.references.clear();
            r.speculation.pool = Some(PoolName::parse("group-a").unwrap());
            [r.clone(), r]
        })
        .collect();
    // Each method's copy of the group's pool, as the replay names it.
    let outs = real_run(&fake, &tok, &reqs, &methods, |q, m| {
        let group = q.speculation.pool.as_ref().unwrap().as_str();
        PoolName::parse(&format!("{group}.{}", m.name())).unwrap()
    });
    let mut earlier: Vec<std::sync::Arc<[u32]>> = Vec::new();
    let mut recorded = Vec::new();
    for (i, req) in reqs.iter().enumerate() {
        let out = &outs[i * methods.len()];
        recorded.push(Recorded {
            id: format!("r{i}"),
            request: req.clone(),
            output: out.token_ids.clone(),
            stop_token: out.stop_token,
            oracle_sources: earlier.clone(),
        });
        earlier.push(out.written().into());
    }
    let shape = ReplayTarget::new(fake.config());
    let mut engine =
        Engine::new(&shape, &tok).with_cost_model(CostModel::measured(curve().points()).unwrap());
    let all = replay(&mut engine, &curve(), &recorded, &methods, 32).unwrap();
    let (oracle, rows): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| r.method == COPY_ORACLE);
    for (row, out) in rows.iter().zip(&outs) {
        assert_eq!(
            (row.decode_steps, &row.accepted_by_position),
            (out.spec.steps, &out.spec.accepted_by_position),
            "{} {}",
            row.id,
            row.method
        );
    }
    // Each repeat copies its first run's output from the pool, and the oracle, given that
    // output as a source, is at least as cheap as the history drafter.
    for k in (1..reqs.len()).step_by(2) {
        let history = &rows[k * methods.len() + 1];
        assert!(history.mean_accepted_length > 2.0, "{history:?}");
        assert!(oracle[k].modeled_decode_ms <= history.modeled_decode_ms + 1e-9);
    }
}
