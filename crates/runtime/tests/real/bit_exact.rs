//! Batch invariance of the whole forward on the real models (SmolLM2, and Gemma 3 when
//! cached): a node's logits are the same bits whether it is evaluated alone, in a chain,
//! inside a random tree, or next to another sequence.

use crate::common;
use rand::{Rng, SeedableRng};

use common::{bits, models, prefill, prompt, sequential};
use specdec_runtime::{Executor, Model, Node, SeqInput, Want};
use specdec_tree::ancestor_chains;

fn random_tree(rng: &mut impl Rng, n: usize) -> Vec<Node> {
    let mut nodes = vec![Node {
        token: rng.gen_range(100..40000),
        parent: None,
    }];
    for i in 1..n {
        nodes.push(Node {
            token: rng.gen_range(100..40000),
            parent: Some(rng.gen_range(0..i) as u32),
        });
    }
    nodes
}

#[test]
fn tree_nodes_match_decoding_their_branch_one_token_at_a_time() {
    models()
        .into_iter()
        .for_each(tree_nodes_match_decoding_their_branch_one_token_at_a_time_on);
}

fn tree_nodes_match_decoding_their_branch_one_token_at_a_time_on(m: &Model) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let p = prompt(&mut rng, 50);
    let base = prefill(m, &p);
    for n in [30, 64] {
        let tree = random_tree(&mut rng, n);
        tree_matches_its_branches(m, &base, &tree);
    }
}

/// Every node of `tree` after `base` has the logits of decoding its branch one token at a
/// time.
fn tree_matches_its_branches(m: &Model, base: &specdec_runtime::Sequence, tree: &[Node]) {
    let n = tree.len();
    let mut seq = base.clone();
    let out = m
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: tree,
            want: Want::All,
        }])
        .unwrap();
    // Check every leaf's branch (covers every node).
    let is_leaf = |i: usize| !tree.iter().any(|x| x.parent == Some(i as u32));
    let branches = ancestor_chains(tree).unwrap();
    for leaf in (0..n).filter(|&i| is_leaf(i)) {
        let path = &branches[leaf];
        let toks: Vec<u32> = path.iter().map(|&j| tree[j].token).collect();
        let mut s = base.clone();
        let seq_logits = sequential(m, &mut s, &toks);
        for (d, &j) in path.iter().enumerate() {
            assert_eq!(
                bits(out[0].get(j).unwrap()),
                seq_logits[d],
                "tree of {n} after {}: node {j} at depth {d} differs",
                base.len()
            );
        }
    }
}

/// Gemma 3's local layers see the last 512 positions. Rows past the window equal decoding
/// one token at a time: from one chain longer than the window (the first nodes of a row's
/// own path fall out of it), and from a tree after a prefix longer than the window (rows of
/// one attention block whose windows start at different prefix positions).
#[test]
fn sliding_window_rows_match_decoding_one_token_at_a_time() {
    let Some(m) = common::gemma() else { return };
    let w = m.arch_spec().layers[0]
        .sliding_window
        .expect("Gemma 3's first layer is local");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let p = prompt(&mut rng, w + 20);
    let mut seq = m.new_sequence();
    let out = m
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(&p),
            want: Want::All,
        }])
        .unwrap();
    let cut = w - 4;
    let mut s = prefill(m, &p[..cut]);
    for (k, want) in sequential(m, &mut s, &p[cut..]).iter().enumerate() {
        assert_eq!(
            &bits(out[0].get(cut + k).unwrap()),
            want,
            "position {}",
            cut + k
        );
    }
    let base = prefill(m, &p[..w + 5]);
    tree_matches_its_branches(m, &base, &random_tree(&mut rng, 30));
}

#[test]
fn after_committing_a_path_the_next_forward_matches_sequential() {
    models()
        .into_iter()
        .for_each(after_committing_a_path_the_next_forward_matches_sequential_on);
}

