//! The matmul entry point: validation, then each thread computes a fixed contiguous range
//! of tiles for all rows.

use crate::error::KernelError;
use crate::format::TILE;
use crate::isa::Isa;
use crate::pack::PackedMatrix;
use crate::pool::{Pool, SyncStats};
use crate::quant::QuantizedRows;
use crate::simd::vecops::VecOps;
use crate::simd::{self, Job};
use std::ops::Range;

/// How much of its part of the next matrix each thread warms: the SmolLM2 layer
/// matrices' parts are 100-550 KB. Greedy decoding ran 1.017-1.050x as fast with 256 KiB
/// in three runs (Zen 4, in-process interleaved), 1.02-1.04x with 64 KiB to 1 MiB.
const WARM_BYTES: usize = 256 << 10;

/// Owns the thread pool and the chosen instruction set. `Send + Sync`; concurrent
/// `matmul` calls on one executor are serialised.
pub struct Executor {
    pool: Pool,
    isa: Isa,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("threads", &self.threads())
            .field("isa", &self.isa)
            .finish()
    }
}

impl Executor {
    /// `threads` threads (the caller counts as one; 0 is taken as 1), the fastest ISA or
    /// the one `SPECDEC_ISA` names ([`Isa::chosen`]).
    pub fn new(threads: usize) -> Self {
        Executor {
            pool: Pool::new(threads),
            isa: Isa::chosen(),
        }
    }

    /// Like `new` with a forced instruction set; errors if this CPU lacks it.
    pub fn with_isa(threads: usize, isa: Isa) -> Result<Self, KernelError> {
        if !isa.is_available() {
            return Err(KernelError::IsaUnavailable(isa));
        }
        Ok(Executor {
            pool: Pool::new(threads),
            isa,
        })
    }

    /// Threads a matmul is split over (the calling thread included).
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The instruction set the kernels run with.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Starts (or stops) counting this executor's dispatches and barrier waits (see
    /// [`Executor::take_sync_stats`]); off, the count costs one relaxed load per dispatch.
    pub fn set_profiling(&self, on: bool) {
        self.pool.set_profiling(on);
    }

    /// Dispatches and barrier waits counted since the last call (zeroed by it).
    pub fn take_sync_stats(&self) -> SyncStats {
        self.pool.take_sync_stats()
    }

    /// The f32 vector primitives (attention) on this executor's instruction set.
    pub fn vec_ops(&self) -> VecOps {
        VecOps::new(self.isa)
    }

