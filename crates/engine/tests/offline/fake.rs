//! The engine's loop on a deterministic fake target (no model file; the whole binary runs
//! in seconds): every draft method equals plain decoding, greedy and sampled; the
//! scheduler batches, cancels, expires and confines a failure to its request; pools keep
//! their learning apart.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use specdec_drafters::{Drafter, Meta, Source, TokenTree};
use specdec_engine::budget::CostModel;
use specdec_engine::scheduler::Progress;
use specdec_engine::{
    Acceptance, CacheScope, DraftMethod, DraftModel, Engine, FinishReason, Forced, GenerateOutput,
    GenerateRequest, Job, Outcome, PoolName, Relaxed, SamplingParams, Scheduler, Tenant,
};
use specdec_gguf::write::Builder;
use specdec_gguf::{GgufFile, Value};
use specdec_runtime::FakeTarget;
use specdec_tokenizer::Tokenizer;

/// `<unk>`, `<s>`, `</s>`, then the 256 byte tokens: every id decodes to bytes.
pub(crate) const VOCAB: usize = 3 + 256;
pub(crate) const EOS: u32 = 2;

pub(crate) fn tokenizer() -> &'static Tokenizer {
    static T: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
        tokens.extend((0..=255).map(|b| format!("<0x{b:02X}>")));
        let mut types = vec![2, 3, 3];
        types.extend([6; 256]);
        let s = |v: &str| Value::String(v.into());
        let bytes = Builder::default()
            .kv("general.architecture", s("llama"))
            .kv("tokenizer.ggml.model", s("llama"))
            .kv(
                "tokenizer.ggml.tokens",
                Value::Array(tokens.iter().map(|t| s(t)).collect()),
            )
            .kv(
                "tokenizer.ggml.scores",
                Value::Array(vec![Value::F32(0.0); VOCAB]),
            )
            .kv(
                "tokenizer.ggml.token_type",
                Value::Array(types.into_iter().map(Value::I32).collect()),
            )
            .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
            .kv("tokenizer.ggml.eos_token_id", Value::U32(EOS))
            .kv("tokenizer.ggml.unknown_token_id", Value::U32(0))
            .build();
        Tokenizer::from_gguf(&GgufFile::from_bytes(bytes).unwrap()).unwrap()
    })
}

pub(crate) fn target() -> FakeTarget {
    FakeTarget::new(VOCAB, 512).with_eos(EOS, 60)
}

/// The `model` method's draft: the target's favourites with other noise, so it agrees on
/// the likeliest token often and on the rest of the order rarely.
pub(crate) fn draft() -> DraftModel {
    DraftModel::new(std::sync::Arc::new(target().with_noise_salt(11)), 0.3)
}

/// Byte tokens only (ids 3..259), as a prompt of text would be.
fn byte_tokens(max: usize) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(3u32..VOCAB as u32, 1..max)
}

pub(crate) fn request(
    prompt: &[u32],
    refs: &[Vec<u32>],
    sampling: &SamplingParams,
    max: usize,
) -> GenerateRequest {
    let mut r = GenerateRequest {
        sampling: sampling.clone(),
        ..GenerateRequest::new(prompt.to_vec(), max)
    };
    r.speculation.references = refs.to_vec();
    r
}

