//! LASER's relaxed verification through the real model: top-1 with tau 0 is plain greedy
//! decoding, and under the defaults every emitted token is one the rule accepts, checked
//! against the target's own logits over prompt + output (one plain forward).

use crate::common;

use common::{chat, fixture};
use specdec_engine::budget::CostModel;
use specdec_engine::{
    Acceptance, DraftMethod, Engine, FinishReason, GenerateOutput, GenerateRequest, Relaxed,
};
use specdec_runtime::{Node, SeqInput, Want};

/// Prompts whose answers repeat themselves or the prompt, so drafts are long and often
/// one of the target's top-2 where they are not its argmax.
const PROMPTS: [&str; 4] = [
    "Repeat this list three times: apple, banana, cherry, date, elderberry, fig, grape.",
    "Write the numbers from 1 to 40, separated by commas.",
    "Copy this sentence twice: The quick brown fox jumps over the lazy dog near the river bank.",
    "Describe the movie Toy Story (1995), genres Animation, Children's, Comedy, in two sentences.",
];

const MAX_TOKENS: usize = 80;

fn request(prompt: &str, method: DraftMethod, acceptance: Acceptance) -> GenerateRequest {
    let mut req = GenerateRequest::new(chat(fixture(), prompt), MAX_TOKENS).speculate(method);
    req.speculation.acceptance = acceptance;
    req
}

fn generate(engine: &mut Engine<'_>, req: &GenerateRequest) -> GenerateOutput {
    engine.generate(req, &mut |_| true).unwrap()
}

/// The target's logits before each output token: row m precedes `output[m]`.
fn rescore(prompt: &[u32], output: &[u32]) -> Vec<Vec<f32>> {
    let model = &fixture().model;
    let mut seq = model.new_sequence();
    let (head, last) = prompt.split_at(prompt.len() - 1);
    model
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(head),
            want: Want::None,
        }])
        .unwrap();
    seq.commit_all().unwrap();
    let chain = [last, output].concat();
    let logits = model
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(&chain),
            want: Want::All,
        }])
        .unwrap();
    (0..output.len())
        .map(|m| logits[0].row(m).to_vec())
        .collect()
}

/// Whether the rule accepts `token` after `logits` (no penalty): the argmax, or within the
/// top-k by (logit, lower id) with softmax probability above tau; and whether it is the
/// argmax. Written apart from the verifier: a full sort and an f64 softmax.
fn judge(logits: &[f32], token: u32, rule: Relaxed) -> (bool, bool) {
    let mut ranked: Vec<u32> = (0..logits.len() as u32).collect();
    ranked.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    let rank = ranked.iter().position(|&t| t == token).unwrap();
    let max = f64::from(logits[ranked[0] as usize]);
    let z: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
    let p = (f64::from(logits[token as usize]) - max).exp() / z;
    let ok = rank == 0 || (rank < rule.top_k() && p > f64::from(rule.tau()));
    (ok, rank == 0)
}

#[test]
fn top_1_with_tau_0_equals_plain_greedy_decoding() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer).with_cost_model(CostModel::frozen());
    let strictest = Acceptance::Relaxed(Relaxed::new(1, 0.0).unwrap());
    let mut accepted = 0;
    for prompt in PROMPTS {
        let plain = generate(
            &mut engine,
            &request(prompt, DraftMethod::None, Acceptance::Strict),
        );
        let relaxed = generate(
            &mut engine,
            &request(prompt, DraftMethod::Auto, strictest.clone()),
        );
        assert_eq!(relaxed.token_ids, plain.token_ids, "{prompt:?}");
        assert!(relaxed.relaxed);
        assert_eq!(relaxed.spec.relaxed_tokens, 0);
        accepted += relaxed.spec.accepted_tokens;
    }
    // A relaxed request starts from the prior draft policy (never from what earlier
    // requests learned), so some prompts may draft nothing that is accepted; together
    // they must, or the comparison above tested nothing.
    assert!(accepted > 0, "no prompt drafted a token that was accepted");
}

#[test]
fn every_relaxed_token_is_one_the_rule_accepts_under_the_target() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer).with_cost_model(CostModel::frozen());
    let rule = Relaxed::DEFAULT;
    let (mut relaxed_total, mut off_argmax_total, mut differ, mut tokens) = (0, 0, 0, 0);
    for method in [DraftMethod::Auto, DraftMethod::Prompt] {
        for prompt in PROMPTS {
            let plain = generate(
                &mut engine,
                &request(prompt, DraftMethod::None, Acceptance::Strict),
            );
            let req = request(prompt, method, Acceptance::Relaxed(rule));
            let out = generate(&mut engine, &req);
            assert!(out.relaxed && !out.forced);
            let logits = rescore(&req.prompt, &out.token_ids);
            let mut off_argmax = 0;
            for (m, (&t, l)) in out.token_ids.iter().zip(&logits).enumerate() {
                let (ok, argmax) = judge(l, t, rule);
                assert!(ok, "{prompt:?} token {m} ({t}) is not acceptable");
                off_argmax += usize::from(!argmax);
            }
            // Every token off the argmax was accepted by the relaxation (the bonus is always
            // the argmax). The count also holds accepted tokens a stop token cut off.
            assert!(off_argmax <= out.spec.relaxed_tokens, "{prompt:?}");
            if out.finish_reason == FinishReason::Length {
                assert_eq!(off_argmax, out.spec.relaxed_tokens, "{prompt:?}");
            }
            relaxed_total += out.spec.relaxed_tokens;
            off_argmax_total += off_argmax;
            tokens += out.token_ids.len();
            differ += usize::from(out.token_ids != plain.token_ids);
            eprintln!(
                "{:<7} {prompt:.40}: {} tokens, {} relaxed, MAL {:.2} ({} plain forwards, {} relaxed), {}",
                method.name(),
                out.token_ids.len(),
                out.spec.relaxed_tokens,
                out.spec.mean_accepted_length(out.completion_tokens),
                plain.forward_passes,
                out.forward_passes,
                if out.token_ids == plain.token_ids { "same as plain" } else { "differs" }
            );
        }
    }
    eprintln!(
        "relaxed tokens: {relaxed_total} of {tokens} ({off_argmax_total} off the argmax); \
         {differ} of {} outputs differ from plain",
        2 * PROMPTS.len()
    );
}
