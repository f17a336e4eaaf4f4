//! AMX tile kernels (Intel Sapphire Rapids and later) for matmuls of several rows: a
//! speculation tree's verify forward, a batch, a prompt. One `tdpbsud` multiplies up to
//! 16 activation rows by a block of 32 values of 16 columns (8,192 multiply-adds) where
//! the 512-bit VNNI kernels issue 64-wide `vpdpbusd`s, so the kernels stop being bound by
//! the multiply-adds and are bound by unpacking the weights and the float epilogue.
//!
//! The packed layout (`format.rs`) is already the B operand AMX wants: in a 64-byte
//! vector, column `c` of a 16-column half owns bytes `4c..4c+4`, four consecutive k. So a
//! block's unpacked quant vectors, stored in k-quad order, are the B tile (Q8_0's are read
//! straight from the record); the A tile is the rows' quantized activations, read in
//! place with the row stride. The i32 sums are exact, so they equal the VNNI kernels'
//! whatever the order, and the float sequence after each block is the same function
//! (`avx512::fold_row`, `avx512::q6_fold_row`): outputs are the same bits as every other
//! path, alone or in any batch.
//!
//! Tile registers are not visible to the compiler: each `asm!` block names them, and
//! nothing else in the process uses them. The tile configuration is loaded per row group
//! and released at the end of a job, so a thread that leaves the kernels holds no tile
//! state across context switches.

use super::avx512::{
    fifth_bits, fold_row, halfs, nib_quads, nib_scales, q6_fold_row, q6_high, q6_quads, q6_scales,
};
use super::{prefetch, tile_and_next, Job, Prefetch};
use crate::format::{BlockMeta, WeightFormat, QK, SCALES, TILE};
use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows of one tile: a row group's most.
const TILE_ROWS: usize = 16;

/// Fewest rows for which the tiles are used; below, the VNNI kernels run. A tile pass
/// costs about the same for 1 row as for 16, the VNNI kernels grow with the rows: on the
/// 1.5B the tiles took 58 ms at 4 rows against VNNI's 46, and 65 against 76 at 8.
pub(super) const MIN_ROWS: usize = 7;

/// Rows per pass over the weights, as in `drive`: bounds the activations kept in cache
/// while the tiles stream by.
const ROW_CHUNK: usize = 64;

/// The 64-byte operand of `ldtilecfg` (palette 1): bytes 16..48 each tile's bytes per
/// row, 48..64 its rows.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// `tiles[i]`: (rows, bytes per row) of `tmm{i}`.
    fn new(tiles: &[(usize, usize)]) -> TileConfig {
        let mut c = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for (i, &(rows, bytes)) in tiles.iter().enumerate() {
            c.rows[i] = rows as u8;
            c.colsb[i] = bytes as u16;
        }
        c
    }
}

/// The configuration of a row group of `rows` for `format`. Nibble formats and Q8_0:
/// `tmm1`/`tmm2` B (8 k-quads of each 16-column half), and two sets of A (the rows' 32
/// activation bytes of a block) and C pair: `tmm0` with `tmm3`/`tmm4`, `tmm5` with
/// `tmm6`/`tmm7`, taken by consecutive blocks (or row groups) in turn: a C tile's zeroing,
/// product and store are a chain of about 70 cycles, and tile registers are not renamed.
/// Q6_K, whose scales change every 16 values: `tmm0`/`tmm1` A of each 16-value half,
/// `tmm2`/`tmm3` B of each (4 k-quads), reloaded per column half, and a C tile per half
/// and 16-value half in `tmm4..tmm7`.
fn config(format: WeightFormat, rows: usize) -> TileConfig {
    let c = (rows, TILE_ROWS * 4);
    if format == WeightFormat::Q6_K {
        TileConfig::new(&[(rows, 16), (rows, 16), (4, 64), (4, 64), c, c, c, c])
    } else {
        let (a, b) = ((rows, QK), (8, 64));
        TileConfig::new(&[a, b, b, c, c, a, c, c])
    }
}

