//! What this machine can do at most, measured with the executor's threads: the streaming
//! read bandwidth from memory and the peak rates of the instructions the kernels are made
//! of. A forward can be no faster than the bytes it must read at that bandwidth, nor than
//! its multiply-adds at those rates: `specdec bench roofline` sets each forward against
//! that floor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::simd::peak;
use crate::{Executor, KernelError};

/// The measured ceilings (the best of repeated runs: a ceiling is what the machine can
/// do, and a shared machine's neighbours only ever slow a probe down).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ceilings {
    /// Streaming read from memory over a buffer far larger than the caches, bytes/s.
    pub read_bytes_per_s: f64,
    /// The kernels' int8 dot-product step, multiply-adds/s.
    pub int8_macs_per_s: f64,
    /// f32 FMA on the widest vectors, multiply-adds/s.
    pub f32_macs_per_s: f64,
}

/// Repeats of each probe; the best is kept.
const REPEATS: usize = 7;
/// Iterations of one compute probe (about 10 ms per thread on current cores).
const PROBE_ITERS: usize = 2_000_000;

impl Executor {
    /// Measures the ceilings: a streaming read over a fresh `buffer_bytes` buffer (make it
    /// several times the last-level cache) split over the threads, and each compute probe
    /// on every thread at once.
    pub fn ceilings(&self, buffer_bytes: usize) -> Result<Ceilings, KernelError> {
        let words = (buffer_bytes / 8).max(1 << 20);
        // Written once so every page is mapped before timing.
        let buf: Vec<u64> = (0..words as u64).collect();
        let threads = self.threads().max(1);
        let isa = self.isa();
        let sink = AtomicU64::new(0);
        let read = || -> Result<f64, KernelError> {
            let t = Instant::now();
            self.for_each(threads, &|i| {
                let part = &buf[i * words / threads..(i + 1) * words / threads];
                sink.fetch_add(peak::read(isa, part), Ordering::Relaxed);
            })?;
            Ok((words * 8) as f64 / t.elapsed().as_secs_f64())
        };
        read()?;
        let read_bytes_per_s = best((0..REPEATS).map(|_| read()).collect::<Result<_, _>>()?);
        let rate = |f: fn(crate::Isa, usize) -> peak::Probe| -> Result<f64, KernelError> {
            let macs = AtomicU64::new(0);
            let t = Instant::now();
            self.for_each(threads, &|_| {
                let p = f(isa, PROBE_ITERS);
                sink.fetch_add(p.check as u64, Ordering::Relaxed);
                macs.fetch_add(p.macs, Ordering::Relaxed);
            })?;
            Ok(macs.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64())
        };
        let probe = |f: fn(crate::Isa, usize) -> peak::Probe| -> Result<f64, KernelError> {
            rate(f)?;
            Ok(best(
                (0..REPEATS).map(|_| rate(f)).collect::<Result<_, _>>()?,
            ))
        };
        let int8_macs_per_s = probe(peak::int8)?;
        let f32_macs_per_s = probe(peak::f32_fma)?;
        std::hint::black_box(sink.load(Ordering::Relaxed));
        Ok(Ceilings {
            read_bytes_per_s,
            int8_macs_per_s,
            f32_macs_per_s,
        })
    }
}

fn best(v: Vec<f64>) -> f64 {
    v.into_iter().fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_are_positive_and_finite() {
        let c = Executor::new(2).ceilings(16 << 20).unwrap();
        for x in [c.read_bytes_per_s, c.int8_macs_per_s, c.f32_macs_per_s] {
            assert!(x.is_finite() && x > 0.0, "{c:?}");
        }
    }
}
