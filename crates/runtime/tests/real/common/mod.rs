//! What the real-model runtime tests share: the model, bit views, prompts, prefill and
//! one-token-at-a-time decoding.
#![allow(dead_code)] // each test binary uses part of this

pub mod ppl;

use std::sync::OnceLock;

use rand::Rng;
use specdec_runtime::{Executor, Model, Node, SeqInput, Sequence, Want};

pub fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let path = specdec_model_store::resolve(None, true).expect("default model");
        Model::load_with(path, Executor::new(2)).expect("model loads")
    })
}

/// A model of the caller's own (the default model, loaded again): for tests that count
/// what one model does, which the shared [`model`]'s other users would disturb.
pub fn own_model() -> Model {
    let path = specdec_model_store::resolve(None, true).expect("default model");
    Model::load_with(path, Executor::new(2)).expect("model loads")
}

/// Gemma 3 270M if it is cached (its suites are skipped, saying so, when it is not: CI
/// fetches it, `specdec model fetch gemma-3-270m` does by hand).
pub fn gemma() -> Option<&'static Model> {
    static M: OnceLock<Option<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let Some(path) = specdec_model_store::cached(&specdec_model_store::GEMMA3_270M) else {
            eprintln!("skipping Gemma 3: not cached (`specdec model fetch gemma-3-270m`)");
            return None;
        };
        Some(Model::load_with(path, Executor::new(2)).expect("Gemma 3 loads"))
    })
    .as_ref()
}

/// A known model if it is cached (suites skip it, saying so, when it is not).
fn cached_model(
    known: &'static specdec_model_store::KnownModel,
    cell: &'static OnceLock<Option<Model>>,
) -> Option<&'static Model> {
    cell.get_or_init(|| {
        let Some(path) = specdec_model_store::cached(known) else {
            eprintln!(
                "skipping {}: not cached (`specdec model fetch {}`)",
                known.name, known.short_name
            );
            return None;
        };
        Some(Model::load_with(path, Executor::new(2)).expect("model loads"))
    })
    .as_ref()
}

/// Qwen2.5-Coder-1.5B-Instruct Q4_K_M if it is cached (CI fetches it).
pub fn qwen_1_5b() -> Option<&'static Model> {
    static M: OnceLock<Option<Model>> = OnceLock::new();
    cached_model(&specdec_model_store::QWEN25_CODER_15B, &M)
}

/// Qwen2.5-Coder-0.5B-Instruct if it is cached (CI fetches it).
pub fn qwen_0_5b() -> Option<&'static Model> {
    static M: OnceLock<Option<Model>> = OnceLock::new();
    cached_model(&specdec_model_store::QWEN25_CODER_05B, &M)
}

/// The real models a suite runs on: the default model, and Gemma 3 when cached.
pub fn models() -> Vec<&'static Model> {
    std::iter::once(model()).chain(gemma()).collect()
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn prompt(rng: &mut impl Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.gen_range(100..40000)).collect()
}

pub fn prefill(m: &Model, tokens: &[u32]) -> Sequence {
    let mut seq = m.new_sequence();
    let nodes = Node::chain(tokens);
    m.forward(&mut [SeqInput {
        seq: &mut seq,
        nodes: &nodes,
        want: Want::None,
    }])
    .unwrap();
    seq.commit_all().unwrap();
    seq
}

/// The bits of every node's logits, in node order, of one forward of `nodes` after `seq`.
pub fn tree_bits(m: &Model, seq: &mut Sequence, nodes: &[Node]) -> Vec<u32> {
    let out = m
        .forward(&mut [SeqInput {
            seq,
            nodes,
            want: Want::All,
        }])
        .expect("forward");
    (0..nodes.len())
        .flat_map(|i| bits(out[0].get(i).expect("all rows wanted")))
        .collect()
}

/// Logits after each token of `tokens`, decoding one token per forward.
pub fn sequential(m: &Model, seq: &mut Sequence, tokens: &[u32]) -> Vec<Vec<u32>> {
    tokens
        .iter()
        .map(|&t| {
            let nodes = [Node {
                token: t,
                parent: None,
            }];
            let out = m
                .forward(&mut [SeqInput {
                    seq: &mut *seq,
                    nodes: &nodes,
                    want: Want::Last,
                }])
                .unwrap();
            seq.commit_all().unwrap();
            bits(out[0].row(0))
        })
        .collect()
}
