//! Forked sequences on the real model: forks share their history's memory, and a forward
//! on a fork, a branch or a prefix gives the bits a full copy gives, before and after the
//! sequences diverge.

use crate::common;
use rand::{Rng, SeedableRng};

/// The nodes from `i`'s root down to `i`.
fn path_to(nodes: &[Node], i: usize) -> Vec<usize> {
    specdec_tree::ancestor_chains(nodes).unwrap().swap_remove(i)
}

use common::{bits, model, prompt};
use specdec_runtime::{Node, SeqInput, Sequence, Want};

/// A fresh sequence holding `tokens`, prefilled in one forward: a full, unshared copy.
fn prefill(tokens: &[u32]) -> Sequence {
    common::prefill(model(), tokens)
}

/// Logits after each token of `tokens`, decoding one token per forward.
fn sequential(seq: &mut Sequence, tokens: &[u32]) -> Vec<Vec<u32>> {
    common::sequential(model(), seq, tokens)
}

/// Every node's logits of a forward of `tree` on `seq`.
fn tree_forward(seq: &mut Sequence, tree: &[Node]) -> Vec<Vec<u32>> {
    let out = model()
        .forward(&mut [SeqInput {
            seq,
            nodes: tree,
            want: Want::All,
        }])
        .unwrap();
    (0..tree.len()).map(|i| bits(out[0].row(i))).collect()
}

fn random_tree(rng: &mut impl Rng, n: usize) -> Vec<Node> {
    let mut nodes = Node::chain(&[rng.gen_range(100..40000)]);
    for i in 1..n {
        nodes.push(Node {
            token: rng.gen_range(100..40000),
            parent: Some(rng.gen_range(0..i) as u32),
        });
    }
    nodes
}

#[test]
fn ten_forks_of_a_1000_token_sequence_take_less_than_1_2x_the_memory_of_one() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let mut seq = prefill(&prompt(&mut rng, 1000));
    let one = seq.memory_bytes();
    let mut forks: Vec<Sequence> = (0..10).map(|_| seq.fork()).collect();
    let shared = Sequence::memory_bytes_of(&forks);
    // Every fork and the original take a step of their own: each copies a block.
    for f in forks.iter_mut().chain([&mut seq]) {
        let t = rng.gen_range(100..40000);
        sequential(f, &[t]);
    }
    let diverged = Sequence::memory_bytes_of(forks.iter().chain([&seq]));
    let mb = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "one 1000-token sequence {:.1} MiB; ten forks {:.1} MiB ({:.3}x); \
         after a token each, forks and original {:.1} MiB ({:.3}x)",
        mb(one),
        mb(shared),
        shared as f64 / one as f64,
        mb(diverged),
        diverged as f64 / one as f64
    );
    assert!((shared as f64) < 1.2 * one as f64);
    assert!((diverged as f64) < 1.2 * one as f64);
    // Attributed memory: each fork reports what its history occupies.
    assert!(forks.iter().all(|f| f.memory_bytes() >= one * 9 / 10));
}

#[test]
fn a_forward_on_a_fork_equals_one_on_a_full_copy_also_after_they_diverge() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    // Not a whole number of key blocks, so forks copy a partial block.
    let p = prompt(&mut rng, 203);
    let tree = random_tree(&mut rng, 20);
    let mut original = prefill(&p);
    let mut fork = original.fork();
    let mut copy = prefill(&p);
    let on_fork = tree_forward(&mut fork, &tree);
    assert_eq!(on_fork, tree_forward(&mut copy, &tree));
    assert_eq!(on_fork, tree_forward(&mut original, &tree));
    // Diverge: different paths, then decoding past several block boundaries.
    let (pa, pb) = (path_to(&tree, tree.len() - 1), path_to(&tree, 0));
    fork.commit(&pa).unwrap();
    copy.commit(&pa).unwrap();
    original.commit(&pb).unwrap();
    let mut original_copy = prefill(&p);
    tree_forward(&mut original_copy, &tree);
    original_copy.commit(&pb).unwrap();
    let (ca, cb) = (prompt(&mut rng, 40), prompt(&mut rng, 40));
    assert_eq!(sequential(&mut fork, &ca), sequential(&mut copy, &ca));
    assert_eq!(
        sequential(&mut original, &cb),
        sequential(&mut original_copy, &cb)
    );
    // A fork of the fork, rolled back into the shared history, then grown again.
    let mut again = fork.fork();
    again.truncate(190);
    let mut fresh = prefill(&p[..190]);
    let cc = prompt(&mut rng, 30);
    assert_eq!(sequential(&mut again, &cc), sequential(&mut fresh, &cc));
    assert_eq!(fork.tokens(), copy.tokens());
    let cd = prompt(&mut rng, 3);
    assert_eq!(sequential(&mut fork, &cd), sequential(&mut copy, &cd));
}