/// Blocks whose B operands are unpacked ahead of the one multiplied, and the ring of
/// buffers that holds them: a tile load of lines the vector unit stored in the same step
/// waits for them (20 ns for a block's 1 KiB against the product's 5 ns, measured on the
/// Xeon of the AMX benchmark); stored three steps before, it does not.
const LEAD: usize = 3;
const RING: usize = LEAD + 1;

/// i32 sums of one C tile, one 16-column row per activation row.
#[repr(C, align(64))]
struct Sums([[i32; 16]; TILE_ROWS]);

impl Sums {
    fn new() -> Sums {
        Sums([[0; 16]; TILE_ROWS])
    }

    /// Row i plus `c` (when it is not 0).
    ///
    /// # Safety
    /// AVX-512 F enabled by the caller.
    #[inline(always)]
    unsafe fn row(&self, i: usize, c: i32) -> __m512i {
        // SAFETY: a 64-aligned row of 16 i32.
        unsafe {
            let v = _mm512_load_si512(self.0[i].as_ptr().cast());
            if c == 0 {
                v
            } else {
                _mm512_add_epi32(v, _mm512_set1_epi32(c))
            }
        }
    }
}

/// One block's B operand for one 16-column half: 8 k-quad vectors (Q6_K: 4 per 16-value
/// half).
#[repr(C, align(64))]
struct Quads([__m512i; 8]);

/// A block's B operands, one per column half: address and row stride.
type Operands = [(*const u8, usize); 2];

