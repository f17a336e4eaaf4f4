//! `Model::set_profiling`: a profiled forward gives the same bits as an unprofiled one,
//! and its profile accounts for it (one forward, its phases within its time, the matrix
//! phases and the thread pool's dispatches counted). On a model of its own (profiles and
//! dispatch counts are per model): the shared one's forwards, from the other tests of this
//! binary, would be counted too.

use crate::common;

use specdec_runtime::{Node, Phase};

#[test]
fn profiling_counts_one_forward_and_changes_no_bits() {
    let own = common::own_model();
    let m = &own;
    let prefix: Vec<u32> = (0..30).map(|i| (i * 7919 + 13) % 49152).collect();
    let nodes = Node::chain(&[11, 22, 33, 44, 55, 66]);
    let run = |seq: &mut specdec_runtime::Sequence| common::tree_bits(m, seq, &nodes);
    let plain = run(&mut common::prefill(m, &prefix));
    let mut seq = common::prefill(m, &prefix);
    m.take_profile();
    m.set_profiling(true);
    let profiled = run(&mut seq);
    m.set_profiling(false);
    let p = m.take_profile();
    assert_eq!(profiled, plain);
    assert_eq!(p.forwards, 1);
    let phases: u64 = p.phase_ns.iter().map(|&(_, ns)| ns).sum();
    assert!(phases > 0 && phases <= p.total_ns, "{p:?}");
    for phase in [
        Phase::Qkv,
        Phase::AttnOut,
        Phase::GateUp,
        Phase::Down,
        Phase::Head,
    ] {
        let ns = p
            .phase_ns
            .iter()
            .find(|(q, _)| *q == phase)
            .expect("listed")
            .1;
        assert!(ns > 0, "{phase:?} not timed: {p:?}");
    }
    // 30 layers × 4 matmuls and attention, the head: at least 151 with 2 threads.
    assert!(p.dispatches >= 151, "{p:?}");
    // Off again: nothing more is counted.
    run(&mut common::prefill(m, &prefix));
    assert_eq!(m.take_profile().forwards, 0);
}
