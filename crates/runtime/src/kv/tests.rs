//! Copy-on-write bookkeeping against a model of what every position must hold: random
//! forwards, commits, forks, branches, prefixes, truncations and drops over a pool of
//! sequences, each position's key and value a function of the tokens up to it.

use rand::{Rng, SeedableRng};

use super::*;
use crate::{Node, RuntimeError, Sequence};

const LAYERS: usize = 2;
const KV: usize = 2;
const HD: usize = 3;

/// The key (`kind` 0) or value (1) element a position holds after `tokens`.
fn element(tokens: &[u32], layer: usize, g: usize, d: usize, kind: u64) -> f32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in tokens {
        h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
    }
    for x in [layer as u64, g as u64, d as u64, kind] {
        h = (h ^ x).wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 40) as f32
}

fn row(tokens: &[u32], layer: usize, kind: u64) -> Vec<f32> {
    (0..KV)
        .flat_map(|g| (0..HD).map(move |d| (g, d)))
        .map(|(g, d)| element(tokens, layer, g, d, kind))
        .collect()
}

fn new_seq(head_dim: usize, max_len: usize) -> Sequence {
    Sequence::new(KvCache::new(LAYERS, KV, head_dim, max_len))
}

fn kv(seq: &Sequence) -> &KvCache {
    seq.state().expect("a CPU cache")
}

fn kv_mut(seq: &mut Sequence) -> &mut KvCache {
    seq.state_mut().expect("a CPU cache")
}

/// What `Model::forward` does to the cache: reserve, write every node's rows, record.
fn forward(seq: &mut Sequence, nodes: &[Node]) -> Result<(), RuntimeError> {
    let chains = specdec_tree::ancestor_chains(nodes).unwrap();
    seq.check_room(nodes.len())?;
    let cache = kv_mut(seq);
    cache.reserve(nodes.len());
    for (j, chain) in chains.iter().enumerate() {
        let mut path = cache.log().tokens().to_vec();
        path.extend(chain.iter().map(|&c| nodes[c].token));
        for layer in 0..LAYERS {
            let pos = cache.len() + j;
            cache.write(layer, pos, &row(&path, layer, 0), &row(&path, layer, 1));
        }
    }
    seq.set_pending(nodes);
    Ok(())
}

/// Position `p` of layer `layer`, head `g`, read through the segments as attention does.
fn read(seq: &Sequence, layer: usize, g: usize, p: usize) -> (Vec<f32>, Vec<f32>) {
    let seq = kv(seq);
    let run = seq
        .runs(layer, g)
        .find(|r| r.start <= p && p < r.end)
        .expect("every position below the tail's end is in a run");
    let q = p - run.start;
    let bs = seq.key_block_stride();
    let k = (0..HD).map(|d| run.k[kt_index(q, d, bs)]).collect();
    let v = run.v[q * HD..(q + 1) * HD].to_vec();
    (k, v)
}

fn check(seq: &Sequence) {
    let mut prev_start = None;
    for r in kv(seq).runs(0, 0) {
        assert_eq!(r.start % BLOCK, 0);
        assert!(prev_start.is_none_or(|s| s < r.start || r.end == r.start));
        prev_start = Some(r.start);
    }
    assert!(kv(seq).tail.start <= seq.len());
    assert_lines_aligned(seq);
    let t = seq.tokens();
    for p in 0..seq.len() {
        for layer in 0..LAYERS {
            for g in 0..KV {
                let (k, v) = read(seq, layer, g, p);
                let want_k: Vec<f32> = (0..HD).map(|d| element(&t[..=p], layer, g, d, 0)).collect();
                let want_v: Vec<f32> = (0..HD).map(|d| element(&t[..=p], layer, g, d, 1)).collect();
                assert_eq!((k, v), (want_k, want_v), "position {p} of {}", seq.len());
            }
        }
    }
}

fn random_tree(rng: &mut impl Rng) -> Vec<Node> {
    let n = rng.gen_range(1..6);
    (0..n)
        .map(|i| Node {
            token: rng.gen_range(0..50),
            parent: if i == 0 || rng.gen_bool(0.2) {
                None
            } else {
                Some(rng.gen_range(0..i) as u32)
            },
        })
        .collect()
}

fn random_path(rng: &mut impl Rng, nodes: &[Node]) -> Vec<usize> {
    let mut i = rng.gen_range(0..nodes.len());
    let mut path = vec![i];
    while let Some(p) = nodes[i].parent {
        i = p as usize;
        path.push(i);
    }
    path.reverse();
    path
}

