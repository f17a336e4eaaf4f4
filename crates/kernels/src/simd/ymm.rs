//! 256-bit kernels shared by the AVX-VNNI and plain AVX2 paths. A tile is processed as
//! four 8-column sub-groups (one ymm each, the halves of the 64-byte vectors); per
//! sub-group R rows of i32 and f32 accumulators fit the 16 ymm registers.
//! Only the integer dot step differs between the two paths (`Dot256`).

use super::{prefetch, quad, Job, Prefetch, Tile, TileKernel};
use crate::format::SCALES;
use std::arch::x86_64::*;
use std::marker::PhantomData;

/// The integer dot step: `acc + Σ_{4 bytes} w · x` per i32 lane, exactly.
pub(super) trait Dot256 {
    /// Q8_0 weights as the kernel keeps them per k-quad (prepared once for R rows).
    type Q8W: Copy;
    /// Whether Q8_0 accumulators start at −128·Σx (weights used as stored, q + 128).
    const Q8_OFFSET: bool;
    /// # Safety
    /// The implementation's target features must be enabled in the caller.
    unsafe fn prep_q8(w: __m256i) -> Self::Q8W;
    /// # Safety
    /// As for `prep_q8`.
    unsafe fn dot_q8(acc: __m256i, w: Self::Q8W, x: __m256i) -> __m256i;
    /// Two quads of unsigned nibbles (0..=15) against two activation quads.
    /// # Safety
    /// As for `prep_q8`.
    unsafe fn dot_nib2(acc: __m256i, lo: __m256i, xa: __m256i, hi: __m256i, xb: __m256i)
        -> __m256i;
    /// One quad of unsigned values of at most 6 bits (0..=63) against an activation quad.
    /// # Safety
    /// As for `prep_q8`.
    unsafe fn dot_u6(acc: __m256i, w: __m256i, x: __m256i) -> __m256i;
}

/// Q8_0 tile kernel over a dot step.
pub(super) struct Q8<D>(PhantomData<D>);
/// Q4_0 (`MIN = false`) / Q4_1 (`MIN = true`) tile kernel over a dot step.
pub(super) struct Q4<D, const MIN: bool>(PhantomData<D>);

impl<D: Dot256> TileKernel for Q8<D> {
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: `sub_tiles` only hands out in-bounds, 32-aligned weight vectors and
        // activation quads of block b.
        unsafe {
            sub_tiles::<R, false>(job, t, |rec, voff, b, isum| {
                if D::Q8_OFFSET {
                    for r in 0..R {
                        isum[r] = _mm256_set1_epi32((*t.m[r].add(b)).c128);
                    }
                }
                let q = rec.add(SCALES + voff);
                for p in 0..8 {
                    let w = D::prep_q8(_mm256_load_si256(q.add(p * 128).cast()));
                    for r in 0..R {
                        let x = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                        isum[r] = D::dot_q8(isum[r], w, x);
                    }
                }
            })
        }
    }
}

impl<D: Dot256, const MIN: bool> TileKernel for Q4<D, MIN> {
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: as for Q8.
        unsafe {
            let nib = _mm256_set1_epi8(0x0f);
            let qoff = job.format.quant_offset();
            sub_tiles::<R, MIN>(job, t, |rec, voff, b, isum| {
                if !MIN {
                    for r in 0..R {
                        isum[r] = _mm256_set1_epi32((*t.m[r].add(b)).c8);
                    }
                }
                let q = rec.add(qoff + voff);
                for p in 0..4 {
                    let v = _mm256_load_si256(q.add(p * 128).cast());
                    let lo = _mm256_and_si256(v, nib);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nib);
                    for r in 0..R {
                        let xa = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                        let xb = _mm256_set1_epi32(quad(t.x[r].add(b * 32 + 16 + 4 * p)));
                        isum[r] = D::dot_nib2(isum[r], lo, xa, hi, xb);
                    }
                }
            })
        }
    }
}

/// Loops over the 8-column sub-groups and blocks of a tile; `block(rec, voff, b, isum)`
/// fills the integer sums of block b (isum arrives zeroed) reading weight vectors at
/// `rec + quant offset + voff + p·128`. Then runs the float epilogue and stores.
///
/// # Safety
/// `t` from `drive`; AVX2 and FMA enabled in the caller.
#[inline(always)]
unsafe fn sub_tiles<const R: usize, const MIN: bool>(
    job: &Job,
    t: &Tile<R>,
    mut block: impl FnMut(*const u8, usize, usize, &mut [__m256i; R]),
) {
    // SAFETY: records span `job.rec` 64-aligned bytes; f16 scales at s·16 and mins at
    // 64 + s·16 are 16-aligned; outputs are written only below `t.valid`.
    unsafe {
        for s in 0..4 {
            let col = s * 8;
            if col >= t.valid {
                break;
            }
            // Sub-group s is half (s % 2) of 16-column group s / 2.
            let voff = (s / 2) * 64 + (s % 2) * 32;
            // Each sub-group pass takes its quarter of this call's prefetch lines.
            let pf = Prefetch {
                first_line: t.pf.first_line * 4 + s,
                line_step: t.pf.line_step * 4,
                ..t.pf
            };
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..job.kb {
                let rec = t.w.add(b * job.rec);
                prefetch(&pf, b * job.rec, job.rec);
                let mut isum = [_mm256_setzero_si256(); R];
                block(rec, voff, b, &mut isum);
                // f16 scales (and mins) widened exactly to f32.
                let wide = |o: usize| _mm256_cvtph_ps(_mm_load_si128(rec.add(o).cast()));
                let dw = wide(col * 2);
                let mw = if MIN { wide(SCALES + col * 2) } else { dw };
                for r in 0..R {
                    let m = &*t.m[r].add(b);
                    let scale = _mm256_mul_ps(dw, _mm256_set1_ps(m.d));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), scale, acc[r]);
                    if MIN {
                        acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(m.sx), acc[r]);
                    }
                }
            }
            store(t, col, &acc);
        }
    }
}

/// Stores the rows' results of the 8 columns from `col` (those below `t.valid`).
///
/// # Safety
/// `t` from `drive`, `col < t.valid`; AVX enabled in the caller.
#[inline(always)]
pub(super) unsafe fn store<const R: usize>(t: &Tile<R>, col: usize, acc: &[__m256; R]) {
    let n = (t.valid - col).min(8);
    for r in 0..R {
        // SAFETY: row r's output holds the tile's `t.valid` columns.
        unsafe {
            let dst = t.out[r].add(col);
            if n == 8 {
                _mm256_storeu_ps(dst, acc[r]);
            } else {
                let mut tmp = [0.0f32; 8];
                _mm256_storeu_ps(tmp.as_mut_ptr(), acc[r]);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, n);
            }
        }
    }
}