fn after_committing_a_path_the_next_forward_matches_sequential_on(m: &Model) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let p = prompt(&mut rng, 40);
    let base = prefill(m, &p);
    let tree = random_tree(&mut rng, 40);
    let leaf = tree.len() - 1;
    let path = ancestor_chains(&tree).unwrap().swap_remove(leaf);
    let mut seq = base.clone();
    m.forward(&mut [SeqInput {
        seq: &mut seq,
        nodes: &tree,
        want: Want::None,
    }])
    .unwrap();
    seq.commit(&path).unwrap();
    let mut reference = base.clone();
    let toks: Vec<u32> = path.iter().map(|&j| tree[j].token).collect();
    sequential(m, &mut reference, &toks);
    assert_eq!(seq.tokens(), reference.tokens());
    let next = prompt(&mut rng, 3);
    let a = sequential(m, &mut seq, &next);
    let b = sequential(m, &mut reference, &next);
    assert_eq!(a, b);
}

#[test]
fn draft_reject_continue_equals_never_drafting() {
    models()
        .into_iter()
        .for_each(draft_reject_continue_equals_never_drafting_on);
}

fn draft_reject_continue_equals_never_drafting_on(m: &Model) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let p = prompt(&mut rng, 30);
    let cont = prompt(&mut rng, 5);
    let mut plain = prefill(m, &p);
    let want = sequential(m, &mut plain, &cont);
    let mut spec = prefill(m, &p);
    // A draft that is entirely rejected: forward it, commit only its root.
    let mut draft = vec![Node {
        token: cont[0],
        parent: None,
    }];
    draft.extend(random_tree(&mut rng, 12).into_iter().map(|n| Node {
        token: n.token,
        parent: Some(n.parent.map_or(0, |p| p + 1)),
    }));
    m.forward(&mut [SeqInput {
        seq: &mut spec,
        nodes: &draft,
        want: Want::All,
    }])
    .unwrap();
    spec.commit(&[0]).unwrap();
    let got = sequential(m, &mut spec, &cont[1..]);
    assert_eq!(got, want[1..]);
}

#[test]
fn two_sequences_in_one_batch_equal_each_alone() {
    models()
        .into_iter()
        .for_each(two_sequences_in_one_batch_equal_each_alone_on);
}

fn two_sequences_in_one_batch_equal_each_alone_on(m: &Model) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let (pa, pb) = (prompt(&mut rng, 20), prompt(&mut rng, 33));
    let (ta, tb) = (random_tree(&mut rng, 9), random_tree(&mut rng, 17));
    let (mut a, mut b) = (prefill(m, &pa), prefill(m, &pb));
    let (mut a1, mut b1) = (a.clone(), b.clone());
    let both = m
        .forward(&mut [
            SeqInput {
                seq: &mut a,
                nodes: &ta,
                want: Want::All,
            },
            SeqInput {
                seq: &mut b,
                nodes: &tb,
                want: Want::All,
            },
        ])
        .unwrap();
    let alone_a = m
        .forward(&mut [SeqInput {
            seq: &mut a1,
            nodes: &ta,
            want: Want::All,
        }])
        .unwrap();
    let alone_b = m
        .forward(&mut [SeqInput {
            seq: &mut b1,
            nodes: &tb,
            want: Want::All,
        }])
        .unwrap();
    for i in 0..ta.len() {
        assert_eq!(
            bits(both[0].get(i).unwrap()),
            bits(alone_a[0].get(i).unwrap())
        );
    }
    for i in 0..tb.len() {
        assert_eq!(
            bits(both[1].get(i).unwrap()),
            bits(alone_b[0].get(i).unwrap())
        );
    }
}

#[test]
fn one_and_two_threads_and_every_isa_give_the_same_logits() {
    models()
        .into_iter()
        .for_each(one_and_two_threads_and_every_isa_give_the_same_logits_on);
}