fn greedy_and_sampled() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![Just(0.0f32), 0.3f32..1.5],
        prop_oneof![Just(1.0f32), 0.5f32..1.0],
        any::<u64>(),
    )
        .prop_map(|(temperature, top_p, seed)| SamplingParams {
            temperature,
            top_p,
            seed,
            ..SamplingParams::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every method's output is plain decoding's, token for token and text for text;
    /// twice, so the second pass drafts from a trie that saw the first's output.
    #[test]
    fn every_method_equals_plain_on_the_fake_target(
        prompt in byte_tokens(40),
        refs in prop::collection::vec(byte_tokens(60), 0..3),
        budget in 1usize..24,
        sampling in greedy_and_sampled(),
    ) {
        let t = target();
        let mut engine = Engine::new(&t, tokenizer()).with_draft_model(draft());
        let mut req = request(&prompt, &refs, &sampling, 40);
        req.speculation.max_draft = budget;
        let plain = engine.generate(&req, &mut |_| true).unwrap();
        for _ in 0..2 {
            for m in DraftMethod::ALL.into_iter().skip(1) {
                let got = engine.generate(&req.clone().speculate(m), &mut |_| true).unwrap();
                prop_assert_eq!(&got.token_ids, &plain.token_ids, "{}", m.name());
                prop_assert_eq!(&got.text, &plain.text);
                prop_assert_eq!(got.finish_reason, plain.finish_reason);
            }
        }
    }
}

#[test]
fn drafts_are_accepted_and_save_forwards_on_the_fake_target() {
    let t = target();
    // The fake's forward costs grow with its rows (it has no weights to stream), so a cost
    // curve learned from its timings says no draft pays: size drafts by the runtime's shape.
    let mut engine = Engine::new(&t, tokenizer())
        .with_draft_model(draft())
        .with_cost_model(CostModel::frozen());
    let prompt: Vec<u32> = (0..30).map(|i| 3 + (i * 7 % 50) as u32).collect();
    let req = request(&prompt, &[], &SamplingParams::default(), 50);
    let plain = engine.generate(&req, &mut |_| true).unwrap();
    for m in DraftMethod::ALL.into_iter().skip(1) {
        // The history method drafts from past requests: its first run only feeds it.
        let runs = if m == DraftMethod::History { 2 } else { 1 };
        for run in 1..=runs {
            let got = engine
                .generate(&req.clone().speculate(m), &mut |_| true)
                .unwrap();
            assert_eq!(got.token_ids, plain.token_ids, "{}", m.name());
            if run == runs {
                assert!(
                    got.spec.accepted_tokens > 0,
                    "{} never had a draft accepted: {:?}",
                    m.name(),
                    got.spec
                );
            }
        }
    }
}

#[test]
fn the_stop_token_ends_generation_and_is_not_emitted() {
    let t = FakeTarget::new(VOCAB, 512).with_eos(EOS, 8);
    let mut engine = Engine::new(&t, tokenizer()).with_draft_model(draft());
    let out = engine
        .generate(
            &request(&[10, 11, 12], &[], &SamplingParams::default(), 400),
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(out.finish_reason, FinishReason::Stop);
    assert!(!out.token_ids.contains(&EOS));
    assert!(out.completion_tokens < 400);
}

/// Keeps what its request's end handed it.
struct EndRecorder(std::sync::Arc<std::sync::Mutex<Option<Vec<u32>>>>);

impl Drafter for EndRecorder {
    fn name(&self) -> &'static str {
        "end-recorder"
    }
    fn begin(&mut self, _: &[u32], _: &[Vec<u32>]) {}
    fn observe(&mut self, _: &[u32]) {}
    fn draft(&mut self, context: &[u32], _budget: usize) -> TokenTree {
        TokenTree::rooted(*context.last().unwrap())
    }
    fn end(&mut self, output: &[u32]) {
        *self.0.lock().unwrap() = Some(output.to_vec());
    }
}

/// A drafter learns where an answer ended: its output comes to `end` with the stop token
/// last when the model stopped on one (a repeat's history draft then ends there instead of
/// running on), and without one when `max_tokens` ended it.
#[test]
fn a_drafter_learns_the_stop_token_that_ended_its_output() {
    let t = FakeTarget::new(VOCAB, 512).with_eos(EOS, 8);
    for (max_tokens, stop) in [(400, Some(EOS)), (5, None)] {
        let req = request(&[10, 11, 12], &[], &SamplingParams::default(), max_tokens);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let mut engine = Engine::new(&t, tokenizer());
        let recorder = Box::new(EndRecorder(std::sync::Arc::clone(&seen)));
        let mut g = engine
            .start_with(req, Some(recorder), Box::new(|_: &str| true))
            .unwrap();
        while !g.is_finished() {
            engine.step(&mut [&mut g]).unwrap();
        }
        let out = engine.finish(g);
        assert_eq!(out.stop_token, stop);
        let want: Vec<u32> = out.token_ids.iter().chain(&stop).copied().collect();
        assert_eq!(seen.lock().unwrap().as_deref(), Some(&want[..]));
    }
}

/// A payload that can be cancelled from outside.
#[derive(Debug)]
struct Client {
    id: usize,
    gone: std::rc::Rc<std::cell::Cell<bool>>,
}

impl Job for Client {
    fn is_cancelled(&self) -> bool {
        self.gone.get()
    }
}

fn client(id: usize) -> Client {
    Client {
        id,
        gone: Default::default(),
    }
}

fn done(o: Outcome) -> Box<GenerateOutput> {
    match o {
        Outcome::Done(out) => out,
        other => panic!("expected a finished request, got {other:?}"),
    }
}

/// Admits pending requests, the last first, while the scheduler has room.
fn admit_pending(sched: &mut Scheduler<'_, Client>, pending: &mut Vec<(usize, GenerateRequest)>) {
    while sched.has_room() {
        let Some((i, r)) = pending.pop() else { break };
        sched
            .admit(r, Box::new(|_: &str| true), client(i), None)
            .unwrap();
    }
}

#[test]
fn the_scheduler_batches_requests_with_different_methods_into_the_same_outputs() {
    let t = target();
    let mut alone = Engine::new(&t, tokenizer()).with_draft_model(draft());
    let reqs: Vec<GenerateRequest> = (0..7)
        .map(|i| {
            let prompt: Vec<u32> = (0..20 + i)
                .map(|k| 3 + ((k * (i + 3)) % 40) as u32)
                .collect();
            let s = SamplingParams {
                temperature: if i % 2 == 0 { 0.0 } else { 0.8 },
                seed: i as u64,
                ..SamplingParams::default()
            };
            request(&prompt, &[], &s, 30 + i)
                .speculate(DraftMethod::ALL[i % DraftMethod::ALL.len()])
        })
        .collect();
    let want: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| alone.generate(r, &mut |_| true).unwrap().token_ids)
        .collect();
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()).with_draft_model(draft()), 3);
    let mut pending: Vec<(usize, GenerateRequest)> = reqs.into_iter().enumerate().collect();
    pending.reverse();
    let mut got = vec![Vec::new(); want.len()];
    let mut peak = 0;
    let mut heard = vec![0usize; want.len()];
    while !(pending.is_empty() && sched.is_idle()) {
        admit_pending(&mut sched, &mut pending);
        peak = peak.max(sched.running());
        for f in sched.step(&mut |c: &Client, p: Progress| heard[c.id] += p.new_tokens) {
            got[f.job.id] = done(f.outcome).token_ids;
        }
    }
    assert_eq!(peak, 3, "at most max_concurrent run together");
    assert_eq!(got, want);
    let lens: Vec<usize> = want.iter().map(Vec::len).collect();
    assert!(
        heard.iter().zip(&lens).all(|(h, l)| h >= l),
        "progress {heard:?} vs {lens:?}"
    );
}

