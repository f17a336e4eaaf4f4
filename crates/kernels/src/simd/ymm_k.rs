//! 256-bit kernels for the formats K-quant files add (Q5_0, Q4_K, Q5_K, Q6_K), shared by the
//! AVX2, AVX-VNNI and AVX-512 paths (only the integer dot step differs, `Dot256`). The
//! layout is in `format.rs`; the arithmetic per output is the portable kernel's
//! (`scalar.rs`), lane for lane:
//! - Q5_0: `acc = fma(Σ q·x − 16·Σx, dw · dx, acc)`;
//! - Q4_K and Q5_K: `acc = fma(Σ q·x, (d · sc) · dx, acc)`, then
//!   `acc = fma(−(dmin · m), sx, acc)`;
//! - Q6_K: per 16-value half h, `acc = fma(Σ q·x − 32·Σx, (d · sc_h) · dx, acc)`.
//!
//! `d · sc` and `dmin · m` are exact in f32 (an 11-bit mantissa times an 8-bit integer),
//! so the file's weights are used exactly.

use super::ymm::{epilogue, fold_rows, groups, nibble_sums, Dot256};
use super::{quad, Job, Tile, TileKernel};
use crate::format::{BlockMeta, SCALES, TILE};
use std::arch::x86_64::*;
use std::marker::PhantomData;

/// The K-quant files' nibble formats over a dot step: Q5_0 (`FIFTH`), Q4_K (`SUPER`)
/// and Q5_K (both). `FIFTH`: a fifth bit per quant from the bit-planed vectors after the
/// nibbles; `SUPER`: the K super-block's scales and min term, else Q5_0's block scale and
/// offset.
pub(super) struct KNib<D, const FIFTH: bool, const SUPER: bool>(PhantomData<D>);
/// Q6_K tile kernel over a dot step.
pub(super) struct Q6K<D>(PhantomData<D>);

/// Bytes of a block record's nibble vectors.
const NIBBLES: usize = TILE * 16;

/// `v` shifted left by `n` bits in each 16-bit lane (`n` a constant after unrolling).
#[inline(always)]
unsafe fn shl(v: __m256i, n: i32) -> __m256i {
    // SAFETY: AVX2 enabled by the caller.
    unsafe { _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)) }
}

/// `v` shifted right by `n` bits in each 16-bit lane.
#[inline(always)]
unsafe fn shr(v: __m256i, n: i32) -> __m256i {
    // SAFETY: AVX2 enabled by the caller.
    unsafe { _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)) }
}

/// 8 bytes at `p` widened to f32 lanes, unsigned or signed.
#[inline(always)]
unsafe fn bytes_u8(p: *const u8) -> __m256 {
    // SAFETY: `p` valid for 8 bytes; AVX2 enabled by the caller.
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast()))) }
}

#[inline(always)]
unsafe fn bytes_i8(p: *const u8) -> __m256 {
    // SAFETY: as for `bytes_u8`.
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()))) }
}

/// 8 f16 at `p` widened (exactly) to f32.
#[inline(always)]
unsafe fn halfs(p: *const u8) -> __m256 {
    // SAFETY: `p` valid for 16 bytes; F16C enabled by the caller.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

impl<D: Dot256, const FIFTH: bool, const SUPER: bool> TileKernel for KNib<D, FIFTH, SUPER> {
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: `groups` hands out in-bounds, 32-aligned vectors of block b's record
        // and activation quads of block b.
        unsafe {
            groups::<R, 1>(
                job,
                t,
                |rec, voff, b, isum| {
                    // Q5_0's quants are offset by 16 (no min term): start at −16·Σx.
                    if !SUPER {
                        for r in 0..R {
                            isum[0][r] = _mm256_set1_epi32(2 * (*t.m[r].add(b)).c8);
                        }
                    }
                    let q = rec.add(SCALES + voff);
                    if FIFTH {
                        fifth_sums::<D, R>(q, t, b, &mut isum[0]);
                    } else {
                        nibble_sums::<D, R>(q, t, b, &mut isum[0]);
                    }
                },
                |rec, group, col, m, isum, acc| {
                    if SUPER {
                        min_epilogue(rec, group, col, m, isum, acc)
                    } else {
                        epilogue::<R, false>(rec, group, col, m, isum, acc)
                    }
                },
            )
        }
    }
}

