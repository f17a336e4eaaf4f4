//! What this machine can do at most, measured with the executor's threads: the streaming
//! read bandwidth from memory, the peak rates of the instructions the kernels are made
//! of, and the matmul kernels' own rate on cached weights. A forward can be no faster than
//! the bytes it must read at that bandwidth, nor than its multiply-adds at those rates:
//! `specdec bench roofline` sets each forward against that floor.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::simd::peak;
use crate::{Executor, KernelError, PackedMatrix, QuantizedRows, WeightFormat};

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
    /// The matmul kernels themselves, per weight format (indexed by
    /// [`WeightFormat::index`]), multiply-adds/s: many rows through a matrix small enough
    /// to stay in cache, so memory does not bound them and their whole instruction mix
    /// does (loads, unpacking, and the fixed float epilogue of every block that makes
    /// their bits the same on every path), not the dot-product instruction alone.
    pub kernel_macs_per_s: [f64; WeightFormat::ALL.len()],
}

impl Ceilings {
    /// [`Ceilings::kernel_macs_per_s`] of `format`.
    pub fn kernel_rate(&self, format: WeightFormat) -> f64 {
        self.kernel_macs_per_s[format.index()]
    }
}

/// Repeats of each probe; the best is kept.
const REPEATS: usize = 7;
/// Iterations of one compute probe (about 10 ms per thread on current cores).
const PROBE_ITERS: usize = 2_000_000;
/// Rows of the kernel probe: a multiple of every path's rows per call (6 and 4), so no
/// smaller remainder call lowers the rate.
const KERNEL_ROWS: usize = 48;
/// The kernel probe's matrix is this square: 190-350 KB packed, so each thread's share
/// stays in its L2 (and the activations in L1).
const KERNEL_DIM: usize = 576;
/// Matmuls per timed kernel probe (about 5-10 ms on current cores with 2 threads).
const KERNEL_CALLS: usize = 40;

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
        let mut kernel_macs_per_s = [0.0; WeightFormat::ALL.len()];
        for f in WeightFormat::ALL {
            kernel_macs_per_s[f.index()] = self.kernel_rate(f)?;
        }
        Ok(Ceilings {
            read_bytes_per_s,
            int8_macs_per_s,
            f32_macs_per_s,
            kernel_macs_per_s,
        })
    }

    /// The matmul kernels' rate on `format` with the weights in cache: the best of
    /// `REPEATS` timed runs of `KERNEL_CALLS` matmuls.
    fn kernel_rate(&self, format: WeightFormat) -> Result<f64, KernelError> {
        // k a whole number of the format's blocks (256 values for the K formats).
        let k = KERNEL_DIM / format.block_values() * format.block_values();
        let (n, rows) = (KERNEL_DIM, KERNEL_ROWS);
        let w = probe_matrix(format, n, k)?;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let x: Vec<f32> = (0..rows * k).map(|_| unit(&mut seed) * 2.0 - 1.0).collect();
        let mut q = QuantizedRows::new();
        q.quantize(&x, rows, k);
        let mut out = vec![0f32; rows * n];
        let mut run = || -> Result<f64, KernelError> {
            let t = Instant::now();
            for _ in 0..KERNEL_CALLS {
                self.matmul(&w, &q, &mut out)?;
            }
            Ok((KERNEL_CALLS * rows * n * k) as f64 / t.elapsed().as_secs_f64())
        };
        run()?;
        Ok(best((0..REPEATS).map(|_| run()).collect::<Result<_, _>>()?))
    }
}

/// An `n × k` matrix of `format` with pseudo-random quants and small normal scales
/// (subnormal floats could slow the epilogue on some cores).
fn probe_matrix(format: WeightFormat, n: usize, k: usize) -> Result<PackedMatrix, KernelError> {
    let bs = format.block_bytes();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut bytes = vec![0u8; n * k / format.block_values() * bs];
    for block in bytes.chunks_exact_mut(bs) {
        for b in block.iter_mut() {
            *b = next(&mut seed) as u8;
        }
        for &at in format.f16_offsets() {
            let d = half::f16::from_f32(1e-3 + 1e-2 * unit(&mut seed));
            block[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    PackedMatrix::from_ggml(format, &bytes, n, k)
}

/// xorshift64.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A float in [0, 1).
fn unit(s: &mut u64) -> f32 {
    (next(s) >> 40) as f32 / (1u64 << 24) as f32
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
        let kernels = WeightFormat::ALL.map(|f| c.kernel_rate(f));
        for x in [c.read_bytes_per_s, c.int8_macs_per_s, c.f32_macs_per_s]
            .into_iter()
            .chain(kernels)
        {
            assert!(x.is_finite() && x > 0.0, "{c:?}");
        }
    }
}
