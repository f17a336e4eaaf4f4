//! LASER's relaxed rule against a brute-force oracle on random logits and random trees.
//!
//! The oracle ranks every token by a full sort and normalises in f64; it looks at every
//! node of the tree, not only those the verifier reaches.

use proptest::prelude::*;
use specdec_tree::{Meta, Source, TokenTree};
use specdec_verify::{verify_strict, Acceptance, Relaxed, Rng, SamplingParams, Verdict};

/// A small vocabulary, so that drafted tokens often land in the top-k.
const VOCAB: usize = 8;

/// One verification problem: a tree, logits per node, the context and the rule.
#[derive(Clone, Debug)]
struct Case {
    tree: TokenTree,
    logits: Vec<Vec<f32>>,
    context: Vec<u32>,
    params: SamplingParams,
    rule: Relaxed,
}

impl Case {
    fn verify(&self) -> Verdict {
        Acceptance::Relaxed(self.rule).verify(
            &self.tree,
            |i| &self.logits[i],
            &self.context,
            &self.params,
            &mut Rng::new(0),
        )
    }
}

/// Nodes as (parent draw, token): node i hangs below `draw % i`, so parents precede
/// children; sibling tokens may repeat. Logits on a coarse grid, so ties happen.
fn case() -> impl Strategy<Value = Case> {
    let nodes = prop::collection::vec((0usize..64, 0u32..VOCAB as u32), 0..24);
    let grid = prop::collection::vec(-12i8..12, VOCAB);
    (
        nodes,
        prop::collection::vec(grid, 25),
        prop::collection::vec(0u32..VOCAB as u32, 0..8),
        prop_oneof![Just(1.0f32), Just(1.3)],
        0usize..6,
        1usize..5,
        prop_oneof![Just(0.0f32), Just(0.05), Just(0.1), Just(0.3), Just(0.6)],
    )
        .prop_map(|(nodes, grid, context, penalty, last_n, k, tau)| {
            let meta = Meta::drafted(Source::Trie, 0.5);
            let mut tree = TokenTree::rooted(context.last().copied().unwrap_or(0));
            for (i, &(draw, token)) in nodes.iter().enumerate() {
                tree.push(token, Some((draw % (i + 1)) as u32), meta);
            }
            let logits = grid[..tree.len()]
                .iter()
                .map(|row| row.iter().map(|&v| f32::from(v) / 2.0).collect())
                .collect();
            Case {
                tree,
                logits,
                context,
                params: SamplingParams {
                    repetition_penalty: penalty,
                    repeat_last_n: last_n,
                    ..SamplingParams::default()
                },
                rule: Relaxed::new(k, tau).expect("valid"),
            }
        })
}

/// The oracle's view of one node: the penalised logits ranked, and the softmax.
struct Dist {
    /// Token ids, best first (logit descending, then id ascending).
    ranked: Vec<u32>,
    prob: Vec<f64>,
}

fn dist(c: &Case, node: usize) -> Dist {
    let mut recent = c.context.clone();
    recent.extend(c.tree.tokens_below_root(node));
    let mut l = c.logits[node].clone();
    let window = &recent[recent.len().saturating_sub(c.params.repeat_last_n)..];
    let mut seen = Vec::new();
    for &t in window {
        if !seen.contains(&t) {
            seen.push(t);
            let v = &mut l[t as usize];
            *v = if *v > 0.0 {
                *v / c.params.repetition_penalty
            } else {
                *v * c.params.repetition_penalty
            };
        }
    }
    let mut ranked: Vec<u32> = (0..VOCAB as u32).collect();
    ranked.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
    let max = f64::from(l[ranked[0] as usize]);
    let z: f64 = l.iter().map(|&x| (f64::from(x) - max).exp()).sum();
    let prob = l.iter().map(|&x| (f64::from(x) - max).exp() / z).collect();
    Dist { ranked, prob }
}

/// How the rule judges the edge into `child`: `None` when not acceptable, else whether it
/// is relaxed (not the argmax). `Err` when the probability is within 1e-6 of tau, where
/// rounding may decide: the case is skipped.
fn edge(c: &Case, child: usize) -> Result<Option<bool>, ()> {
    let parent = c.tree.parent(child).expect("a drafted node");
    let token = c.tree.token(child);
    if c.tree.child_with(Some(parent), token) != Some(child) {
        return Ok(None); // a later duplicate sibling never counts
    }
    let d = dist(c, parent);
    let rank = d.ranked.iter().position(|&t| t == token).expect("in vocab");
    if rank == 0 {
        return Ok(Some(false));
    }
    if rank >= c.rule.top_k() {
        return Ok(None);
    }
    let p = d.prob[token as usize];
    let tau = f64::from(c.rule.tau());
    if (p - tau).abs() < 1e-6 {
        return Err(());
    }
    Ok((p > tau).then_some(true))
}