#[test]
fn every_sequence_reads_its_own_history_whatever_its_relatives_do() {
    for seed in 0..200 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut pool = vec![new_seq(HD, 400)];
        let mut pending: Vec<Vec<Node>> = vec![Vec::new()];
        for _ in 0..80 {
            let i = rng.gen_range(0..pool.len());
            match rng.gen_range(0..10) {
                0..=3 => {
                    // A long chain now and then, so segments grow past several blocks.
                    let nodes = if rng.gen_bool(0.2) {
                        let toks: Vec<u32> = (0..rng.gen_range(10..40))
                            .map(|_| rng.gen_range(0..50))
                            .collect();
                        Node::chain(&toks)
                    } else {
                        random_tree(&mut rng)
                    };
                    if forward(&mut pool[i], &nodes).is_ok() {
                        let path = random_path(&mut rng, &nodes);
                        if rng.gen_bool(0.3) && pool.len() < 8 {
                            let b = pool[i].branch(&path).unwrap();
                            pool.push(b);
                            pending.push(Vec::new());
                        }
                        if rng.gen_bool(0.8) {
                            pool[i].commit(&path).unwrap();
                            pending[i].clear();
                        } else {
                            pending[i] = nodes;
                        }
                    }
                }
                4 if pool.len() < 8 => {
                    let f = pool[i].fork();
                    pool.push(f);
                    pending.push(pending[i].clone());
                }
                5 if pool.len() < 8 => {
                    let len = rng.gen_range(0..=pool[i].len());
                    pool.push(pool[i].prefix(len));
                    pending.push(Vec::new());
                }
                6 => {
                    let len = rng.gen_range(0..=pool[i].len());
                    pool[i].truncate(len);
                    pending[i].clear();
                }
                7 if pool.len() > 1 => {
                    pool.swap_remove(i);
                    pending.swap_remove(i);
                }
                8 => pool[i].shrink_to_fit(),
                _ => {
                    // Commit a path of a forward left pending (on a fork of it, too).
                    if !pending[i].is_empty() {
                        let path = random_path(&mut rng, &pending[i]);
                        pool[i].commit(&path).unwrap();
                        pending[i].clear();
                    }
                }
            }
            pool.iter().for_each(check);
        }
    }
}

/// Every run's keys and values start on a cache line, so no 64-byte load of a key
/// block or value row spans two lines.
fn assert_lines_aligned(seq: &Sequence) {
    for layer in 0..LAYERS {
        for g in 0..KV {
            for r in kv(seq).runs(layer, g) {
                assert_eq!(
                    r.k.as_ptr() as usize % 64,
                    0,
                    "keys of layer {layer} head {g}"
                );
                assert_eq!(
                    r.v.as_ptr() as usize % 64,
                    0,
                    "values of layer {layer} head {g}"
                );
            }
        }
    }
}

#[test]
fn cache_rows_start_on_cache_lines_through_growth_splits_and_shrinking() {
    // A head size whose rows are not a multiple of 16 floats: only whole key blocks keep
    // each head's buffer on a line.
    let mut seq = new_seq(5, 4096);
    for step in 0..40u32 {
        kv_mut(&mut seq).reserve(7);
        let toks: Vec<u32> = (0..7).map(|i| step * 7 + i).collect();
        seq.set_pending(&Node::chain(&toks));
        seq.commit_all().unwrap();
        assert_lines_aligned(&seq);
    }
    let mut fork = seq.fork();
    kv_mut(&mut fork).reserve(3);
    assert_lines_aligned(&fork);
    fork.shrink_to_fit();
    seq.shrink_to_fit();
    assert_lines_aligned(&fork);
    assert_lines_aligned(&seq);
}

#[test]
fn forks_share_until_written_and_then_copy_one_block() {
    let mut seq = new_seq(HD, 4096);
    let toks: Vec<u32> = (0..1000).map(|i| i % 50).collect();
    forward(&mut seq, &Node::chain(&toks)).unwrap();
    seq.commit_all().unwrap();
    let one = seq.memory_bytes();
    assert_eq!(Sequence::memory_bytes_of([&seq]), one);
    let mut forks: Vec<Sequence> = (0..10).map(|_| seq.fork()).collect();
    assert_eq!(Sequence::memory_bytes_of(&forks), one);
    for (t, f) in forks.iter_mut().enumerate() {
        forward(f, &Node::chain(&[t as u32])).unwrap();
        f.commit_all().unwrap();
        check(f);
    }
    let per_position = 2 * LAYERS * KV * HD * 4;
    assert_eq!(
        Sequence::memory_bytes_of(forks.iter().chain([&seq])),
        one + 10 * BLOCK * per_position
    );
    check(&seq);
}
