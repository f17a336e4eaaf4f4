//! One forward of S sequences with one node each (S rows from S caches), after a prefix
//! each, against one sequence with an S-node chain (for profilers and the batching cost).
//! Usage: batch_loop [S] [REPEATS]
use specdec_runtime::{Executor, Model, Node, SeqInput, Want};

fn main() {
    let mut args = std::env::args().skip(1);
    let s: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let path = specdec_model_store::resolve(None, true).expect("model");
    let m = Model::load_with(path, Executor::new(2)).expect("load");
    let plen = 100u32;
    let mut seqs: Vec<_> = (0..s)
        .map(|k| {
            let mut seq = m.new_sequence();
            let prefix: Vec<u32> = (0..plen).map(|i| 1000 + i * 7 + k as u32).collect();
            m.forward(&mut [SeqInput {
                seq: &mut seq,
                nodes: &Node::chain(&prefix),
                want: Want::None,
            }])
            .unwrap();
            seq.commit_all().unwrap();
            seq
        })
        .collect();
    let one = Node::chain(&[2000]);
    let chain = Node::chain(&(0..s as u32).map(|i| 2000 + i).collect::<Vec<_>>());
    for round in 0..3 {
        let t = std::time::Instant::now();
        for _ in 0..reps {
            let mut inputs: Vec<SeqInput<'_>> = seqs
                .iter_mut()
                .map(|seq| SeqInput {
                    seq,
                    nodes: &one,
                    want: Want::All,
                })
                .collect();
            m.forward(&mut inputs).unwrap();
        }
        let batched = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            m.forward(&mut [SeqInput {
                seq: &mut seqs[0],
                nodes: &chain,
                want: Want::All,
            }])
            .unwrap();
        }
        let tree = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            m.forward(&mut [SeqInput {
                seq: &mut seqs[0],
                nodes: &one,
                want: Want::All,
            }])
            .unwrap();
        }
        let single = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!("round {round}: {s} sequences x 1 node {batched:.2} ms, 1 sequence x {s} nodes {tree:.2} ms, 1 x 1 {single:.2} ms");
    }
}
