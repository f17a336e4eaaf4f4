//! Beam searches as scheduler tasks, on the fake target: a search run beside chats returns
//! the list the runner returns alone (items and scores, bit for bit, in every mode), its
//! rows ride in the chats' forwards (it adds none of its own while a chat runs), the chat
//! advances at every step, a search whose client left or whose deadline passed leaves
//! at the next step, and a search whose forward fails fails alone.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use specdec_engine::beam::{BeamOptions, BeamOutput, BeamRunner, BeamVerify, Catalogue};
use specdec_engine::budget::CostModel;
use specdec_engine::{Engine, GenerateRequest, Job, Outcome, Scheduler};
use specdec_runtime::{FakeTarget, Logits, ModelConfig, RuntimeError, SeqInput, Sequence, Target};

use crate::fake::{tokenizer, VOCAB};

/// The fake target, counting its forwards.
struct Counting {
    inner: FakeTarget,
    forwards: AtomicUsize,
}

impl Counting {
    fn new() -> Self {
        Counting {
            inner: FakeTarget::new(VOCAB, 2048),
            forwards: AtomicUsize::new(0),
        }
    }

    fn forwards(&self) -> usize {
        self.forwards.load(Ordering::Relaxed)
    }
}

impl Target for Counting {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }
    fn new_sequence(&self) -> Sequence {
        self.inner.new_sequence()
    }
    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        self.forwards.fetch_add(1, Ordering::Relaxed);
        self.inner.forward(inputs)
    }
}

/// Entries of 1 to 6 tokens over ids 3..40 sharing prefixes, each ending in token 2.
fn catalogue() -> Arc<Catalogue> {
    let mut rng = specdec_engine::Rng::new(5);
    let seqs: Vec<Vec<u32>> = (0..60)
        .map(|_| {
            let len = 1 + (rng.next_u64() % 6) as usize;
            let mut s: Vec<u32> = (0..len)
                .map(|i| 3 + (rng.next_u64() % if i < 2 { 4 } else { 37 }) as u32)
                .collect();
            s.push(2);
            s
        })
        .collect();
    Arc::new(Catalogue::new(seqs).unwrap())
}

#[derive(Clone, Debug)]
struct Client {
    id: usize,
    gone: Rc<Cell<bool>>,
}

impl Job for Client {
    fn is_cancelled(&self) -> bool {
        self.gone.get()
    }
}

fn client(id: usize) -> Client {
    Client {
        id,
        gone: Rc::default(),
    }
}

fn chat() -> GenerateRequest {
    GenerateRequest::new((0..40).map(|i| 3 + (i * 7) % 200).collect(), 120)
}

fn modes() -> Vec<BeamOptions> {
    vec![
        BeamOptions::plain(5),
        BeamOptions::jump_forward(5),
        BeamOptions::speculative(5, BeamVerify::Strict),
        BeamOptions::speculative(5, BeamVerify::Relaxed { seed: 9 }),
    ]
}

/// A history long enough to take several prefill chunks.
fn history() -> Vec<u32> {
    (0..300).map(|i| 3 + (i * 13) % 250).collect()
}