    /// Runs `f(i)` for every `i` in `0..n` on the pool's threads, each index exactly once,
    /// and returns when all are done. Which thread runs an index may vary, so each index's
    /// result must depend only on the index.
    pub fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) -> Result<(), KernelError> {
        if n == 0 {
            return Ok(());
        }
        self.run_shares(n, &|range| range.for_each(f))
    }

    /// Splits `0..n` into the pool's shares and runs `f` on each non-empty one, one share
    /// per call, each exactly once.
    fn run_shares(
        &self,
        n: usize,
        f: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) -> Result<(), KernelError> {
        let shares = self.pool.shares();
        let share = |i: usize| {
            let range = share_of(n, shares, i);
            if !range.is_empty() {
                f(range);
            }
        };
        if self.pool.run(&share) {
            Ok(())
        } else {
            Err(KernelError::WorkerPanicked)
        }
    }

    /// Asks each thread to pull the start of its part of `w` (256 KiB of it) into L2
    /// while it waits for work, for a matmul by `w` coming next. A forward's threads
    /// idle between dispatches (one thread's row-wise steps, unequal attention items,
    /// the caller's sampling between forwards) with the memory bus quiet; warming the next
    /// matrix there starts its stream early. Only a hint: results never depend on it.
    pub fn warm_next(&self, w: &PackedMatrix) {
        let threads = self.threads();
        let base = w.data().as_ptr() as usize;
        self.pool.warm(&|t| {
            let r = warm_range(w, threads, t);
            base + r.start..base + r.end
        });
    }

    /// `out[r * w.n() + c] = y[r][c]` with `y = x · Wᵀ`; `out.len()` must be
    /// `x.rows() * w.n()`. Bit-identical for every row count, thread count and ISA.
    pub fn matmul(
        &self,
        w: &PackedMatrix,
        x: &QuantizedRows,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        self.check(w, x, out)?;
        if x.rows() == 0 {
            return Ok(());
        }
        let job = Job::new(w.view(), x.view(), out);
        let isa = self.isa;
        self.run_shares(w.n_tiles(), &|tiles| {
            // SAFETY: `isa` was checked available at construction; `job` was built from
            // validated shapes and borrows live for this call; the shares' tile ranges
            // are disjoint, and each share runs once.
            unsafe { simd::run(isa, &job, tiles) };
        })
    }

    /// `matmul` restricted to the 32-column tiles holding `cols` (any order, repeats
    /// allowed): every column of those tiles gets the same bits `matmul` gives it, and the
    /// rest of `out` (`x.rows() * w.n()`) is left as it was. Selected columns cost a tile
    /// each at most, not a pass over the whole matrix: what a head scoring a few hundred
    /// tokens of a large vocabulary needs.
    pub fn matmul_columns(
        &self,
        w: &PackedMatrix,
        x: &QuantizedRows,
        cols: &[u32],
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        self.check(w, x, out)?;
        if let Some(&col) = cols.iter().find(|&&c| c as usize >= w.n()) {
            return Err(KernelError::ColumnOutOfRange { col, n: w.n() });
        }
        let mut tiles: Vec<usize> = cols.iter().map(|&c| c as usize / TILE).collect();
        tiles.sort_unstable();
        tiles.dedup();
        if x.rows() == 0 || tiles.is_empty() {
            return Ok(());
        }
        let job = Job::new(w.view(), x.view(), out);
        let isa = self.isa;
        self.run_shares(tiles.len(), &|share| {
            for &t in &tiles[share] {
                // SAFETY: as in `matmul`: `isa` available, shapes validated, `t` below
                // n_tiles (its columns are below n), and the shares' tiles are disjoint
                // (deduplicated) and each share runs once.
                unsafe { simd::run(isa, &job, t..t + 1) };
            }
        })
    }

    /// `matmul`'s columns of the 32-column `tiles` only, into an output that holds just
    /// them: `out[r * width + c]` is column `tiles.start · 32 + c` (`width`: those tiles'
    /// columns below n), with the bits `matmul` gives it. A head streamed in blocks, each
    /// reduced before the next (a per-row argmax over a large vocabulary), never holds
    /// whole rows.
    pub fn matmul_block(
        &self,
        w: &PackedMatrix,
        x: &QuantizedRows,
        tiles: std::ops::Range<usize>,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        Self::check_inputs(w, x)?;
        if tiles.start >= tiles.end || tiles.end > w.n_tiles() {
            return Err(KernelError::ColumnOutOfRange {
                col: (tiles.end * TILE).min(u32::MAX as usize) as u32,
                n: w.n(),
            });
        }
        let width = (tiles.end * TILE).min(w.n()) - tiles.start * TILE;
        Self::check_len(x.rows().saturating_mul(width), out)?;
        if x.rows() == 0 {
            return Ok(());
        }
        let first = tiles.start;
        let job = Job::block(w.view(), x.view(), tiles.clone(), out);
        let isa = self.isa;
        self.run_shares(tiles.len(), &|share| {
            // SAFETY: as in `matmul`: `isa` available, shapes validated, the tiles lie
            // within the matrix and `out` holds exactly their columns; the shares are
            // disjoint and each runs once.
            unsafe { simd::run(isa, &job, first + share.start..first + share.end) };
        })
    }

    /// The shapes `matmul` and `matmul_columns` accept (`matmul_block` checks its own output).
    fn check(&self, w: &PackedMatrix, x: &QuantizedRows, out: &[f32]) -> Result<(), KernelError> {
        Self::check_inputs(w, x)?;
        // rows · n ≤ out.len() when it matches, so an overflow can only mean a mismatch.
        Self::check_len(x.rows().saturating_mul(w.n()), out)
    }

    /// Valid activations with the weights' inner dimension.
    fn check_inputs(w: &PackedMatrix, x: &QuantizedRows) -> Result<(), KernelError> {
        x.check()?;
        if x.k() != w.k() {
            return Err(KernelError::KMismatch {
                weights: w.k(),
                activations: x.k(),
            });
        }
        Ok(())
    }

    fn check_len(expected: usize, out: &[f32]) -> Result<(), KernelError> {
        if out.len() != expected {
            return Err(KernelError::OutputLength {
                expected,
                actual: out.len(),
            });
        }
        Ok(())
    }

    /// Test hook: the matmul through the EVEX build of the AvxVnni kernel, one thread.
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(crate) fn matmul_vnni256_evex(
        w: &PackedMatrix,
        x: &QuantizedRows,
        out: &mut [f32],
    ) -> Option<()> {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx512f")
            && has!("avx512vl")
            && has!("avx512vnni")
            && has!("fma")
            && has!("f16c"))
        {
            return None;
        }
        assert_eq!(out.len(), x.rows() * w.n());
        assert_eq!(x.k(), w.k());
        let job = Job::new(w.view(), x.view(), out);
        // SAFETY: features checked above, shapes asserted, single thread.
        unsafe { simd::run_vnni256_evex(&job, 0..w.n_tiles()) };
        Some(())
    }
}

