//! Repeats one forward of N tree nodes after a 100-token prefix (for profilers).
//! Usage: [MODEL=FILE|NAME] [PREFIX=P] [WANT=all|argmax] forward_loop [N] [REPEATS]
use specdec_runtime::{Executor, Model, Node, SeqInput, Want};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let model = std::env::var_os("MODEL").map(std::path::PathBuf::from);
    let path = specdec_model_store::resolve(model.as_deref(), true).expect("model");
    let want = match std::env::var("WANT").as_deref() {
        Ok("argmax") => Want::Argmax,
        _ => Want::All,
    };
    let m = Model::load_with(path, Executor::new(2)).expect("load");
    let mut seq = m.new_sequence();
    let plen: usize = std::env::var("PREFIX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let prefix: Vec<u32> = (0..plen as u32).map(|i| 1000 + i * 7).collect();
    m.forward(&mut [SeqInput {
        seq: &mut seq,
        nodes: &Node::chain(&prefix),
        want: Want::None,
    }])
    .unwrap();
    seq.commit_all().unwrap();
    let nodes = Node::chain(&(0..n as u32).map(|i| 2000 + i).collect::<Vec<_>>());
    let t = std::time::Instant::now();
    for _ in 0..reps {
        m.forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &nodes,
            want: want.clone(),
        }])
        .unwrap();
    }
    println!(
        "{:.2} ms per forward",
        t.elapsed().as_secs_f64() * 1e3 / reps as f64
    );
}
