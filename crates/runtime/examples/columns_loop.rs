//! Times B one-node inputs' forward with full last rows against `Want::LastColumns` of C
//! columns each (what a catalogue-scored draft asks), after a 100-token prefix.
//! Usage: columns_loop [MODEL.gguf] [B] [C] [REPEATS]
use std::sync::Arc;

use specdec_runtime::{Executor, Model, Node, SeqInput, Want};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| specdec_model_store::resolve(None, true).expect("model"));
    let b: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let c: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let m = Model::load_with(path, Executor::new(2)).expect("load");
    let prefix: Vec<u32> = (0..100).map(|i| 1000 + i * 7).collect();
    let mut base = m.new_sequence();
    m.forward(&mut [SeqInput {
        seq: &mut base,
        nodes: &Node::chain(&prefix),
        want: Want::None,
    }])
    .unwrap();
    base.commit_all().unwrap();
    let cols: Arc<[u32]> = (0..c)
        .map(|i| (i * 2459) % m.config().vocab as u32)
        .collect();
    let node = Node::chain(&[2000]);
    for (name, want) in [
        ("full rows", Want::Last),
        ("columns", Want::LastColumns(cols)),
    ] {
        let mut seqs: Vec<_> = (0..b).map(|_| base.clone()).collect();
        let t = std::time::Instant::now();
        for _ in 0..reps {
            let mut inputs: Vec<SeqInput<'_>> = seqs
                .iter_mut()
                .map(|seq| SeqInput {
                    seq,
                    nodes: &node,
                    want: want.clone(),
                })
                .collect();
            m.forward(&mut inputs).unwrap();
        }
        println!(
            "{name}: {:.3} ms per forward of {b} rows",
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        );
    }
}