#[test]
fn a_branch_equals_committing_that_path_on_a_copy() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    let p = prompt(&mut rng, 150);
    let tree = random_tree(&mut rng, 24);
    let mut seq = prefill(&p);
    tree_forward(&mut seq, &tree);
    let paths: Vec<Vec<usize>> = [tree.len() - 1, tree.len() / 2, 0]
        .iter()
        .map(|&leaf| path_to(&tree, leaf))
        .collect();
    let mut branches: Vec<Sequence> = paths[..2]
        .iter()
        .map(|path| seq.branch(path).unwrap())
        .collect();
    assert!(seq.branch(&[tree.len()]).is_err());
    seq.commit(&paths[2]).unwrap();
    branches.push(seq);
    let next = prompt(&mut rng, 5);
    for (b, path) in branches.iter_mut().zip(&paths) {
        let mut copy = prefill(&p);
        tree_forward(&mut copy, &tree);
        copy.commit(path).unwrap();
        assert_eq!(b.tokens(), copy.tokens());
        assert_eq!(sequential(b, &next), sequential(&mut copy, &next));
    }
}

#[test]
fn a_prefix_then_continuing_equals_the_original() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(34);
    let tokens = prompt(&mut rng, 300);
    let mut original = prefill(&tokens[..250]);
    // The original's continuation, logits per token.
    let mut probe = original.fork();
    let want = sequential(&mut probe, &tokens[250..]);
    // Grown on a fork, so its history spans a frozen segment and a tail.
    sequential(&mut original, &tokens[250..]);
    for len in [100, 160, 250, 257, 299] {
        let mut cut = original.prefix(len);
        assert_eq!(cut.tokens(), &tokens[..len]);
        if len == 257 {
            cut.shrink_to_fit();
        }
        let got = sequential(&mut cut, &tokens[len..]);
        let from = len.max(250);
        assert_eq!(got[from - len..], want[from - 250..], "prefix {len}");
        if len < 250 {
            let mut fresh = prefill(&tokens[..len]);
            assert_eq!(got, sequential(&mut fresh, &tokens[len..]), "prefix {len}");
        }
    }
}

/// A sequence is a handle over its target's own state: the model refuses one made by
/// another target (here the fake's, which keeps no cache) before it writes anything, and
/// the model's own sequences in the same batch are left as they were.
#[test]
fn a_sequence_of_another_target_is_refused_not_misread() {
    use specdec_runtime::{FakeTarget, RuntimeError, Target};
    let fake = FakeTarget::new(model().config().vocab, 64);
    let mut foreign = fake.new_sequence();
    let tokens = prompt(&mut rand::rngs::StdRng::seed_from_u64(7), 9);
    let mut own = prefill(&tokens[..8]);
    let nodes = Node::chain(&tokens[8..]);
    let err = model()
        .forward(&mut [
            SeqInput {
                seq: &mut own,
                nodes: &nodes,
                want: Want::Last,
            },
            SeqInput {
                seq: &mut foreign,
                nodes: &nodes,
                want: Want::Last,
            },
        ])
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ForeignSequence(_)), "{err}");
    assert!(foreign.is_empty());
    assert_eq!(own.len(), 8);
    // Nothing of the refused forward is pending: the model's sequence decodes on as if
    // it had never been sent.
    assert!(own.commit_all().is_ok());
    assert_eq!(own.len(), 8);
}