#[test]
fn a_cancelled_or_expired_request_leaves_at_the_next_step() {
    let t = FakeTarget::new(VOCAB, 4096);
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()).with_draft_model(draft()), 4);
    let long = request(&[5, 6, 7], &[], &SamplingParams::default(), 3000);
    let a = client(0);
    let gone = a.gone.clone();
    sched
        .admit(long.clone(), Box::new(|_: &str| true), a, None)
        .unwrap();
    let past = Instant::now() - Duration::from_millis(1);
    sched
        .admit(
            long.clone(),
            Box::new(|_: &str| true),
            client(1),
            Some(past),
        )
        .unwrap();
    sched
        .admit(long, Box::new(|_: &str| true), client(2), None)
        .unwrap();
    let first = sched.step(&mut |_, _| {});
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].job.id, 1);
    assert!(matches!(first[0].outcome, Outcome::Expired(_)));
    gone.set(true);
    let second = sched.step(&mut |_, _| {});
    assert_eq!(second.len(), 1);
    let out = done(second.into_iter().next().unwrap().outcome);
    assert_eq!(out.finish_reason, FinishReason::Cancelled);
    assert_eq!(sched.running(), 1);
}

/// Proposes a token outside the vocabulary (as a reference copy, which even a request's
/// first step verifies): the forward refuses it.
struct OutOfVocab;

impl Drafter for OutOfVocab {
    fn name(&self) -> &'static str {
        "out-of-vocab"
    }
    fn begin(&mut self, _: &[u32], _: &[Vec<u32>]) {}
    fn observe(&mut self, _: &[u32]) {}
    fn draft(&mut self, context: &[u32], _budget: usize) -> TokenTree {
        let mut t = TokenTree::rooted(*context.last().unwrap());
        t.push(
            VOCAB as u32 + 5,
            Some(0),
            Meta::drafted(Source::Reference, 1.0),
        );
        t
    }
    fn end(&mut self, _: &[u32]) {}
}