/// Computes the output columns of `tiles` for all rows of the segment `job`.
///
/// # Safety
/// AMX-TILE and AMX-INT8 usable by this process (`Isa::Amx`), AVX-512 F/BW/VNNI and FMA
/// available, and the contract of `drive`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
pub(super) unsafe fn run(job: &Job, tiles: Range<usize>) {
    let mut r0 = 0;
    while r0 < job.rows {
        let r_end = (r0 + ROW_CHUNK).min(job.rows);
        // Rows split evenly into groups of at most 16 (20 rows as 10 + 10).
        let groups = (r_end - r0).div_ceil(TILE_ROWS);
        let mut loaded = 0;
        // Groups of equal size share each block's unpacked operands in one call; otherwise
        // (sizes differing by one) each group is a call of its own.
        let equal = (r_end - r0).is_multiple_of(groups);
        let (calls, per_call) = if equal { (1, groups) } else { (groups, 1) };
        for t in tiles.clone() {
            let (w, next) = tile_and_next(job, t);
            let mut r = r0;
            for call in 0..calls {
                let rows = (r_end - r).div_ceil((calls - call) * per_call);
                if rows != loaded {
                    let cfg = config(job.format, rows);
                    // SAFETY: a valid palette-1 configuration; AMX usable per the contract.
                    unsafe { asm!("ldtilecfg [{}]", in(reg) &cfg, options(nostack)) };
                    loaded = rows;
                }
                let at = At {
                    w,
                    pf: Prefetch {
                        base: next,
                        first_line: call,
                        line_step: calls,
                    },
                    t,
                    r,
                    rows,
                    groups: per_call,
                };
                // SAFETY: rows r..r + rows · per_call exist, tile t is in the matrix, the
                // tiles are configured for `rows`.
                unsafe {
                    match job.format {
                        WeightFormat::Q8_0 => tile::<Q8>(job, &at),
                        WeightFormat::Q4_0 => tile::<Nib<1, false, false>>(job, &at),
                        WeightFormat::Q4_1 => tile::<Nib<0, false, false>>(job, &at),
                        WeightFormat::Q5_0 => tile::<Nib<2, true, false>>(job, &at),
                        WeightFormat::Q4_K => tile::<Nib<0, false, true>>(job, &at),
                        WeightFormat::Q5_K => tile::<Nib<0, true, true>>(job, &at),
                        WeightFormat::Q6_K => tile::<Q6K>(job, &at),
                    }
                }
                r += rows * per_call;
            }
        }
        r0 = r_end;
    }
    // SAFETY: releases this thread's tile state; AMX usable per the contract.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// One call: `groups` row groups of `rows` rows each from row r, of tile t (first record
/// `w`).
struct At {
    w: *const u8,
    pf: Prefetch,
    t: usize,
    r: usize,
    rows: usize,
    groups: usize,
}

/// What a format does per block.
trait Shape {
    /// Block record `rec`'s B operands: unpacked into `quads`, or read in place.
    ///
    /// # Safety
    /// `rec` a block record of this format; AVX-512 F/BW enabled by the caller.
    unsafe fn operands(rec: *const u8, quads: &mut [Quads; 2]) -> Operands;

    /// The block's tile products into `sums`, with the A and C tiles of `SLOT` (the
    /// block's or the row group's number modulo 2): A from `x` (row stride `stride`).
    ///
    /// # Safety
    /// Tiles configured by `config` for this format; `x` readable for the configured
    /// rows × 32 bytes at `stride`; `b` from `operands`.
    unsafe fn dot<const SLOT: usize>(
        x: *const i8,
        stride: usize,
        b: Operands,
        sums: &mut [Sums; 4],
    ) {
        // SAFETY: forwarded; the nibble formats' and Q8_0's products (Q6_K has its own).
        unsafe { dot_block::<SLOT>(x, stride, b, sums) }
    }

    /// The block's float sequence for rows 0..N (`meta`: row 0's block meta, rows `kb`
    /// apart; rows from `rows` on repeat the last row's meta, and their results are
    /// never stored).
    ///
    /// # Safety
    /// `rec`, `group` as walked; `meta` valid for `rows` rows; AVX-512 F and FMA enabled.
    unsafe fn fold<const N: usize>(
        rec: *const u8,
        group: *const u8,
        meta: (*const BlockMeta, usize, usize),
        sums: &[Sums; 4],
        acc: &mut [[__m512; 2]; N],
    );
}

/// Q8_0: weights stored as q + 128, read in place (vector (p, g) at p · 128 + g · 64).
struct Q8;
/// The nibble formats, as `avx512::Nib`.
struct Nib<const OFFSET: i32, const FIFTH: bool, const SUPER: bool>;
/// Q6_K: a sum per 16-value half.
struct Q6K;

/// `C_g = A · B_g` (8 k-quads) for both column halves with slot `SLOT`'s A and C tiles, stored
/// to `sums[0]` and `sums[1]`.
///
/// # Safety
/// As for `Shape::dot`, with the nibble or Q8_0 configuration.
#[inline(always)]
unsafe fn dot_block<const SLOT: usize>(
    x: *const i8,
    stride: usize,
    b: Operands,
    sums: &mut [Sums; 4],
) {
    // SAFETY: per the contract. tdpbsud: signed activations × unsigned weights, exact
    // i32 sums (`vpdpbusd`'s, operands swapped).
    unsafe {
        let [s0, s1, _, _] = sums;
        asm!(
            "tilezero tmm{c0}",
            "tilezero tmm{c1}",
            "tileloadd tmm{a}, [{x} + {xs}*1]",
            "tileloadd tmm1, [{b0} + {bs0}*1]",
            "tileloadd tmm2, [{b1} + {bs1}*1]",
            "tdpbsud tmm{c0}, tmm{a}, tmm1",
            "tdpbsud tmm{c1}, tmm{a}, tmm2",
            "tilestored [{s0} + {cs}*1], tmm{c0}",
            "tilestored [{s1} + {cs}*1], tmm{c1}",
            a = const 5 * (SLOT % 2),
            c0 = const 3 + 3 * (SLOT % 2),
            c1 = const 4 + 3 * (SLOT % 2),
            x = in(reg) x,
            xs = in(reg) stride,
            b0 = in(reg) b[0].0,
            bs0 = in(reg) b[0].1,
            b1 = in(reg) b[1].0,
            bs1 = in(reg) b[1].1,
            s0 = in(reg) s0.0.as_mut_ptr(),
            s1 = in(reg) s1.0.as_mut_ptr(),
            cs = in(reg) 64usize,
            options(nostack),
        );
    }
}

impl Shape for Q8 {
    #[inline(always)]
    unsafe fn operands(rec: *const u8, _: &mut [Quads; 2]) -> Operands {
        // SAFETY: per the contract.
        unsafe {
            let q = rec.add(SCALES);
            [(q, 128), (q.add(64), 128)]
        }
    }

    #[inline(always)]
    unsafe fn fold<const N: usize>(
        rec: *const u8,
        _: *const u8,
        meta: (*const BlockMeta, usize, usize),
        sums: &[Sums; 4],
        acc: &mut [[__m512; 2]; N],
    ) {
        // SAFETY: per the contract.
        unsafe {
            let dw = [halfs(rec), halfs(rec.add(32))];
            for i in 0..N {
                let m = row_meta(meta, i);
                let isum = [sums[0].row(i, m.c128), sums[1].row(i, m.c128)];
                fold_row(m, dw, None, isum, &mut acc[i]);
            }
        }
    }
}

impl<const OFFSET: i32, const FIFTH: bool, const SUPER: bool> Shape for Nib<OFFSET, FIFTH, SUPER> {
    #[inline(always)]
    unsafe fn operands(rec: *const u8, quads: &mut [Quads; 2]) -> Operands {
        // SAFETY: per the contract.
        unsafe {
            // Q4_1's f16 mins sit between its scales and its nibbles.
            let q = rec.add(if SUPER || OFFSET != 0 {
                SCALES
            } else {
                2 * SCALES
            });
            let h = fifth_bits::<FIFTH>(q);
            for p in 0..4 {
                let (lo, hi) = nib_quads::<FIFTH>(q, h, p);
                for g in 0..2 {
                    quads[g].0[p] = lo[g];
                    quads[g].0[4 + p] = hi[g];
                }
            }
            [
                (quads[0].0.as_ptr().cast(), 64),
                (quads[1].0.as_ptr().cast(), 64),
            ]
        }
    }

    #[inline(always)]
    unsafe fn fold<const N: usize>(
        rec: *const u8,
        group: *const u8,
        meta: (*const BlockMeta, usize, usize),
        sums: &[Sums; 4],
        acc: &mut [[__m512; 2]; N],
    ) {
        // SAFETY: per the contract.
        unsafe {
            let (dw, mw) = nib_scales::<OFFSET, SUPER>(rec, group);
            for i in 0..N {
                let m = row_meta(meta, i);
                let c = OFFSET * m.c8;
                let isum = [sums[0].row(i, c), sums[1].row(i, c)];
                fold_row(m, dw, mw, isum, &mut acc[i]);
            }
        }
    }
}

impl Shape for Q6K {
    #[inline(always)]
    unsafe fn operands(rec: *const u8, quads: &mut [Quads; 2]) -> Operands {
        // SAFETY: per the contract.
        unsafe {
            let q = rec.add(SCALES);
            for g in 0..2 {
                for hh in 0..2 {
                    let hv = q6_high(q, g, hh);
                    for e in 0..2 {
                        // k-quads p (the first 16 values) and 4 + p (the second).
                        let p = 2 * hh + e;
                        let (lo, hi) = q6_quads(q, hv, g, hh, e);
                        quads[g].0[p] = lo;
                        quads[g].0[4 + p] = hi;
                    }
                }
            }
            [
                (quads[0].0.as_ptr().cast(), 64),
                (quads[1].0.as_ptr().cast(), 64),
            ]
        }
    }

    #[inline(always)]
    unsafe fn dot<const SLOT: usize>(
        x: *const i8,
        stride: usize,
        b: Operands,
        sums: &mut [Sums; 4],
    ) {
        // SAFETY: per the contract: A per 16-value half, B per column half and 16-value
        // half (its 4 k-quads at 256 bytes), a C tile each.
        unsafe {
            let [s0, s1, s2, s3] = sums;
            asm!(
                "tilezero tmm4",
                "tilezero tmm5",
                "tilezero tmm6",
                "tilezero tmm7",
                "tileloadd tmm0, [{x} + {xs}*1]",
                "tileloadd tmm1, [{xh} + {xs}*1]",
                "tileloadd tmm2, [{b0} + {bs}*1]",
                "tileloadd tmm3, [{b0h} + {bs}*1]",
                "tdpbsud tmm4, tmm0, tmm2",
                "tdpbsud tmm5, tmm1, tmm3",
                "tileloadd tmm2, [{b1} + {bs}*1]",
                "tileloadd tmm3, [{b1h} + {bs}*1]",
                "tdpbsud tmm6, tmm0, tmm2",
                "tdpbsud tmm7, tmm1, tmm3",
                "tilestored [{s0} + {cs}*1], tmm4",
                "tilestored [{s1} + {cs}*1], tmm5",
                "tilestored [{s2} + {cs}*1], tmm6",
                "tilestored [{s3} + {cs}*1], tmm7",
                x = in(reg) x,
                xh = in(reg) x.add(16),
                xs = in(reg) stride,
                b0 = in(reg) b[0].0,
                b0h = in(reg) b[0].0.add(256),
                b1 = in(reg) b[1].0,
                b1h = in(reg) b[1].0.add(256),
                bs = in(reg) 64usize,
                s0 = in(reg) s0.0.as_mut_ptr(),
                s1 = in(reg) s1.0.as_mut_ptr(),
                s2 = in(reg) s2.0.as_mut_ptr(),
                s3 = in(reg) s3.0.as_mut_ptr(),
                cs = in(reg) 64usize,
                options(nostack),
            );
        }
    }

    #[inline(always)]
    unsafe fn fold<const N: usize>(
        rec: *const u8,
        group: *const u8,
        meta: (*const BlockMeta, usize, usize),
        sums: &[Sums; 4],
        acc: &mut [[__m512; 2]; N],
    ) {
        // SAFETY: per the contract.
        unsafe {
            for g in 0..2 {
                let dw = q6_scales(rec, group, g);
                for i in 0..N {
                    let m = row_meta(meta, i);
                    let isum = [
                        sums[2 * g].row(i, m.c32[0]),
                        sums[2 * g + 1].row(i, m.c32[1]),
                    ];
                    q6_fold_row(m, dw, isum, &mut acc[i][g]);
                }
            }
        }
    }
}

/// Row i's block meta: `meta` = (row 0's, the stride between rows, the rows); rows past
/// the last take its meta (their sums are stale and their results never stored).
///
/// # Safety
/// `meta.0` valid for `meta.2` rows `meta.1` apart.
#[inline(always)]
unsafe fn row_meta<'a>(meta: (*const BlockMeta, usize, usize), i: usize) -> &'a BlockMeta {
    // SAFETY: per the contract.
    unsafe { &*meta.0.add(i.min(meta.2 - 1) * meta.1) }
}

/// Block records in order, with their groups (as `avx512::blocks` walks them).
struct Walk {
    group: *const u8,
    in_group: usize,
    per_group: usize,
    header: usize,
    rec_bytes: usize,
    group_bytes: usize,
}

impl Walk {
    fn new(format: WeightFormat, w: *const u8) -> Walk {
        Walk {
            group: w,
            in_group: 0,
            per_group: format.blocks_per_group(),
            header: format.header_bytes(),
            rec_bytes: format.block_record_bytes(),
            group_bytes: format.group_bytes(),
        }
    }

    /// The next block's record and group.
    ///
    /// # Safety
    /// At most `kb` calls for a tile of `kb` blocks.
    #[inline(always)]
    unsafe fn next(&mut self) -> (*const u8, *const u8) {
        // SAFETY: records and groups lie inside the tile (`format.rs`).
        unsafe {
            let here = (
                self.group.add(self.header + self.in_group * self.rec_bytes),
                self.group,
            );
            self.in_group += 1;
            if self.in_group == self.per_group {
                (self.group, self.in_group) = (self.group.add(self.group_bytes), 0);
            }
            here
        }
    }
}

/// Row groups × one tile: per block, multiply each group and fold its sums, then unpack
/// the B operands of the block LEAD ahead (once for all the groups).
///
/// The vector unit and the tiles hand data over through memory both ways. B operands are
/// stored LEAD steps before a tile loads them (see `LEAD`); sums are folded in the step
/// that stores them: folding them two steps later, from a ring of buffers, measured 4-20x
/// slower (this VM exposes no hardware counters to say why).
///
/// # Safety
/// As for `run`, with the tiles configured for `at.rows` rows of this format.
#[inline(always)]
unsafe fn tile<S: Shape>(job: &Job, at: &At) {
    // SAFETY: forwarded.
    unsafe {
        if at.rows <= 8 {
            tile_n::<S, 8>(job, at)
        } else {
            tile_n::<S, 16>(job, at)
        }
    }
}

/// `tile` with N accumulator rows per group (N ≥ `at.rows`). Consecutive products
/// alternate between the two sets of A and C tiles.
///
/// # Safety
/// As for `tile`.
#[inline(always)]
unsafe fn tile_n<S: Shape, const N: usize>(job: &Job, at: &At) {
    // SAFETY: blocks as `Walk` gives them, kb of them; rows inside the job.
    unsafe {
        let kb = job.kb;
        let mut quads: [[Quads; 2]; RING] = std::array::from_fn(|_| {
            [
                Quads([_mm512_setzero_si512(); 8]),
                Quads([_mm512_setzero_si512(); 8]),
            ]
        });
        let mut ops: [Operands; RING] = [[(std::ptr::null(), 0); 2]; RING];
        let mut recs = [(std::ptr::null(), std::ptr::null()); RING];
        let mut sums: [[Sums; 4]; 2] =
            std::array::from_fn(|_| std::array::from_fn(|_| Sums::new()));
        let mut acc = [[[_mm512_setzero_ps(); 2]; N]; ROW_CHUNK / TILE_ROWS];
        let mut walk = Walk::new(job.format, at.w);
        for j in 0..LEAD.min(kb) {
            recs[j] = walk.next();
            ops[j] = S::operands(recs[j].0, &mut quads[j]);
        }
        for b in 0..kb {
            prefetch(&at.pf, b * job.rec, job.rec);
            let ((rec, group), op) = (recs[b % RING], ops[b % RING]);
            for gi in 0..at.groups {
                let r = at.r + gi * at.rows;
                let x = job.xq.add(r * job.k + b * QK);
                let slot = (b * at.groups + gi) % 2;
                if slot == 0 {
                    S::dot::<0>(x, job.k, op, &mut sums[0]);
                } else {
                    S::dot::<1>(x, job.k, op, &mut sums[1]);
                }
                let meta = (job.meta.add(r * kb + b), kb, at.rows);
                S::fold::<N>(rec, group, meta, &sums[slot], &mut acc[gi]);
            }
            if b + LEAD < kb {
                let j = (b + LEAD) % RING;
                recs[j] = walk.next();
                ops[j] = S::operands(recs[j].0, &mut quads[j]);
            }
        }
        for gi in 0..at.groups {
            store_rows(job, at.t, at.r + gi * at.rows, at.rows, &acc[gi]);
        }
    }
}

/// Stores rows r..r + rows of tile t's valid columns from `acc`.
///
/// # Safety
/// Rows and tile inside `job`; AVX-512 F enabled by the caller.
#[inline(always)]
unsafe fn store_rows(job: &Job, t: usize, r: usize, rows: usize, acc: &[[__m512; 2]]) {
    let valid = (job.n - t * TILE).min(TILE);
    let bits = ((1u64 << valid) - 1) as u32;
    let (m0, m1) = (bits as u16, (bits >> 16) as u16);
    let col = (t * TILE) as isize - job.out_col0;
    for i in 0..rows {
        // SAFETY: row r + i and column t · 32 lie inside `out`; masked-off lanes are not
        // accessed.
        unsafe {
            let out = job.out.offset(((r + i) * job.out_stride) as isize + col);
            _mm512_mask_storeu_ps(out, m0, acc[i][0]);
            if m1 != 0 {
                _mm512_mask_storeu_ps(out.add(16), m1, acc[i][1]);
            }
        }
    }
}

/// Whether this process may use the tile registers: the CPU has AMX-TILE and AMX-INT8,
/// and Linux granted the tile data state (asked once; a kernel before 5.16 or a
/// hypervisor that hides it says no).
pub(crate) fn usable() -> bool {
    static GRANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GRANTED.get_or_init(|| {
        // Leaf 7 exists on every CPU with AVX-512, which the caller checked first.
        let leaf7 = __cpuid_count(7, 0);
        let (tile, int8) = (leaf7.edx & (1 << 24) != 0, leaf7.edx & (1 << 25) != 0);
        if !(tile && int8) {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: arch_prctl with a request and a feature number: no memory is
            // passed; it fails with an error code where unsupported.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_arch_prctl,
                    ARCH_REQ_XCOMP_PERM,
                    XFEATURE_XTILEDATA,
                )
            };
            rc == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    })
}