/// The brute-force verdict: every node whose whole path is acceptable, the deepest, then
/// fewest relaxed tokens, then lowest index. `None` when a probability sits on tau.
fn oracle(c: &Case) -> Option<Verdict> {
    let mut best: Option<(usize, usize, usize)> = None; // (depth, relaxed, node)
    'nodes: for node in 0..c.tree.len() {
        let path = c.tree.path_to(node);
        let mut relaxed = 0;
        for &child in &path[1..] {
            match edge(c, child).ok()? {
                Some(r) => relaxed += usize::from(r),
                None => continue 'nodes,
            }
        }
        let key = (path.len() - 1, relaxed, node);
        let better = best.is_none_or(|(d, r, _)| key.0 > d || (key.0 == d && key.1 < r));
        if better {
            best = Some(key);
        }
    }
    let (_, relaxed, end) = best.expect("the root");
    Some(Verdict {
        accepted: c.tree.path_to(end)[1..].to_vec(),
        bonus: dist(c, end).ranked[0],
        relaxed,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_chosen_path_is_the_longest_valid_one(c in case()) {
        let want = oracle(&c);
        prop_assume!(want.is_some());
        prop_assert_eq!(c.verify(), want.unwrap());
    }

    #[test]
    fn every_accepted_token_is_acceptable_and_counted(c in case()) {
        let v = c.verify();
        prop_assert!(c.tree.is_chain_from_root(&[&[0][..], &v.accepted].concat()));
        let mut relaxed = 0;
        for &child in &v.accepted {
            let judged = edge(&c, child);
            prop_assume!(judged.is_ok());
            match judged.unwrap() {
                Some(r) => relaxed += usize::from(r),
                None => prop_assert!(false, "node {} accepted but not acceptable", child),
            }
        }
        prop_assert_eq!(v.relaxed, relaxed);
    }

    #[test]
    fn the_walk_never_stops_where_the_argmax_is_a_child(c in case()) {
        let v = c.verify();
        let end = v.accepted.last().copied().unwrap_or(0);
        let argmax = dist(&c, end).ranked[0];
        prop_assert_eq!(v.bonus, argmax, "the bonus is the target's argmax");
        prop_assert_eq!(c.tree.child_with(Some(end), argmax), None);
    }

    #[test]
    fn top_1_with_tau_0_is_strict_greedy_verification(mut c in case()) {
        c.rule = Relaxed::new(1, 0.0).expect("valid");
        let strict = verify_strict(&c.tree, |i| &c.logits[i], &c.context, &c.params, &mut Rng::new(7));
        prop_assert_eq!(c.verify(), strict);
    }

    #[test]
    fn verification_is_deterministic(c in case()) {
        prop_assert_eq!(c.verify(), c.clone().verify());
    }
}

#[test]
fn a_deeper_relaxed_branch_beats_a_shallow_argmax_branch() {
    // Root logits: token 1 best (p ~ 0.73), token 2 second (p ~ 0.27). The argmax branch
    // stops after one token; the relaxed branch through 2 goes two deeper.
    let meta = Meta::drafted(Source::Trie, 0.5);
    let mut tree = TokenTree::rooted(0);
    tree.push(1, Some(0), meta); // 1: argmax, then a wrong draft
    tree.push(5, Some(1), meta); // 2
    let b = tree.push(2, Some(0), meta); // 3: relaxed
    let c = tree.push(3, Some(b), meta); // 4: argmax below 3
    tree.push(4, Some(c), meta); // 5: argmax below 4
    let mut root = vec![-10.0f32; VOCAB];
    root[1] = 1.0;
    root[2] = 0.0;
    let peak = |t: usize| {
        let mut l = vec![-10.0f32; VOCAB];
        l[t] = 5.0;
        l
    };
    let logits = [root, peak(6), peak(6), peak(3), peak(4), peak(7)];
    let verify = |rule| {
        Acceptance::Relaxed(rule).verify(
            &tree,
            |i| &logits[i],
            &[0],
            &SamplingParams::default(),
            &mut Rng::new(0),
        )
    };
    let v = verify(Relaxed::DEFAULT);
    assert_eq!(v.accepted, vec![3, 4, 5]);
    assert_eq!((v.bonus, v.relaxed), (7, 1));
    assert_eq!(v.emitted(&tree), vec![2, 3, 4, 7]);
    // A tau above token 2's probability, or top-1, leaves the strict path.
    for rule in [Relaxed::new(2, 0.3).unwrap(), Relaxed::new(1, 0.0).unwrap()] {
        let v = verify(rule);
        assert_eq!((v.accepted, v.bonus, v.relaxed), (vec![1], 6, 0));
    }
}

#[test]
fn relaxed_verification_refuses_sampled_requests() {
    let rule = Acceptance::Relaxed(Relaxed::DEFAULT);
    let sampled = SamplingParams {
        temperature: 0.7,
        ..SamplingParams::default()
    };
    assert!(rule
        .check_sampling(&sampled)
        .unwrap_err()
        .contains("greedy"));
    assert!(rule.check_sampling(&SamplingParams::default()).is_ok());
    let top1 = SamplingParams {
        top_k: 1,
        ..sampled.clone()
    };
    assert!(rule.check_sampling(&top1).is_ok(), "top_k 1 is greedy");
    assert!(Acceptance::Strict.check_sampling(&sampled).is_ok());
}