/// `m`'s weights on 1 and 2 threads and on every instruction set this CPU has
/// (`Model::on_executor`: packing does not depend on the executor, so each runs the same
/// bytes without loading the file again).
fn one_and_two_threads_and_every_isa_give_the_same_logits_on(m: &Model) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let p = prompt(&mut rng, 12);
    let run = |exec: Executor| {
        let m = m.on_executor(exec);
        let mut seq = m.new_sequence();
        let nodes = Node::chain(&p);
        let out = m
            .forward(&mut [SeqInput {
                seq: &mut seq,
                nodes: &nodes,
                want: Want::All,
            }])
            .unwrap();
        (0..p.len())
            .map(|i| bits(out[0].row(i)))
            .collect::<Vec<_>>()
    };
    let reference = run(Executor::new(2));
    assert_eq!(run(Executor::new(1)), reference, "1 thread differs");
    for isa in specdec_runtime::Isa::available() {
        let got = run(Executor::with_isa(2, isa).unwrap());
        assert_eq!(got, reference, "{} differs", isa.name());
    }
}

#[test]
fn context_overflow_and_bad_trees_are_errors() {
    models()
        .into_iter()
        .for_each(context_overflow_and_bad_trees_are_errors_on);
}

fn context_overflow_and_bad_trees_are_errors_on(m: &Model) {
    let mut seq = m.new_sequence();
    let too_long = vec![5u32; m.config().context_length + 1];
    let nodes = Node::chain(&too_long);
    let err = m
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &nodes,
            want: Want::None,
        }])
        .unwrap_err();
    assert!(err.to_string().contains("context"), "{err}");
    let bad = [Node {
        token: 1,
        parent: Some(0),
    }];
    assert!(m
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &bad,
            want: Want::All,
        }])
        .is_err());
    let oov = [Node {
        token: u32::MAX,
        parent: None,
    }];
    assert!(m
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &oov,
            want: Want::All,
        }])
        .is_err());
}

#[test]
fn a_prefix_copy_continues_exactly_like_the_original() {
    models()
        .into_iter()
        .for_each(a_prefix_copy_continues_exactly_like_the_original_on);
}

fn a_prefix_copy_continues_exactly_like_the_original_on(m: &Model) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let shared = prompt(&mut rng, 37);
    let rest = prompt(&mut rng, 6);
    let mut original = prefill(m, &shared);
    let mut fresh = prefill(m, &shared[..20]);
    // A copy of the first 20 tokens, cut from a longer sequence, then grown again.
    let mut copy = original.prefix(20);
    assert_eq!(copy.tokens(), &shared[..20]);
    assert!(copy.memory_bytes() < original.memory_bytes());
    let tail: Vec<u32> = shared[20..].iter().chain(&rest).copied().collect();
    let a = sequential(m, &mut copy, &tail);
    let b = sequential(m, &mut fresh, &tail);
    assert_eq!(a, b);
    assert_eq!(a[17..], sequential(m, &mut original, &rest)[..]);
}

/// The Qwen2.5-Coder pair (when cached; CI fetches them): Q4_K, Q6_K, Q5_0 and Q8_0
/// matrices in their own formats, and q/k/v stacked from Q4_K and Q6_K parts. Every node of
/// a tree has the logits of decoding its branch one token at a time.
#[test]
fn qwen_tree_nodes_match_decoding_their_branch_one_token_at_a_time() {
    for m in [common::qwen_0_5b(), common::qwen_1_5b()]
        .into_iter()
        .flatten()
    {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let base = prefill(m, &prompt(&mut rng, 20));
        let tree = random_tree(&mut rng, 24);
        tree_matches_its_branches(m, &base, &tree);
    }
}

/// Every instruction set and thread count give the 0.5B's logits (the portable path is
/// too slow for the 1.5B in every run; the kernels' suites cover its formats on every ISA).
#[test]
fn qwen_every_isa_and_thread_count_give_the_same_logits() {
    if let Some(m) = common::qwen_0_5b() {
        one_and_two_threads_and_every_isa_give_the_same_logits_on(m);
    }
}
