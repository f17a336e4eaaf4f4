//! The compute kernels: one generic driver (tile-outer, rows-inner) and one micro-kernel
//! family per instruction set. All `unsafe` SIMD code of the crate lives here.
//!
//! Every path computes, for output (r, c), the same sequence: per k-block an exact i32
//! dot product, then `acc = fma(isum as f32, dw · dx, acc)` (and for Q4_1
//! `acc = fma(mw, sx, acc)`), blocks in order. Lane-wise SIMD and scalar code therefore
//! agree bit for bit, whatever the batch size, tile split or instruction set.

// Register-blocked loops index several per-row arrays (pointers, accumulators) by row;
// iterator chains over them would obscure the blocking.
#![allow(clippy::needless_range_loop)]

use crate::format::{BlockMeta, Segment, WeightFormat, QK, TILE};
use crate::isa::Isa;
use std::marker::PhantomData;
use std::ops::Range;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avxvnni;
pub(crate) mod peak;
mod quantize;
mod scalar;
pub(crate) mod vecops;
#[cfg(target_arch = "x86_64")]
mod ymm;
#[cfg(target_arch = "x86_64")]
mod ymm_k;

pub(crate) use quantize::quantize_rows;

/// Whether this process may use AMX tiles (see `amx::usable`).
pub(crate) fn amx_usable() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        amx::usable()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Rows per pass over the weights. Bounds the activation working set (kept in L2 while
/// the tiles stream by) for long prompts; speculation batches fit in one pass.
const ROW_CHUNK: usize = 64;

/// A packed matrix as a job reads it: its bytes and the layout of its segments.
#[derive(Clone, Copy)]
pub(crate) struct Weights<'a> {
    pub data: &'a [u8],
    pub segments: &'a [Segment],
    pub n: usize,
    pub k: usize,
}

/// Quantized activation rows as a job reads them.
#[derive(Clone, Copy)]
pub(crate) struct Acts<'a> {
    pub q: &'a [i8],
    pub meta: &'a [BlockMeta],
    pub rows: usize,
    pub k: usize,
}

/// Raw view of one validated matmul, shared read-only by the threads; each thread writes
/// only the output columns of its own tiles. [`run`] splits it into one job per segment
/// of the matrix; a segment's job sees its own tiles as tiles `0..n_tiles`.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub format: WeightFormat,
    /// Packed weights, `n_tiles × kb` records of `rec` bytes on average (the matrix's
    /// first byte before [`run`] splits it by segment).
    pub w: *const u8,
    pub rec: usize,
    pub n_tiles: usize,
    pub kb: usize,
    pub n: usize,
    pub k: usize,
    pub rows: usize,
    pub xq: *const i8,
    pub meta: *const BlockMeta,
    pub out: *mut f32,
    /// Output row stride, and the column of this job's tile 0 that `out` holds at its
    /// column 0 (negated): a full matmul writes all n columns; a block writes only its own
    /// tiles' columns; a segment's tile 0 is the segment's first column.
    pub out_stride: usize,
    pub out_col0: isize,
    segments: &'a [Segment],
    _borrow: PhantomData<(&'a [u8], &'a [i8], &'a mut [f32])>,
}

// SAFETY: a Job is only a view of borrowed data that outlives it (`'a`); the inputs are
// read-only and the output is written through `out` only at columns of the tile range a
// thread was given, and those ranges are disjoint (see `Executor::matmul`).
unsafe impl Send for Job<'_> {}
// SAFETY: as above.
unsafe impl Sync for Job<'_> {}

impl<'a> Job<'a> {
    /// Caller guarantees `x.k == w.k` and `out.len() == x.rows * w.n`.
    pub(crate) fn new(w: Weights<'a>, x: Acts<'a>, out: &'a mut [f32]) -> Self {
        debug_assert_eq!(x.k, w.k);
        debug_assert_eq!(out.len(), x.rows * w.n);
        Job::new_unchecked(w, x, out)
    }

    /// A job whose output holds only the columns of `tiles`: `out[r * width + c]` is
    /// column `tiles.start · 32 + c`, where `width` spans those tiles' columns below n.
    /// Caller guarantees `x.k == w.k`, tiles within the matrix and
    /// `out.len() == x.rows * width`.
    pub(crate) fn block(
        w: Weights<'a>,
        x: Acts<'a>,
        tiles: Range<usize>,
        out: &'a mut [f32],
    ) -> Self {
        let col0 = tiles.start * TILE;
        let width = (tiles.end * TILE).min(w.n) - col0;
        debug_assert_eq!(out.len(), x.rows * width);
        let mut job = Job::new_unchecked(w, x, out);
        job.out_stride = width;
        job.out_col0 = col0 as isize;
        job
    }