/// Adds block b's dot products of 5-bit quants to each row's sums: 4 nibble vectors at
/// `q` (`p·128` apart) and the fifth-bit vector after them, whose bit `p` (low nibbles) and
/// `4 + p` (high ones) a shift and an AND move to bit 4. Q5_0 and Q5_K.
///
/// # Safety
/// `q` a sub-group's first nibble vector of block b's record; `t` from `drive`; AVX2
/// enabled in the caller.
#[inline(always)]
unsafe fn fifth_sums<D: Dot256, const R: usize>(
    q: *const u8,
    t: &Tile<R>,
    b: usize,
    isum: &mut [__m256i; R],
) {
    // SAFETY: the vectors and the rows' activation quads of block b are in bounds.
    unsafe {
        let nib = _mm256_set1_epi8(0x0f);
        let fifth = _mm256_set1_epi8(0x10);
        let h = _mm256_load_si256(q.add(NIBBLES).cast());
        for p in 0..4 {
            let v = _mm256_load_si256(q.add(p * 128).cast());
            let lo_h = _mm256_and_si256(shl(h, 4 - p as i32), fifth);
            let hi_h = _mm256_and_si256(shr(h, p as i32), fifth);
            let lo = _mm256_or_si256(_mm256_and_si256(v, nib), lo_h);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(v), nib), hi_h);
            for r in 0..R {
                let xa = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                let xb = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 16 + 4 * p)));
                isum[r] = D::dot_nib2(isum[r], lo, xa, hi, xb);
            }
        }
    }
}

/// The float epilogue of the formats with a min (Q4_K, Q5_K): the group's f16 d and dmin
/// times the block's u8 scale and min, both exact, folded by [`fold_rows`].
///
/// # Safety
/// `rec` a block record of `group`, `col` a sub-group's first column; AVX2, FMA, F16C
/// enabled in the caller.
#[inline(always)]
unsafe fn min_epilogue<const R: usize>(
    rec: *const u8,
    group: *const u8,
    col: usize,
    m: [&BlockMeta; R],
    isum: &[[__m256i; R]; 1],
    acc: &mut [__m256; R],
) {
    // SAFETY: the header's d and dmin of the sub-group's 8 columns and the record's scale
    // and min bytes lie in the tile.
    unsafe {
        let dw = _mm256_mul_ps(halfs(group.add(col * 2)), bytes_u8(rec.add(col)));
        let mw = _mm256_mul_ps(
            halfs(group.add(SCALES + col * 2)),
            bytes_u8(rec.add(TILE + col)),
        );
        // The min term is −dmin · m: negating the exact product is exact.
        let neg = _mm256_xor_ps(mw, _mm256_set1_ps(-0.0));
        fold_rows(dw, Some(neg), m, &isum[0], acc);
    }
}

impl<D: Dot256> TileKernel for Q6K<D> {
    // Two i32 accumulators per row (one per 16-value half): 3 rows keep every
    // accumulator and the unpacked weights within the 16 ymm registers.
    const ROWS: usize = 3;

    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: as for Q5.
        unsafe {
            let nib = _mm256_set1_epi8(0x0f);
            let top = _mm256_set1_epi8(0x30);
            groups::<R, 2>(
                job,
                t,
                |rec, voff, b, isum| {
                    for r in 0..R {
                        let c = (*t.m[r].add(b)).c32;
                        isum[0][r] = _mm256_set1_epi32(c[0]);
                        isum[1][r] = _mm256_set1_epi32(c[1]);
                    }
                    let q = rec.add(SCALES + voff);
                    for h in 0..2 {
                        let hv = _mm256_load_si256(q.add(NIBBLES + h * 128).cast());
                        for e in 0..2 {
                            let p = 2 * h + e;
                            let v = _mm256_load_si256(q.add(p * 128).cast());
                            // High bits of the low nibbles at bits 4e, of the high ones at
                            // 4e + 2; both move to bits 4..6.
                            let (lo_h, hi_h) = if e == 0 {
                                (_mm256_slli_epi16::<4>(hv), _mm256_slli_epi16::<2>(hv))
                            } else {
                                (hv, _mm256_srli_epi16::<2>(hv))
                            };
                            let lo = _mm256_or_si256(
                                _mm256_and_si256(v, nib),
                                _mm256_and_si256(lo_h, top),
                            );
                            let hi = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(v), nib),
                                _mm256_and_si256(hi_h, top),
                            );
                            for r in 0..R {
                                let xa = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                                let xb = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 16 + 4 * p)));
                                isum[0][r] = D::dot_u6(isum[0][r], lo, xa);
                                isum[1][r] = D::dot_u6(isum[1][r], hi, xb);
                            }
                        }
                    }
                },
                |rec, group, col, m, isum, acc| {
                    let d = halfs(group.add(col * 2));
                    let dw = [
                        _mm256_mul_ps(d, bytes_i8(rec.add(col))),
                        _mm256_mul_ps(d, bytes_i8(rec.add(TILE + col))),
                    ];
                    for r in 0..R {
                        let dx = _mm256_set1_ps(m[r].d);
                        for h in 0..2 {
                            let scale = _mm256_mul_ps(dw[h], dx);
                            let i = _mm256_cvtepi32_ps(isum[h][r]);
                            acc[r] = _mm256_fmadd_ps(i, scale, acc[r]);
                        }
                    }
                },
            )
        }
    }
}