#[test]
fn a_search_beside_a_chat_returns_the_runners_list_in_the_chats_forwards() {
    let draft = FakeTarget::new(VOCAB, 2048).with_noise_salt(3);
    let cat = catalogue();
    for opts in modes() {
        let t = Counting::new();
        let alone: Vec<BeamOutput> = BeamRunner::new(&t, Some(&draft))
            .unwrap()
            .frozen()
            .run(&cat, &[history()], &opts)
            .unwrap();
        let mut engine = Engine::new(&t, tokenizer()).with_cost_model(CostModel::frozen());
        let before = t.forwards();
        let chat_alone = engine.generate(&chat(), &mut |_| true).unwrap().token_ids;
        let chat_forwards = t.forwards() - before;

        let runner = BeamRunner::new(&t, Some(&draft as &dyn Target))
            .unwrap()
            .frozen();
        let engine = Engine::new(&t, tokenizer()).with_cost_model(CostModel::frozen());
        let mut sched = Scheduler::new(engine, 4).with_beams(runner);
        sched
            .admit(chat(), Box::new(|_: &str| true), client(0), None)
            .unwrap();
        sched
            .admit_search(cat.clone(), vec![history()], opts.clone(), client(1), None)
            .unwrap();
        let before = t.forwards();
        let (mut text, mut ranked) = (None, None);
        let (mut silent_steps, mut talking) = (0, false);
        while !sched.is_idle() {
            let mut advanced = false;
            // (Its first step reads the prompt and emits nothing.)
            let searching = ranked.is_none() && talking;
            for f in sched.step(&mut |c: &Client, _| advanced |= c.id == 0) {
                match f.outcome {
                    Outcome::Done(out) => text = Some(out.token_ids),
                    Outcome::Ranked(outs) => ranked = Some(outs),
                    other => panic!("{other:?}"),
                }
            }
            if searching && text.is_none() && !advanced {
                silent_steps += 1;
            }
            talking |= advanced;
        }
        let ranked = ranked.expect("the search ended");
        assert_eq!(ranked[0].items, alone[0].items, "{opts:?}");
        assert_eq!(text.unwrap(), chat_alone, "{opts:?}");
        assert_eq!(ranked[0].stats.relaxed, opts.is_relaxed());
        assert_eq!(silent_steps, 0, "the chat waited for the search: {opts:?}");
        // The chat outlives the search, so every forward of the search was one of the
        // chat's: together they took the chat's forwards alone.
        assert_eq!(t.forwards() - before, chat_forwards, "{opts:?}");
    }
}

#[test]
fn searches_batched_together_return_their_lists_alone() {
    let cat = catalogue();
    let t = FakeTarget::new(VOCAB, 2048);
    let histories: Vec<Vec<u32>> = (0..5)
        .map(|u| {
            (0..20 + u * 30)
                .map(|i| 3 + ((i + u) * 11) as u32 % 250)
                .collect()
        })
        .collect();
    let want: Vec<BeamOutput> = histories
        .iter()
        .map(|h| {
            BeamRunner::new(&t, None)
                .unwrap()
                .run(&cat, std::slice::from_ref(h), &BeamOptions::jump_forward(4))
                .unwrap()
                .remove(0)
        })
        .collect();
    let runner = BeamRunner::new(&t, None).unwrap();
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()), 3).with_beams(runner);
    let mut pending: Vec<usize> = (0..histories.len()).rev().collect();
    let mut got: Vec<Option<BeamOutput>> = vec![None; histories.len()];
    let mut peak = 0;
    while !(pending.is_empty() && sched.is_idle()) {
        while sched.has_room() {
            let Some(u) = pending.pop() else { break };
            let opts = BeamOptions::jump_forward(4);
            sched
                .admit_search(
                    cat.clone(),
                    vec![histories[u].clone()],
                    opts,
                    client(u),
                    None,
                )
                .unwrap();
        }
        peak = peak.max(sched.running());
        for f in sched.step(&mut |_, _| {}) {
            let Outcome::Ranked(mut outs) = f.outcome else {
                panic!("{:?}", f.outcome)
            };
            got[f.job.id] = outs.pop();
        }
    }
    assert_eq!(peak, 3, "searches count against max_concurrent");
    for (u, (g, w)) in got.into_iter().zip(&want).enumerate() {
        assert_eq!(g.unwrap().items, w.items, "user {u}");
    }
}