#[test]
fn a_step_that_fails_fails_only_its_request() {
    let t = target();
    let req = request(&[9, 8, 7, 6], &[], &SamplingParams::default(), 20);
    let want = Engine::new(&t, tokenizer())
        .with_draft_model(draft())
        .generate(&req, &mut |_| true)
        .unwrap();
    let mut engine = Engine::new(&t, tokenizer()).with_draft_model(draft());
    let bad = engine
        .start_with(
            req.clone(),
            Some(Box::new(OutOfVocab)),
            Box::new(|_: &str| true),
        )
        .unwrap();
    let good = engine.start(req.clone(), Box::new(|_: &str| true)).unwrap();
    let mut gens = [bad, good];
    let err = loop {
        let mut batch: Vec<_> = gens.iter_mut().filter(|g| !g.is_finished()).collect();
        if let Err(e) = engine.step(&mut batch) {
            break e;
        }
    };
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    // Through the scheduler, the failure stays with the request that caused it.
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()).with_draft_model(draft()), 4);
    let bad = Some(Box::new(OutOfVocab) as Box<dyn Drafter>);
    let sink = || Box::new(|_: &str| true);
    sched
        .admit_with(req.clone(), bad, sink(), client(0), None)
        .unwrap();
    sched.admit(req.clone(), sink(), client(1), None).unwrap();
    sched.admit(req.clone(), sink(), client(2), None).unwrap();
    let mut outcomes = Vec::new();
    while !sched.is_idle() {
        outcomes.extend(sched.step(&mut |_, _| {}));
    }
    assert_eq!(outcomes.len(), 3);
    for f in outcomes {
        match (f.job.id, f.outcome) {
            (0, Outcome::Failed(e)) => assert!(e.to_string().contains("outside"), "{e}"),
            (1 | 2, Outcome::Done(out)) => assert_eq!(out.token_ids, want.token_ids),
            (id, o) => panic!("request {id}: {o:?}"),
        }
    }
}

#[test]
fn steps_that_fail_for_every_request_are_counted_until_one_succeeds() {
    let t = target();
    // One prompt token: the first step already verifies a draft (no prefill).
    let req = request(&[9], &[], &SamplingParams::default(), 20);
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()).with_draft_model(draft()), 4);
    let sink = || Box::new(|_: &str| true);
    for n in 1..=3 {
        let bad = Some(Box::new(OutOfVocab) as Box<dyn Drafter>);
        sched
            .admit_with(req.clone(), bad, sink(), client(n), None)
            .unwrap();
        let left = sched.step(&mut |_, _| {});
        assert!(matches!(left[0].outcome, Outcome::Failed(_)));
        assert_eq!(sched.failing_steps(), n);
    }
    sched.admit(req, sink(), client(9), None).unwrap();
    sched.step(&mut |_, _| {});
    assert_eq!(sched.failing_steps(), 0);
}

#[test]
fn a_pool_learns_only_from_its_own_requests() {
    let t = target();
    let mut engine = Engine::new(&t, tokenizer()).with_draft_model(draft());
    let a = PoolName::parse("group-a").unwrap();
    let b = PoolName::parse("group-b").unwrap();
    let mut req = request(
        &[40, 41, 42, 43, 44, 45],
        &[],
        &SamplingParams::default(),
        40,
    )
    .speculate(DraftMethod::Auto);
    req.speculation.pool = Some(a.clone());
    let out = engine.generate(&req, &mut |_| true).unwrap();
    assert!(out.completion_tokens > 8);
    let pools = engine.pools_mut();
    let ta = pools.trie(Some(&a)).unwrap();
    let tb = pools.trie(Some(&b)).unwrap();
    let global = pools.global().trie.clone();
    assert!(!ta.lock().unwrap().is_empty(), "pool a learned nothing");
    assert!(
        tb.lock().unwrap().is_empty(),
        "pool b learned from pool a's request"
    );
    assert!(
        global.lock().unwrap().is_empty(),
        "the global trie learned from a pool's request"
    );
    let (ha, hb) = (pools.pool(Some(&a)).unwrap(), pools.pool(Some(&b)).unwrap());
    assert!(
        ha.history.lock().unwrap().tokens() > 0,
        "pool a's history learned nothing"
    );
    assert!(
        hb.history.lock().unwrap().is_empty(),
        "pool b's history learned from a"
    );
    assert!(pools.global().history.lock().unwrap().is_empty());
    // A repeat in the same pool drafts from what it learned.
    let again = engine.generate(&req, &mut |_| true).unwrap();
    assert_eq!(again.token_ids, out.token_ids);
    assert!(again.spec.accepted_tokens > 0);
    // The same request in pool b leaves b exactly as it leaves a fresh pool c (nothing of
    // a's reaches b), and leaves a as it was.
    let contents = |engine: &mut Engine<'_>, p: &PoolName| {
        let pool = engine.pools_mut().pool(Some(p)).unwrap();
        let trie = pool.trie.lock().unwrap().entries();
        let docs: Vec<Vec<u32>> = pool
            .history
            .lock()
            .unwrap()
            .documents_held()
            .map(<[u32]>::to_vec)
            .collect();
        (trie, docs)
    };
    let before_a = contents(&mut engine, &a);
    let c = PoolName::parse("group-c").unwrap();
    for p in [&b, &c] {
        let mut other = req.clone();
        other.speculation.pool = Some(p.clone());
        let got = engine.generate(&other, &mut |_| true).unwrap();
        assert_eq!(got.token_ids, out.token_ids);
    }
    assert_eq!(contents(&mut engine, &b), contents(&mut engine, &c));
    assert_eq!(
        contents(&mut engine, &a),
        before_a,
        "pool b's request changed pool a"
    );
}