/// The bytes of `w` thread `t` of `threads` warms: the start of its own shares' tiles,
/// which it runs first and in order. Its `CHUNKS` consecutive shares of `threads · CHUNKS`
/// are together exactly its share of `threads`.
fn warm_range(w: &PackedMatrix, threads: usize, t: usize) -> Range<usize> {
    let tiles = share_of(w.n_tiles(), threads, t);
    let first = w.tile_offset(tiles.start);
    first..w.tile_offset(tiles.end).min(first + WARM_BYTES)
}

// `QuantizedRows::quantize_on` is defined here, beside the threads it spreads the rows
// over, so that quant.rs needs nothing of the executor (exec.rs uses quant.rs).
impl QuantizedRows {
    /// `quantize` with the rows spread over `exec`'s threads: every block is quantized
    /// on its own, so the bits are the same as `quantize`'s.
    pub fn quantize_on(&mut self, exec: &Executor, x: &[f32], rows: usize, k: usize) {
        const MIN_ROWS_PER_PART: usize = 4;
        let parts = (rows / MIN_ROWS_PER_PART).min(exec.threads() * 2);
        if parts < 2 {
            return self.quantize(x, rows, k);
        }
        if !self.prepare(x, rows, k) {
            return;
        }
        let rows_per = rows.div_ceil(parts);
        let q_parts: Vec<_> = self
            .row_parts_mut(rows_per)
            .map(std::sync::Mutex::new)
            .collect();
        let run = exec.for_each(q_parts.len(), &|p| {
            let mut guard = q_parts[p].lock().unwrap_or_else(|e| e.into_inner());
            let (q, meta) = &mut *guard;
            let start = p * rows_per * k;
            simd::quantize_rows(&x[start..start + q.len()], q, meta);
        });
        if run.is_err() {
            // A worker died mid-way; redo it here so the buffer is never half written.
            drop(q_parts);
            self.quantize(x, rows, k);
        }
    }
}

