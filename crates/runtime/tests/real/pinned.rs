//! The forward's bits, pinned: kernel and runtime changes meant as pure speedups (weight
//! packing, register blocking, threading, attention scheduling) must leave every logit's
//! bits as they were. Every instruction set computes the same bits, so the pins hold on
//! any CPU. A change that alters them on purpose (new arithmetic) updates the pins and
//! says so.

use crate::common;

use specdec_runtime::{Model, Node};

/// FNV-1a over the bits of every logit of a tree (an 8-node chain and a branch), of one
/// node and of a 3-node chain (decoding's forward and a small draft's, which attention
/// schedules differently), each after a 40-token and after a 600-token prefix (past
/// Gemma's 512-position local window).
fn logits_hash(m: &Model) -> u64 {
    logits_hash_after(m, &[40, 600])
}

/// [`logits_hash`] after the given prefixes only (the 1.5B's 600-token prefill costs
/// seconds).
fn logits_hash_after(m: &Model, prefixes: &[u32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &prefix in prefixes {
        for shape in [Shape::Tree, Shape::One, Shape::Three] {
            tree_hash(m, prefix, shape, &mut h);
        }
    }
    h
}

#[derive(Clone, Copy)]
enum Shape {
    Tree,
    One,
    Three,
}

fn tree_hash(m: &Model, prefix: u32, shape: Shape, h: &mut u64) {
    let vocab = m.config().vocab as u32;
    let prefix: Vec<u32> = (0..prefix).map(|i| (i * 7919 + 13) % vocab).collect();
    let mut seq = common::prefill(m, &prefix);
    let chain: Vec<u32> = (0..8).map(|i| (i * 4241 + 77) % vocab).collect();
    let nodes = match shape {
        Shape::Tree => {
            let mut nodes = Node::chain(&chain);
            nodes.push(Node {
                token: 999 % vocab,
                parent: Some(2),
            });
            nodes
        }
        Shape::One => Node::chain(&chain[..1]),
        Shape::Three => Node::chain(&chain[..3]),
    };
    for v in common::tree_bits(m, &mut seq, &nodes) {
        for b in v.to_le_bytes() {
            *h = (*h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[test]
fn smollm2_logits_bits_are_pinned() {
    let got = logits_hash(common::model());
    eprintln!("smollm2 logits hash {got:#018x}");
    assert_eq!(got, SMOLLM2);
}

#[test]
fn gemma3_logits_bits_are_pinned() {
    let Some(m) = common::gemma() else { return };
    let got = logits_hash(m);
    eprintln!("gemma3 logits hash {got:#018x}");
    assert_eq!(got, GEMMA3);
}

/// The Qwen2.5-Coder pair: Q4_K, Q6_K, Q5_0 and Q8_0 matrices in their own formats.
#[test]
fn qwen_logits_bits_are_pinned() {
    for (name, m, want) in [
        ("1.5b", common::qwen_1_5b(), QWEN_1_5B),
        ("0.5b", common::qwen_0_5b(), QWEN_0_5B),
    ] {
        let Some(m) = m else { continue };
        let got = logits_hash_after(m, &[40]);
        eprintln!("qwen {name} logits hash {got:#018x}");
        assert_eq!(got, want, "qwen {name}");
    }
}

/// Measured on the build before the packed records kept f16 scales (2de2e66), where the
/// scales were widened at load: the same bits.
const SMOLLM2: u64 = 0x050d_e241_8502_d6be;
/// Re-pinned when Gemma's K-quant and Q5_0 matrices began to run in their own formats
/// instead of being converted to Q8_0 at load (different arithmetic on purpose; its
/// perplexity against llama.cpp is checked in `gemma3.rs`). Before: 0x5bfb_7d86_2030_d156.
const GEMMA3: u64 = 0xf2ae_21e9_5f48_ba19;
/// Pinned when the Qwen pair's formats became native (their first bits in specdec).
const QWEN_1_5B: u64 = 0x276a_36ca_d16b_4297;
const QWEN_0_5B: u64 = 0x6195_535e_6d2a_989c;
