//! Where a forward's time goes: wall time per phase, summed over the forwards run while
//! profiling is on, plus the executor's dispatch count and barrier waits. Off, a phase
//! costs one relaxed load; on, two clock reads (tens of nanoseconds against phases of
//! microseconds).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// A step of the forward, timed as a whole (wall time on the calling thread, which takes
/// part in every parallel step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Planning the batch, buffers, embedding rows.
    Setup,
    /// RMS norms before attention and feed-forward, residual adds (with post-norms).
    Norms,
    /// Quantizing activations to int8 blocks before each matrix.
    Quantize,
    /// The q, k, v projection.
    Qkv,
    /// Biases, q/k norms, RoPE and writing keys and values to the cache.
    RopeKv,
    /// Scores, softmax and value sums over the cache and the tree.
    Attention,
    /// The attention output projection.
    AttnOut,
    /// The gate and up projections.
    GateUp,
    /// SwiGLU / GeGLU.
    Activation,
    /// The down projection.
    Down,
    /// The output head's matrix, whole rows, selected columns or streamed blocks (its
    /// activations' quantization is `Quantize`; the final norm, the streamed argmax's scan
    /// and the split per input are left to the forward's unattributed rest).
    Head,
}

impl Phase {
    /// Every phase, in the order a forward runs them.
    pub const ALL: [Phase; 11] = [
        Phase::Setup,
        Phase::Norms,
        Phase::Quantize,
        Phase::Qkv,
        Phase::RopeKv,
        Phase::Attention,
        Phase::AttnOut,
        Phase::GateUp,
        Phase::Activation,
        Phase::Down,
        Phase::Head,
    ];

    /// A short label for reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Norms => "norms+residual",
            Phase::Quantize => "quantize",
            Phase::Qkv => "qkv matmul",
            Phase::RopeKv => "rope+kv write",
            Phase::Attention => "attention",
            Phase::AttnOut => "o matmul",
            Phase::GateUp => "gate/up matmul",
            Phase::Activation => "activation",
            Phase::Down => "down matmul",
            Phase::Head => "head matmul",
        }
    }

    /// Its place in [`Phase::ALL`] (declaration order).
    fn index(self) -> usize {
        self as usize
    }
}

/// Time per phase over the forwards run while profiling was on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ForwardProfile {
    /// Forwards counted.
    pub forwards: u64,
    /// Nanoseconds of whole forwards.
    pub total_ns: u64,
    /// Nanoseconds per phase, in [`Phase::ALL`] order.
    pub phase_ns: Vec<(Phase, u64)>,
    /// Jobs dispatched to the thread pool (each a fork and a join).
    pub dispatches: u64,
    /// Nanoseconds the calling thread waited at those joins after its own shares: load
    /// imbalance and wake-up latency, inside the phases above.
    pub barrier_wait_ns: u64,
}

/// The counters a model keeps.
#[derive(Default)]
pub(crate) struct Profiler {
    on: AtomicBool,
    forwards: AtomicU64,
    total: AtomicU64,
    phases: [AtomicU64; Phase::ALL.len()],
}

impl Profiler {
    pub(crate) fn set(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    /// A clock reading when profiling, to close with [`Profiler::add`].
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        self.on.load(Relaxed).then(Instant::now)
    }

    #[inline]
    pub(crate) fn add(&self, phase: Phase, since: Option<Instant>) {
        if let Some(t) = since {
            let ns = t.elapsed().as_nanos() as u64;
            self.phases[phase.index()].fetch_add(ns, Relaxed);
        }
    }

    pub(crate) fn add_forward(&self, since: Option<Instant>) {
        if let Some(t) = since {
            self.total.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
            self.forwards.fetch_add(1, Relaxed);
        }
    }

    /// The counts since the last take, zeroed.
    pub(crate) fn take(&self, sync: specdec_kernels::SyncStats) -> ForwardProfile {
        ForwardProfile {
            forwards: self.forwards.swap(0, Relaxed),
            total_ns: self.total.swap(0, Relaxed),
            phase_ns: Phase::ALL
                .iter()
                .map(|&p| (p, self.phases[p.index()].swap(0, Relaxed)))
                .collect(),
            dispatches: sync.dispatches,
            barrier_wait_ns: sync.wait_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_the_phases_in_declaration_order() {
        for (i, p) in Phase::ALL.iter().enumerate() {
            assert_eq!(p.index(), i, "{p:?}");
        }
    }

    #[test]
    fn counts_only_while_on_and_take_zeroes() {
        let p = Profiler::default();
        p.add(Phase::Qkv, p.start());
        p.set(true);
        let t = p.start();
        std::thread::sleep(std::time::Duration::from_millis(2));
        p.add(Phase::Qkv, t);
        p.add_forward(t);
        let got = p.take(Default::default());
        assert_eq!(got.forwards, 1);
        let qkv = got
            .phase_ns
            .iter()
            .find(|(ph, _)| *ph == Phase::Qkv)
            .unwrap()
            .1;
        assert!(qkv >= 2_000_000 && got.total_ns >= qkv);
        assert_eq!(p.take(Default::default()).forwards, 0);
    }
}