/// Tiles of share i: contiguous, depending only on (n_tiles, shares); a thread's shares
/// are consecutive, so its part of the matrix is one contiguous range.
fn share_of(n_tiles: usize, shares: usize, i: usize) -> Range<usize> {
    (i * n_tiles / shares)..((i + 1) * n_tiles / shares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::WeightFormat;
    use crate::pool::CHUNKS;

    #[test]
    fn shares_cover_all_tiles_once() {
        for n_tiles in [1, 2, 3, 18, 1536] {
            for threads in 1..=5 {
                let mut next = 0;
                for i in 0..threads {
                    let r = share_of(n_tiles, threads, i);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n_tiles);
            }
        }
    }

    #[test]
    fn each_thread_warms_the_start_of_its_own_tiles() {
        for (n, k) in [(32, 32), (100, 64), (3072, 576), (49152, 576)] {
            let w = PackedMatrix::from_f32(&vec![0.5; n * k], n, k).unwrap();
            let per_tile = w.data().len() / w.n_tiles();
            for threads in 1..=3 {
                let shares = threads * CHUNKS;
                for t in 0..threads {
                    let r = warm_range(&w, threads, t);
                    let tiles = share_of(w.n_tiles(), shares, t * CHUNKS);
                    assert_eq!(r.start, tiles.start * per_tile, "n={n} t={t}");
                    assert!(r.end <= w.data().len() && r.len() <= WARM_BYTES);
                    let own = share_of(w.n_tiles(), shares, (t + 1) * CHUNKS - 1).end;
                    assert_eq!(r.len(), ((own - tiles.start) * per_tile).min(WARM_BYTES));
                }
            }
        }
    }

    /// The AvxVnni kernel logic (EVEX-encoded here) against Scalar, all formats.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vnni256_path_matches_scalar() {
        let scalar = Executor::with_isa(1, Isa::Scalar).unwrap();
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for format in WeightFormat::ALL {
            let (n, k) = (75, 2 * format.block_values());
            let mut bytes: Vec<u8> = (0..n * (k / format.block_values()) * format.block_bytes())
                .map(|_| next() as u8)
                .collect();
            // Finite, modest f16 scales (and mins), wherever the format keeps them.
            for blk in bytes.chunks_exact_mut(format.block_bytes()) {
                for &at in format.f16_offsets() {
                    blk[at + 1] = 0x2c | (blk[at + 1] & 0x83);
                }
            }
            let w = PackedMatrix::from_ggml(format, &bytes, n, k).unwrap();
            for rows in 1..=9 {
                let xs: Vec<f32> = (0..rows * k)
                    .map(|_| (next() >> 40) as f32 / 8e6 - 1.0)
                    .collect();
                let mut x = QuantizedRows::new();
                x.quantize(&xs, rows, k);
                let mut want = vec![0.0; rows * n];
                scalar.matmul(&w, &x, &mut want).unwrap();
                let mut got = vec![0.0; rows * n];
                if Executor::matmul_vnni256_evex(&w, &x, &mut got).is_none() {
                    return;
                }
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{format:?} rows={rows}");
            }
        }
    }

    #[test]
    fn quantize_on_threads_gives_quantize_bits() {
        let key =
            |m: &crate::format::BlockMeta| (m.d.to_bits(), m.sx.to_bits(), m.c8, m.c128, m.c32);
        for threads in [1, 3] {
            let exec = Executor::new(threads);
            for rows in [1, 7, 16, 33] {
                let k = 96;
                let x: Vec<f32> = (0..rows * k)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.031)
                    .collect();
                let mut want = QuantizedRows::new();
                want.quantize(&x, rows, k);
                let mut got = QuantizedRows::new();
                got.quantize_on(&exec, &x, rows, k);
                assert_eq!((got.rows(), got.k()), (rows, k));
                assert_eq!(got.q(), want.q(), "threads={threads} rows={rows}");
                let (g, w): (Vec<_>, Vec<_>) = (
                    got.meta().iter().map(key).collect(),
                    want.meta().iter().map(key).collect(),
                );
                assert_eq!(g, w, "threads={threads} rows={rows}");
            }
            let mut bad = QuantizedRows::new();
            bad.quantize_on(&exec, &[0.0; 40], 8, 5);
            assert!(bad.check().is_err());
        }
    }
}