/// Forced output (the benchmark's `--forced`): whatever the drafter, the sampling and the
/// target's logits, the output is the forced tokens, ending with them.
#[test]
fn a_forced_generation_emits_exactly_the_forced_tokens_with_any_drafter() {
    let t = target();
    let mut engine = Engine::new(&t, tokenizer())
        .with_draft_model(draft())
        .with_cost_model(CostModel::frozen());
    let prompt: Vec<u32> = (0..20).map(|i| 3 + (i * 5 % 40) as u32).collect();
    let answer: Vec<u32> = (0..35).map(|i| 3 + (i * 11 % 200) as u32).collect();
    let forced = Forced::new([prompt.clone(), answer.clone()].concat());
    let sampled = SamplingParams {
        temperature: 0.8,
        seed: 3,
        ..SamplingParams::default()
    };
    for sampling in [SamplingParams::default(), sampled] {
        for m in DraftMethod::ALL {
            // The answer as a reference: reference drafting copies it, so drafts are
            // accepted; the other methods mostly draft the target's own guesses.
            let mut req =
                request(&prompt, std::slice::from_ref(&answer), &sampling, 100).speculate(m);
            let out = engine
                .generate_forced(&req, forced.clone(), &mut |_| true)
                .unwrap();
            assert_eq!(out.token_ids, answer, "{}", m.name());
            assert_eq!(out.finish_reason, FinishReason::Length);
            assert!(out.forced && out.relaxed);
            if m == DraftMethod::Reference {
                assert!(out.spec.accepted_tokens > 0, "{:?}", out.spec);
                assert!(out.spec.steps < answer.len(), "{:?}", out.spec);
            }
            req.max_tokens = 10;
            let short = engine
                .generate_forced(&req, forced.clone(), &mut |_| true)
                .unwrap();
            assert_eq!(short.token_ids, answer[..10]);
        }
    }
    let other = request(&[9, 9, 9], &[], &SamplingParams::default(), 10);
    assert!(engine
        .generate_forced(&other, forced, &mut |_| true)
        .is_err());
}

/// Relaxed verification is greedy only: a sampled request is refused before any work,
/// with a message that says so; a greedy one runs and says which rule produced it.
#[test]
fn a_relaxed_request_must_be_greedy() {
    let t = target();
    let mut engine = Engine::new(&t, tokenizer())
        .with_draft_model(draft())
        .with_cost_model(CostModel::frozen());
    let prompt: Vec<u32> = (0..20).map(|i| 3 + (i * 7 % 50) as u32).collect();
    let sampled = SamplingParams {
        temperature: 0.8,
        ..SamplingParams::default()
    };
    let mut req = request(&prompt, &[], &sampled, 20).speculate(DraftMethod::Auto);
    req.speculation.acceptance = Acceptance::Relaxed(specdec_engine::Relaxed::DEFAULT);
    match engine.generate(&req, &mut |_| true) {
        Err(specdec_engine::EngineError::InvalidRequest(m)) => {
            assert!(m.contains("greedy"), "{m}")
        }
        other => panic!("expected an invalid request, got {other:?}"),
    }
    req.sampling = SamplingParams::default();
    let out = engine.generate(&req, &mut |_| true).unwrap();
    assert!(out.relaxed && !out.forced);
    assert!(out.spec.relaxed_tokens <= out.spec.accepted_tokens);
}