/// The int8 peak of the tiles: `iters` × 4 `tdpbsud` of full 16 × 64 tiles into four
/// independent accumulators (16,384 multiply-adds each), as `peak::int8` measures the
/// other paths.
///
/// # Safety
/// AMX usable by this process (`usable`).
pub(crate) unsafe fn peak(iters: usize) -> super::peak::Probe {
    let cfg = TileConfig::new(&[(16, 64); 8]);
    let (a, b) = (
        std::hint::black_box([3u8; 1024]),
        std::hint::black_box([5u8; 1024]),
    );
    let mut c = [
        Sums([[0; 16]; TILE_ROWS]),
        Sums([[0; 16]; TILE_ROWS]),
        Sums([[0; 16]; TILE_ROWS]),
        Sums([[0; 16]; TILE_ROWS]),
    ];
    // An iteration is 85 times the multiply-adds of the VNNI probe's (12 × 64); an eighth
    // of the iterations keeps the probe about as long.
    let iters = (iters / 8).max(1);
    // SAFETY: a valid configuration; 1 KiB operands of 16 rows of 64 bytes; the tile
    // state is released before returning.
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{a} + {s}*1]",
            "tileloadd tmm5, [{a} + {s}*1]",
            "tileloadd tmm6, [{b} + {s}*1]",
            "tileloadd tmm7, [{b} + {s}*1]",
            "2:",
            "tdpbsud tmm0, tmm4, tmm6",
            "tdpbsud tmm1, tmm4, tmm7",
            "tdpbsud tmm2, tmm5, tmm6",
            "tdpbsud tmm3, tmm5, tmm7",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            "tilerelease",
            cfg = in(reg) &cfg,
            a = in(reg) a.as_ptr(),
            b = in(reg) b.as_ptr(),
            s = in(reg) 64usize,
            n = inout(reg) iters => _,
            c0 = in(reg) c[0].0.as_mut_ptr(),
            c1 = in(reg) c[1].0.as_mut_ptr(),
            c2 = in(reg) c[2].0.as_mut_ptr(),
            c3 = in(reg) c[3].0.as_mut_ptr(),
            options(nostack),
        );
    }
    let check = c
        .iter()
        .flat_map(|s| s.0.iter().flatten())
        .map(|&v| v as i64)
        .sum();
    super::peak::Probe {
        macs: (iters * 4 * 16 * 16 * 64) as u64,
        check,
    }
}