#[test]
fn a_search_whose_client_left_or_whose_deadline_passed_leaves_at_the_next_step() {
    let cat = catalogue();
    let t = FakeTarget::new(VOCAB, 2048);
    let runner = BeamRunner::new(&t, None).unwrap();
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()), 4).with_beams(runner);
    let a = client(0);
    let gone = a.gone.clone();
    let opts = BeamOptions::plain(8);
    sched
        .admit_search(cat.clone(), vec![history()], opts.clone(), a, None)
        .unwrap();
    let past = Instant::now() - Duration::from_millis(1);
    sched
        .admit_search(
            cat.clone(),
            vec![history()],
            opts.clone(),
            client(1),
            Some(past),
        )
        .unwrap();
    let first = sched.step(&mut |_, _| {});
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].job.id, 1);
    assert!(matches!(
        first[0].outcome,
        Outcome::Unranked { expired: true }
    ));
    gone.set(true);
    let second = sched.step(&mut |_, _| {});
    assert_eq!(second.len(), 1);
    assert!(matches!(
        second[0].outcome,
        Outcome::Unranked { expired: false }
    ));
    assert!(sched.is_idle());
    // Refused before any work: an empty prompt, or a scheduler without a runner.
    let refused = sched.admit_search(cat.clone(), vec![vec![]], opts.clone(), client(2), None);
    assert!(refused.is_err());
    let mut bare: Scheduler<'_, Client> = Scheduler::new(Engine::new(&t, tokenizer()), 4);
    let refused = bare.admit_search(cat, vec![history()], opts, client(3), None);
    assert!(refused
        .unwrap_err()
        .1
        .to_string()
        .contains("no beam searches"));
}

/// The fake target, failing every forward that reads `poison`.
struct Failing {
    inner: FakeTarget,
    poison: u32,
}

impl Target for Failing {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }
    fn new_sequence(&self) -> Sequence {
        self.inner.new_sequence()
    }
    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        if inputs
            .iter()
            .any(|i| i.nodes.iter().any(|n| n.token == self.poison))
        {
            return Err(RuntimeError::BadTree("poisoned".into()));
        }
        self.inner.forward(inputs)
    }
}

#[test]
fn a_search_whose_forward_fails_fails_alone() {
    let cat = catalogue();
    let inner = FakeTarget::new(VOCAB, 2048);
    let chat_alone = Engine::new(&inner, tokenizer())
        .generate(&chat(), &mut |_| true)
        .unwrap()
        .token_ids;
    let good = history();
    // A token no other request reads: only the bad search's forwards fail.
    let poison = (40..VOCAB as u32)
        .rev()
        .find(|t| !chat_alone.contains(t) && !chat().prompt.contains(t) && !good.contains(t))
        .expect("a token nobody else reads");
    let t = Failing { inner, poison };
    let mut bad = history();
    bad.push(poison);
    let want = BeamRunner::new(&t, None)
        .unwrap()
        .run(&cat, std::slice::from_ref(&good), &BeamOptions::plain(4))
        .unwrap();
    let runner = BeamRunner::new(&t, None).unwrap();
    let mut sched = Scheduler::new(Engine::new(&t, tokenizer()), 4).with_beams(runner);
    sched
        .admit(chat(), Box::new(|_: &str| true), client(0), None)
        .unwrap();
    for (id, h) in [(1, bad), (2, good)] {
        sched
            .admit_search(
                cat.clone(),
                vec![h],
                BeamOptions::plain(4),
                client(id),
                None,
            )
            .unwrap();
    }
    let mut outcomes: Vec<(usize, Outcome)> = sched
        .drain(&mut |_, _| {})
        .into_iter()
        .map(|f| (f.job.id, f.outcome))
        .collect();
    outcomes.sort_by_key(|o| o.0);
    match &outcomes[..] {
        [(0, Outcome::Done(text)), (1, Outcome::Failed(e)), (2, Outcome::Ranked(lists))] => {
            assert_eq!(text.token_ids, chat_alone);
            assert!(e.to_string().contains("poisoned"), "{e}");
            assert_eq!(lists[0].items, want[0].items);
        }
        other => panic!("{other:?}"),
    }
}