/// Regression (tenant leak): the default drafting pool was shared by every client, so a
/// second tenant confirmed a first tenant's exact prompt from the acceptance statistics of
/// a guess (every drafted token accepted), and with relaxed verification the first
/// tenant's text reached the second tenant's output. Each tenant now drafts from its own
/// pools: what tenant B sees after tenant A ran the prompt is what a fresh engine shows.
#[test]
fn drafting_state_does_not_leak_between_tenants() {
    let t = target();
    let prompt = [70, 71, 72, 73, 74, 75, 76, 77];
    let tenant = |id: &str, relaxed: bool| {
        let mut r =
            request(&prompt, &[], &SamplingParams::default(), 48).speculate(DraftMethod::Auto);
        r.cache_scope = CacheScope::Tenant(Tenant::new(id));
        if relaxed {
            r.speculation.acceptance = Acceptance::Relaxed(Relaxed::new(64, 0.0).unwrap());
        }
        r
    };
    // Frozen costs: the timings of forwards are the machine's, not a tenant's. No draft
    // model: its drafter (one per request, sharing nothing) sizes drafts by its timings.
    let new_engine = || Engine::new(&t, tokenizer()).with_cost_model(CostModel::frozen());
    for relaxed in [false, true] {
        let mut engine = new_engine();
        let a = engine
            .generate(&tenant("a", relaxed), &mut |_| true)
            .unwrap();
        let a_again = engine
            .generate(&tenant("a", relaxed), &mut |_| true)
            .unwrap();
        assert!(
            a_again.spec.accepted_tokens > a.spec.accepted_tokens,
            "a tenant's own repeat drafts from what it learned"
        );
        let b = engine
            .generate(&tenant("b", relaxed), &mut |_| true)
            .unwrap();
        let alone = new_engine()
            .generate(&tenant("b", relaxed), &mut |_| true)
            .unwrap();
        assert_eq!(b.token_ids, alone.token_ids, "relaxed {relaxed}");
        assert_eq!(
            (b.spec.drafted_tokens, b.spec.accepted_tokens),
            (alone.spec.drafted_tokens, alone.spec.accepted_tokens),
            "tenant b's acceptance tells it what tenant a asked (relaxed {relaxed})"
        );
        // Nor does the operator's global pool learn from tenants.
        assert!(engine.pools().global().trie.lock().unwrap().is_empty());
        assert!(engine.pools().global().history.lock().unwrap().is_empty());
        // A private request (API key, no tenant) reads and leaves nothing.
        let mut private = tenant("a", relaxed);
        private.cache_scope = CacheScope::Private;
        let p = engine.generate(&private, &mut |_| true).unwrap();
        assert_eq!(
            (p.spec.drafted_tokens, p.spec.accepted_tokens),
            (alone.spec.drafted_tokens, alone.spec.accepted_tokens)
        );
    }
}

/// A relaxed request whose reference is its own prompt, under a rule that accepts nearly
/// every draft: its text follows whatever its drafts are.
fn relaxed_copy() -> GenerateRequest {
    let prompt = [90, 91, 92, 93, 94, 95, 96, 97, 90, 91, 92];
    let mut relaxed = request(&prompt, &[prompt.to_vec()], &SamplingParams::default(), 64)
        .speculate(DraftMethod::Reference);
    relaxed.speculation.acceptance = Acceptance::Relaxed(Relaxed::new(64, 0.0).unwrap());
    relaxed
}

