//! AVX-512 VNNI kernels: 16 columns per zmm, up to 6 rows × 2 column groups of i32
//! accumulators per block, f32 accumulators in registers across blocks.

use super::{drive, prefetch, quad, Job, Tile, TileKernel};
use crate::format::{WeightFormat, SCALES};
use std::arch::x86_64::*;

/// The formats of K-quant files (Q5_0, Q4_K, Q6_K) run the 256-bit kernels with the
/// EVEX `vpdpbusd`: the same code the AVX2 and AVX-VNNI paths run, so one set of kernels
/// serves every x86 path for them.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, F16C and FMA available, and the contract of [`drive`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
pub(super) unsafe fn run(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded; the kernels below are inlined into this feature-enabled function.
    unsafe {
        match job.format {
            WeightFormat::Q8_0 => drive::<Q8>(job, tiles),
            WeightFormat::Q4_0 => drive::<Q4<false>>(job, tiles),
            WeightFormat::Q4_1 => drive::<Q4<true>>(job, tiles),
            WeightFormat::Q5_0 | WeightFormat::Q4_K | WeightFormat::Q6_K => {
                super::avxvnni::run_evex(job, tiles)
            }
        }
    }
}

/// Q8_0: weights stored as q + 128; accumulators start at −128·Σx.
struct Q8;

/// Q4_0 (`MIN = false`, accumulators start at −8·Σx) and Q4_1 (`MIN = true`, plus the
/// min term in the epilogue).
struct Q4<const MIN: bool>;

impl TileKernel for Q8 {
    // 6 rows × 2 groups × (i32 + f32 accumulators) = 24 of the 32 zmm registers.
    const ROWS: usize = 6;
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: record b of the tile spans `job.rec` bytes, 64-aligned (aligned loads);
        // activation row pointers cover k bytes and kb metadata entries.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            for b in 0..job.kb {
                let rec = t.w.add(b * job.rec);
                prefetch(&t.pf, b * job.rec, job.rec);
                let mut isum: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                    let c = _mm512_set1_epi32((*t.m[r].add(b)).c128);
                    [c, c]
                });
                let q = rec.add(SCALES);
                for p in 0..8 {
                    let w0 = _mm512_load_si512(q.add(p * 128).cast());
                    let w1 = _mm512_load_si512(q.add(p * 128 + 64).cast());
                    for r in 0..R {
                        let x = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                        isum[r][0] = _mm512_dpbusd_epi32(isum[r][0], w0, x);
                        isum[r][1] = _mm512_dpbusd_epi32(isum[r][1], w1, x);
                    }
                }
                epilogue::<R, false>(rec, t, b, &isum, &mut acc);
            }
            store(t, &acc);
        }
    }
}

impl<const MIN: bool> TileKernel for Q4<MIN> {
    // As for Q8: 24 accumulator registers, the rest for the unpacked nibbles. Six rows
    // share each load and unpack (4 did): 2-3% faster from 8 rows on (Zen 4).
    const ROWS: usize = 6;
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: as for Q8.
        unsafe {
            let nib = _mm512_set1_epi8(0x0f);
            let qoff = job.format.quant_offset();
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            for b in 0..job.kb {
                let rec = t.w.add(b * job.rec);
                prefetch(&t.pf, b * job.rec, job.rec);
                let mut isum: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                    let c = if MIN {
                        _mm512_setzero_si512()
                    } else {
                        _mm512_set1_epi32((*t.m[r].add(b)).c8)
                    };
                    [c, c]
                });
                let q = rec.add(qoff);
                for p in 0..4 {
                    let v = [
                        _mm512_load_si512(q.add(p * 128).cast()),
                        _mm512_load_si512(q.add(p * 128 + 64).cast()),
                    ];
                    // Low nibbles: k = 4p..4p+4; high nibbles: k = 16+4p..16+4p+4.
                    let lo = v.map(|v| _mm512_and_si512(v, nib));
                    let hi = v.map(|v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), nib));
                    for r in 0..R {
                        let xa = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                        let xb = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 16 + 4 * p)));
                        for g in 0..2 {
                            isum[r][g] = _mm512_dpbusd_epi32(isum[r][g], lo[g], xa);
                            isum[r][g] = _mm512_dpbusd_epi32(isum[r][g], hi[g], xb);
                        }
                    }
                }
                epilogue::<R, MIN>(rec, t, b, &isum, &mut acc);
            }
            store(t, &acc);
        }
    }
}

/// The fixed float sequence at the end of block `b`:
/// `acc = fma(isum, dw·dx, acc)`, then for Q4_1 `acc = fma(mw, sx, acc)`.
///
/// # Safety
/// `rec` is a 64-aligned record; `t.m[r]` covers block `b`.
#[inline(always)]
unsafe fn epilogue<const R: usize, const MIN: bool>(
    rec: *const u8,
    t: &Tile<R>,
    b: usize,
    isum: &[[__m512i; 2]; R],
    acc: &mut [[__m512; 2]; R],
) {
    // SAFETY: f16 scales at rec[0..64], mins at rec[64..128] (Q4_1 only), 32-aligned
    // halves; widening f16 to f32 is exact.
    unsafe {
        let wide = |o: usize| _mm512_cvtph_ps(_mm256_load_si256(rec.add(o).cast()));
        let dw = [0, 32].map(wide);
        let mw = if MIN {
            [SCALES, SCALES + 32].map(wide)
        } else {
            dw
        };
        for r in 0..R {
            let m = &*t.m[r].add(b);
            let dx = _mm512_set1_ps(m.d);
            for g in 0..2 {
                let s = _mm512_mul_ps(dw[g], dx);
                acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][g]), s, acc[r][g]);
                if MIN {
                    acc[r][g] = _mm512_fmadd_ps(mw[g], _mm512_set1_ps(m.sx), acc[r][g]);
                }
            }
        }
    }
}

/// Stores the tile's valid columns (masked for the last, partial tile).
///
/// # Safety
/// `t.out[r]` valid for `t.valid` floats.
#[inline(always)]
unsafe fn store<const R: usize>(t: &Tile<R>, acc: &[[__m512; 2]; R]) {
    // SAFETY: full tiles write 32 floats; partial ones mask off the padding (masked-off
    // lanes are not accessed), and the second half is skipped when it is all padding.
    unsafe {
        if t.valid == 32 {
            for r in 0..R {
                _mm512_storeu_ps(t.out[r], acc[r][0]);
                _mm512_storeu_ps(t.out[r].add(16), acc[r][1]);
            }
        } else {
            let bits = (1u32 << t.valid) - 1;
            let (m0, m1) = (bits as u16, (bits >> 16) as u16);
            for r in 0..R {
                _mm512_mask_storeu_ps(t.out[r], m0, acc[r][0]);
                if m1 != 0 {
                    _mm512_mask_storeu_ps(t.out[r].add(16), m1, acc[r][1]);
                }
            }
        }
    }
}
