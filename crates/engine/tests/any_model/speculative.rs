//! Speculative decoding equals plain decoding, token for token, whatever the drafts: right,
//! wrong, or mixed; greedy and seeded sampling. On the tier's models: the tiny synthetic
//! model offline; the default model, and Gemma 3 when cached, in the real tier.

use crate::common;

use common::{fixtures, prompt as prompt_tokens};
use specdec_drafters::{Drafter, Meta, Source, TokenTree};
use specdec_engine::{Engine, GenerateRequest, Rng, SamplingParams};

/// Drafts from a known answer (right with probability `p_right` per step) plus random
/// side branches: a test double for a real drafter.
struct Scripted {
    answer: Vec<u32>,
    prompt_len: usize,
    p_right: f64,
    rng: Rng,
    /// Random tokens are drawn below this: the vocabulary, at most SmolLM2's 49152.
    vocab: u64,
}

impl Drafter for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn begin(&mut self, prompt: &[u32], _refs: &[Vec<u32>]) {
        self.prompt_len = prompt.len();
    }
    fn observe(&mut self, _committed: &[u32]) {}
    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        let done = context.len() - self.prompt_len;
        let right = self.rng.next_f64() < self.p_right;
        let mut tree = TokenTree::rooted(*context.last().unwrap());
        let chain: Vec<u32> = if right {
            self.answer
                .iter()
                .skip(done)
                .take(budget / 2 + 1)
                .copied()
                .collect()
        } else {
            (0..budget / 2)
                .map(|_| (self.rng.next_u64() % self.vocab) as u32)
                .collect()
        };
        for (i, &t) in chain.iter().enumerate().take(budget) {
            tree.push(t, Some(i as u32), Meta::drafted(Source::Reference, 1.0));
        }
        while tree.drafted() < budget {
            let parent = (self.rng.next_u64() % tree.len() as u64) as usize;
            let token = (self.rng.next_u64() % self.vocab) as u32;
            if tree.child_with(Some(parent), token).is_some() {
                continue;
            }
            // Keep DFS order valid by appending leaves only under the last node or directly
            // below the root.
            let parent = if parent == tree.len() - 1 { parent } else { 0 };
            if tree.child_with(Some(parent), token).is_some() {
                continue;
            }
            tree.push(token, Some(parent as u32), Meta::drafted(Source::Trie, 0.1));
        }
        tree
    }
    fn end(&mut self, _output: &[u32]) {}
}

fn check(prompt: &str, sampling: SamplingParams, p_right: f64) {
    for f in fixtures() {
        check_on(f, prompt, sampling.clone(), p_right);
    }
}

fn check_on(f: &common::Fixture, prompt: &str, sampling: SamplingParams, p_right: f64) {
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let req = GenerateRequest {
        sampling,
        ..GenerateRequest::new(prompt_tokens(f, prompt), 48)
    };
    let plain = engine.generate(&req, &mut |_| true).unwrap();
    let mut drafter = Scripted {
        answer: plain.token_ids.clone(),
        prompt_len: 0,
        p_right,
        rng: Rng::new(5),
        vocab: f.model.config().vocab.min(49152) as u64,
    };
    let mut streamed = String::new();
    let spec = engine
        .generate_with(&req, Some(&mut drafter), &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    let model = &f.model.config().name;
    assert_eq!(
        spec.token_ids, plain.token_ids,
        "{model}: p_right {p_right}"
    );
    assert_eq!(spec.text, plain.text);
    assert_eq!(streamed, plain.text);
    assert_eq!(spec.finish_reason, plain.finish_reason);
    if p_right > 0.9 && plain.completion_tokens > 10 {
        assert!(
            spec.forward_passes < plain.forward_passes,
            "{} vs {}",
            spec.forward_passes,
            plain.forward_passes
        );
        assert!(spec.spec.accepted_tokens > 0);
    }
}

#[test]
fn greedy_with_right_wrong_and_mixed_drafts_equals_plain() {
    for p in [1.0, 0.0, 0.5] {
        check(
            "Explain what a hash map is in two sentences.",
            SamplingParams::default(),
            p,
        );
    }
}

#[test]
fn seeded_sampling_with_drafts_equals_plain_seeded_sampling() {
    for p in [1.0, 0.5] {
        let s = SamplingParams {
            temperature: 0.9,
            top_p: 0.9,
            top_k: 40,
            min_p: 0.02,
            repetition_penalty: 1.1,
            seed: 42,
            ..SamplingParams::default()
        };
        check("Write a short story about a lighthouse keeper.", s, p);
    }
}