    fn new_unchecked(w: Weights<'a>, x: Acts<'a>, out: &'a mut [f32]) -> Self {
        let format = w.segments[0].format;
        Job {
            format,
            w: w.data.as_ptr(),
            rec: format.record_bytes(),
            n_tiles: w.n.div_ceil(TILE),
            kb: w.k / QK,
            n: w.n,
            k: w.k,
            rows: x.rows,
            xq: x.q.as_ptr(),
            meta: x.meta.as_ptr(),
            out: out.as_mut_ptr(),
            out_stride: w.n,
            out_col0: 0,
            segments: w.segments,
            _borrow: PhantomData,
        }
    }

    /// The part of this (whole-matrix) job in segment `s`, and `tiles`' part of it in
    /// the segment's own tile numbers (empty if they do not meet).
    fn segment(&self, s: &Segment, tiles: &Range<usize>) -> (Job<'a>, Range<usize>) {
        let lo = tiles.start.max(s.tile0);
        let hi = tiles.end.min(s.tile0 + s.tiles).max(lo);
        let job = Job {
            format: s.format,
            w: self.w.wrapping_add(s.offset),
            rec: s.format.record_bytes(),
            n_tiles: s.tiles,
            n: s.cols,
            out_col0: self.out_col0 - (s.tile0 * TILE) as isize,
            ..*self
        };
        (job, lo - s.tile0..hi - s.tile0)
    }
}

/// One micro-kernel call: `R` rows of one tile.
pub(crate) struct Tile<const R: usize> {
    /// First record of the tile.
    pub w: *const u8,
    /// This call's part of prefetching the next tile.
    pub pf: Prefetch,
    /// Row starts in the quantized activations and their block metadata.
    pub x: [*const i8; R],
    pub m: [*const BlockMeta; R],
    /// Output of each row at the tile's first column.
    pub out: [*mut f32; R],
    /// Columns of this tile below n (1..=32); the rest is padding and is not written.
    pub valid: usize,
}

/// A micro-kernel: computes and stores `R` (1..=`ROWS`) rows × one tile.
pub(crate) trait TileKernel {
    /// Most rows per call (at most 6): as many as keep every row's accumulators in
    /// registers, so each weight vector loaded and unpacked serves that many rows.
    const ROWS: usize = 4;
    /// # Safety
    /// `t` must come from `drive` for a valid `job`, and the ISA of the implementation
    /// must be available.
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>);
}

/// Runs `K` over `tiles` × all rows: rows in chunks, then tiles, then groups of
/// `K::ROWS` rows (and one smaller remainder), so each row group reuses a tile while it is in cache.
///
/// # Safety
/// `job` must describe live buffers (`Job::new`), `tiles` must lie within the matrix,
/// no other thread may write the columns of `tiles`, and K's ISA must be available.
#[inline(always)]
pub(crate) unsafe fn drive<K: TileKernel>(job: &Job, tiles: Range<usize>) {
    let mut r0 = 0;
    while r0 < job.rows {
        let r_end = (r0 + ROW_CHUNK).min(job.rows);
        for t in tiles.clone() {
            let (w, next) = tile_and_next(job, t);
            let valid = (job.n - t * TILE).min(TILE);
            let groups = (r_end - r0).div_ceil(K::ROWS);
            let mut r = r0;
            for group in 0..groups {
                // Rows split evenly over the groups (8 rows as 4 + 4, not 6 + 2): measured
                // 2-5% faster at 7, 8 and 13 rows, the same elsewhere.
                let step = (r_end - r).div_ceil(groups - group);
                // Every row group fetches its share of the next tile's lines, so the
                // requests are spread over the whole tile instead of bursting (a burst
                // runs out of fill buffers and stalls the compute it should overlap).
                let pf = Prefetch {
                    base: next,
                    first_line: group,
                    line_step: groups,
                };
                // SAFETY: forwarded from this function's contract; rows r..r+step exist.
                unsafe {
                    match step {
                        6 => K::tile::<6>(job, &tile_at(job, w, pf, t, r, valid)),
                        5 => K::tile::<5>(job, &tile_at(job, w, pf, t, r, valid)),
                        4 => K::tile::<4>(job, &tile_at(job, w, pf, t, r, valid)),
                        3 => K::tile::<3>(job, &tile_at(job, w, pf, t, r, valid)),
                        2 => K::tile::<2>(job, &tile_at(job, w, pf, t, r, valid)),
                        _ => K::tile::<1>(job, &tile_at(job, w, pf, t, r, valid)),
                    }
                }
                r += step;
            }
        }
        r0 = r_end;
    }
}