/// Regression (relaxed runs not reproducible): draft sizes followed the measured
/// wall-clock cost of forwards and the acceptance earlier requests learned, and relaxed
/// acceptance follows the drafts, so six identical runs gave six outputs. A relaxed
/// request is sized on the prior cost shape (for its scheduler's capacity; alone without
/// one), from the prior policy: the same request gives the same text whatever ran before
/// it and whatever the timings.
#[test]
fn relaxed_output_does_not_depend_on_timing_or_on_earlier_requests() {
    let t = target();
    let relaxed = relaxed_copy();
    let mut fresh = Engine::new(&t, tokenizer()).with_draft_model(draft());
    let first = fresh.generate(&relaxed, &mut |_| true).unwrap();
    // Another engine whose cost model learned absurd timings and whose acceptance
    // memories learned from other requests.
    let mut warm = Engine::new(&t, tokenizer()).with_draft_model(draft());
    for ms in [0.1, 500.0, 3.0] {
        let mut cost = CostModel::default();
        for rows in 1..64 {
            cost.observe(rows, 100, ms * rows as f64 * rows as f64);
        }
        warm = warm.with_cost_model(cost);
        for p in [[40u32, 41, 42, 43], [44, 45, 46, 47]] {
            let strict = request(&p, &[p.to_vec()], &SamplingParams::default(), 30)
                .speculate(DraftMethod::Reference);
            warm.generate(&strict, &mut |_| true).unwrap();
        }
        let again = warm.generate(&relaxed, &mut |_| true).unwrap();
        assert_eq!(
            again.token_ids, first.token_ids,
            "timings {ms} ms per row^2"
        );
        assert_eq!(again.spec.drafted_tokens, first.spec.drafted_tokens);
    }
}

/// Runs `reqs` through a scheduler of `capacity` on a frozen cost model (timings mean
/// nothing on the fake), all admitted at once; their outputs in order.
fn scheduled(t: &FakeTarget, capacity: usize, reqs: &[GenerateRequest]) -> Vec<GenerateOutput> {
    let engine = Engine::new(t, tokenizer()).with_cost_model(CostModel::frozen());
    let mut sched = Scheduler::new(engine, capacity);
    let mut got: Vec<Option<GenerateOutput>> = vec![None; reqs.len()];
    let mut pending: Vec<(usize, GenerateRequest)> = reqs.iter().cloned().enumerate().collect();
    pending.reverse();
    while !(pending.is_empty() && sched.is_idle()) {
        admit_pending(&mut sched, &mut pending);
        for f in sched.step(&mut |_: &Client, _: Progress| {}) {
            got[f.job.id] = Some(*done(f.outcome));
        }
    }
    got.into_iter().map(Option::unwrap).collect()
}

/// Regression (LASER's relaxed knowledge at 0.82x of plain batching on the 1.5B at
/// concurrency 8): a relaxed request sized its drafts as if alone, so each member of a
/// full batch added 3-4 rows to every forward, where a row costs a member more than half
/// of a token. It is sized for a full batch of its scheduler's capacity: fewer drafted
/// nodes than with a capacity of one, and the same text whichever requests run beside it.
#[test]
fn a_relaxed_request_sizes_its_drafts_for_its_schedulers_full_batch() {
    let t = target();
    let relaxed = relaxed_copy();
    let alone = scheduled(&t, 1, std::slice::from_ref(&relaxed)).remove(0);
    let in_eight = scheduled(&t, 8, std::slice::from_ref(&relaxed)).remove(0);
    assert!(alone.relaxed && in_eight.relaxed);
    assert!(
        in_eight.spec.drafted_tokens < alone.spec.drafted_tokens,
        "drafted {} for a batch of 8, {} alone",
        in_eight.spec.drafted_tokens,
        alone.spec.drafted_tokens
    );
    // Beside seven strict requests, the relaxed one drafts and writes as it does alone in
    // the same scheduler.
    let mut reqs = vec![relaxed];
    reqs.extend((0..7u32).map(|i| {
        let p = [40 + i, 41, 42, 43, 40 + i, 41];
        request(&p, &[p.to_vec()], &SamplingParams::default(), 40).speculate(DraftMethod::Auto)
    }));
    let beside = scheduled(&t, 8, &reqs).remove(0);
    assert_eq!(beside.token_ids, in_eight.token_ids);
    assert_eq!(beside.spec.drafted_tokens, in_eight.spec.drafted_tokens);
}

/// Regression: `prompt + max_tokens` wrapped for a max_tokens near 2^64, so the context
/// check passed and the request decoded until the runtime ran out of context.
#[test]
fn max_tokens_near_2_to_the_64_is_a_context_overflow_not_a_wrap() {
    let t = target();
    let mut engine = Engine::new(&t, tokenizer()).with_draft_model(draft());
    for max in [usize::MAX, usize::MAX - 1, usize::MAX - 2] {
        let req = request(&[40, 41, 42], &[], &SamplingParams::default(), max);
        let e = engine.generate(&req, &mut |_| true).unwrap_err();
        assert!(
            matches!(e, specdec_engine::EngineError::ContextOverflow { .. }),
            "{e}"
        );
    }
}