/// Tile t's first record, and the next tile's (to prefetch: even past this thread's
/// share, it is most likely the next one this thread computes; null after the last).
#[inline(always)]
pub(crate) fn tile_and_next(job: &Job, t: usize) -> (*const u8, *const u8) {
    let tile_bytes = job.kb * job.rec;
    // Pointer arithmetic only: tiles t and t + 1 (when it exists) lie inside the buffer.
    let w = job.w.wrapping_add(t * tile_bytes);
    let next = if t + 1 < job.n_tiles {
        w.wrapping_add(tile_bytes)
    } else {
        std::ptr::null()
    };
    (w, next)
}

/// The micro-kernel arguments for rows r..r+R of tile t.
///
/// # Safety
/// t < n_tiles, r + R ≤ rows, `w` the tile's first record.
#[inline(always)]
unsafe fn tile_at<const R: usize>(
    job: &Job,
    w: *const u8,
    pf: Prefetch,
    t: usize,
    r: usize,
    valid: usize,
) -> Tile<R> {
    // SAFETY: rows r + i < job.rows and column t·32 < n keep every pointer in bounds.
    unsafe {
        Tile {
            w,
            pf,
            x: std::array::from_fn(|i| job.xq.add((r + i) * job.k)),
            m: std::array::from_fn(|i| job.meta.add((r + i) * job.kb)),
            out: std::array::from_fn(|i| {
                let col = (t * TILE) as isize - job.out_col0;
                job.out.offset(((r + i) * job.out_stride) as isize + col)
            }),
            valid,
        }
    }
}

/// Computes the output columns of `tiles` for all rows of the whole-matrix `job` with
/// `isa`, segment by segment.
///
/// # Safety
/// `isa.is_available()`, and the contract of [`drive`].
pub(crate) unsafe fn run(isa: Isa, job: &Job, tiles: Range<usize>) {
    for s in job.segments {
        let (seg, local) = job.segment(s, &tiles);
        if !local.is_empty() {
            // SAFETY: forwarded; the segment's tiles are its part of the matrix's.
            unsafe { run_segment(isa, &seg, local) };
        }
    }
}

/// [`run`] within one segment.
///
/// # Safety
/// As for [`run`], with `job` one segment's.
unsafe fn run_segment(isa: Isa, job: &Job, tiles: Range<usize>) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Amx if job.rows >= amx::MIN_ROWS => amx::run(job, tiles),
            #[cfg(target_arch = "x86_64")]
            Isa::Amx | Isa::Avx512Vnni => avx512::run(job, tiles),
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => avxvnni::run(job, tiles),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::run(job, tiles),
            _ => scalar::run(job, tiles),
        }
    }
}

/// Test hook: the 256-bit VNNI kernel with the EVEX (AVX-512VL) `vpdpbusd`, so the
/// AvxVnni code path is exercised on CPUs that have AVX-512 VNNI but not AVX-VNNI.
///
/// # Safety
/// AVX-512 F/VL/VNNI available, and the contract of [`drive`].
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) unsafe fn run_vnni256_evex(job: &Job, tiles: Range<usize>) {
    for s in job.segments {
        let (seg, local) = job.segment(s, &tiles);
        // SAFETY: forwarded.
        unsafe { avxvnni::run_evex(&seg, local) }
    }
}

/// A micro-kernel call's part of prefetching the next tile: of each record, lines
/// `first_line`, `first_line + line_step`, … (`base` null: nothing to prefetch).
#[derive(Clone, Copy)]
pub(crate) struct Prefetch {
    pub base: *const u8,
    pub first_line: usize,
    pub line_step: usize,
}

/// Prefetches this call's lines of the `len` bytes at `pf.base + off` into L2. L2, not
/// L1: measured faster at n = 1, as L1 prefetches of DRAM lines hold the few L1 fill
/// buffers for a whole memory latency and throttle the stream.
///
/// # Safety
/// `pf.base` null or pointing into an allocation covering `off + len` bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch(pf: &Prefetch, off: usize, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    if !pf.base.is_null() {
        // A plain loop: `step_by` would divide to count its steps, on every block.
        let mut l = pf.first_line * 64;
        while l < len {
            // SAFETY: in bounds per the contract; prefetch never faults anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(pf.base.add(off + l).cast()) };
            l += pf.line_step * 64;
        }
    }
}

/// Reads the 4 activation bytes at `p` as one i32 (to broadcast).
///
/// # Safety
/// `p` valid for 4 bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn quad(p: *const i8) -> i32 {
    // SAFETY: per the contract; no alignment needed.
    unsafe { p.cast::<i32>().read_unaligned() }
}

/// Pulls the cache lines of `lines` (addresses, stepped by 64) into L2. A prefetch is a
/// hint with no architectural effect, so any address is allowed.
#[inline]
pub(crate) fn warm_l2(lines: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    for a in lines.step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        // SAFETY: a prefetch never faults and changes no memory, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(a as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = lines;
}
