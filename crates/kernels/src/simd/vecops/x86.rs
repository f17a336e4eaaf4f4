//! The AVX2 and AVX-512 builds of the vector primitives (same arithmetic as the scalar
//! definitions in the parent module).

use std::arch::x86_64::*;

/// Lanes of a 16-wide vector holding valid elements when `rem` elements remain.
#[inline(always)]
fn tail_mask(rem: usize) -> __mmask16 {
    if rem >= 16 {
        0xFFFF
    } else {
        ((1u32 << rem) - 1) as u16
    }
}

/// Folds lanes 0..8 as l + l+4, l + l+2, l + l+1.
#[target_feature(enable = "avx2")]
fn fold8(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
    _mm_cvtss_f32(s1)
}

/// The scalar `exp_scalar` sequence on 16 lanes.
#[target_feature(enable = "avx512f")]
fn exp16(v: __m512) -> __m512 {
    use super::{EXP_HI, EXP_LO, LN2_HI, LN2_LO, LOG2E, P, ROUNDER};
    let c = |v: f32| _mm512_set1_ps(v);
    let v = _mm512_min_ps(_mm512_max_ps(v, c(EXP_LO)), c(EXP_HI));
    let k = _mm512_sub_ps(
        _mm512_add_ps(_mm512_mul_ps(v, c(LOG2E)), c(ROUNDER)),
        c(ROUNDER),
    );
    let r = _mm512_sub_ps(
        _mm512_sub_ps(v, _mm512_mul_ps(k, c(LN2_HI))),
        _mm512_mul_ps(k, c(LN2_LO)),
    );
    let mut p = c(P[0]);
    for &coef in &P[1..] {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), c(coef));
    }
    let y = _mm512_add_ps(
        _mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
        c(1.0),
    );
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(k),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(y, _mm512_castsi512_ps(e))
}

/// `gate / (1 + exp(arg)) * up`, `arg` SiLU's `0 - x` or with `GELU` the scalar
/// `gelu_arg`, operation for operation (no fused multiply-adds).
///
/// # Safety
/// The CPU must support AVX-512F; the three slices have equal lengths.
#[target_feature(enable = "avx512f")]
pub unsafe fn gated_avx512<const GELU: bool>(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = gate.len();
    let c = |v: f32| _mm512_set1_ps(v);
    let mut i = 0;
    while i < n {
        let m = tail_mask(n - i);
        // SAFETY: masked loads and store touch only the valid elements.
        unsafe {
            let g = _mm512_maskz_loadu_ps(m, gate.as_ptr().add(i));
            let u = _mm512_maskz_loadu_ps(m, up.as_ptr().add(i));
            let arg = if GELU {
                let cube = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
                let inner = _mm512_add_ps(g, _mm512_mul_ps(c(super::GELU_K), cube));
                _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(c(super::GELU_2C), inner))
            } else {
                _mm512_sub_ps(_mm512_setzero_ps(), g)
            };
            let e = exp16(arg);
            let y = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(c(1.0), e)), u);
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, y);
        }
        i += 16;
    }
}

/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn scale_max_avx512(x: &mut [f32], scale: f32) -> f32 {
    let n = x.len();
    let s = _mm512_set1_ps(scale);
    let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n {
        let m = tail_mask(n - i);
        // SAFETY: masked load and store of the valid elements only.
        let v = unsafe {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x.as_ptr().add(i)), s);
            _mm512_mask_storeu_ps(x.as_mut_ptr().add(i), m, v);
            v
        };
        // `vmaxps` returns its second operand when either is NaN: the running maximum,
        // which is never NaN, so NaN products are skipped as `f32::max` skips them.
        max = _mm512_mask_max_ps(max, m, v, max);
        i += 16;
    }
    _mm512_reduce_max_ps(max)
}

/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn exp_sum_avx512(x: &mut [f32], max: f32) -> f32 {
    let n = x.len();
    let c = |v: f32| _mm512_set1_ps(v);
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let m = tail_mask(n - i);
        // SAFETY: the mask limits the load to the valid elements.
        let v = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)) };
        let t = _mm512_sub_ps(v, c(max));
        // Flush as the scalar code does (t < SOFTMAX_FLUSH gives 0).
        let keep = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(t, c(super::SOFTMAX_FLUSH));
        let y = _mm512_maskz_mov_ps(keep, exp16(t));
        // SAFETY: masked store of the valid elements only.
        unsafe { _mm512_mask_storeu_ps(x.as_mut_ptr().add(i), m, y) };
        // Lanes past the end add +0.0, matching the scalar definition.
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, y));
        i += 16;
    }
    let lo = _mm512_castps512_ps256(acc);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
    fold8(_mm256_add_ps(lo, hi))
}

/// # Safety
/// The CPU must support AVX2; rows `0..w.len()` at `stride` lie in `rows`.
#[target_feature(enable = "avx2")]
pub unsafe fn axpy_rows_avx2(w: &[f32], rows: &[f32], stride: usize, y: &mut [f32]) {
    for (i, &a) in w.iter().enumerate() {
        // SAFETY: the caller checked the bounds; the feature is enabled here.
        unsafe { axpy_avx2(a, &rows[i * stride..][..y.len()], y) };
    }
}

/// # Safety
/// The CPU must support AVX2; `x` and `y` have equal lengths.
#[target_feature(enable = "avx2")]
pub unsafe fn axpy_avx2(alpha: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len();
    let a = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n for both slices.
        unsafe {
            let v = _mm256_add_ps(
                _mm256_loadu_ps(y.as_ptr().add(i)),
                _mm256_mul_ps(a, _mm256_loadu_ps(x.as_ptr().add(i))),
            );
            _mm256_storeu_ps(y.as_mut_ptr().add(i), v);
        }
        i += 8;
    }
    for j in i..n {
        y[j] += alpha * x[j];
    }
}

/// Query rows `i0..i0 + G` of [`dot_t_avx512`], accumulators in registers.
///
/// # Safety
/// As for [`dot_t_avx512`]; `i0 + G <= m`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn dot_t_rows<const G: usize>(
    qs: &[f32],
    i0: usize,
    hd: usize,
    kt: &[f32],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let q = &qs[i0 * hd..(i0 + G) * hd];
    let mut s = 0;
    while s < n {
        let mask = tail_mask(n - s);
        let block = (s / 16) * stride;
        let mut acc = [_mm512_setzero_ps(); G];
        for d in 0..hd {
            // SAFETY: the mask keeps the load within keys s..n of this block, whose
            // elements lie in `kt` (asserted by the caller).
            let k = unsafe { _mm512_maskz_loadu_ps(mask, kt.as_ptr().add(block + d * 16)) };
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: i < G and d < hd, and `q` holds G · hd queries.
                let x = unsafe { *q.as_ptr().add(i * hd + d) };
                *a = _mm512_add_ps(*a, _mm512_mul_ps(_mm512_set1_ps(x), k));
            }
        }
        for (i, a) in acc.iter().enumerate() {
            // SAFETY: masked store within out[(i0 + i) * out_stride + s..][..n - s].
            unsafe {
                _mm512_mask_storeu_ps(out.as_mut_ptr().add((i0 + i) * out_stride + s), mask, *a)
            };
        }
        s += 16;
    }
}

/// # Safety
/// The CPU must support AVX-512F; the slices hold what `VecOps::dot_t` asserts.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub unsafe fn dot_t_avx512(
    qs: &[f32],
    m: usize,
    hd: usize,
    kt: &[f32],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    const Q: usize = 8;
    let mut i0 = 0;
    while i0 < m {
        let g = (m - i0).min(Q);
        // SAFETY: forwarded; i0 + g <= m.
        unsafe {
            match g {
                8 => dot_t_rows::<8>(qs, i0, hd, kt, stride, n, out, out_stride),
                7 => dot_t_rows::<7>(qs, i0, hd, kt, stride, n, out, out_stride),
                6 => dot_t_rows::<6>(qs, i0, hd, kt, stride, n, out, out_stride),
                5 => dot_t_rows::<5>(qs, i0, hd, kt, stride, n, out, out_stride),
                4 => dot_t_rows::<4>(qs, i0, hd, kt, stride, n, out, out_stride),
                3 => dot_t_rows::<3>(qs, i0, hd, kt, stride, n, out, out_stride),
                2 => dot_t_rows::<2>(qs, i0, hd, kt, stride, n, out, out_stride),
                _ => dot_t_rows::<1>(qs, i0, hd, kt, stride, n, out, out_stride),
            }
        }
        i0 += g;
    }
}

/// Outputs `i0..i0 + G` of [`weighted_sum_avx512`], accumulators in registers.
///
/// # Safety
/// As for [`weighted_sum_avx512`]; `i0 + G <= m`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn weighted_rows<const C: usize, const G: usize>(
    ws: &[f32],
    w_stride: usize,
    i0: usize,
    values: &[f32],
    v_stride: usize,
    n: usize,
    out: &mut [f32],
) {
    let d = 16 * C;
    let o = out[i0 * d..(i0 + G) * d].as_mut_ptr();
    // SAFETY: o covers G · d floats.
    let mut acc: [[__m512; C]; G] = std::array::from_fn(|i| {
        // SAFETY: i < G and c < C with d = 16 · C, so the 16 floats read lie in o's G · d;
        // AVX-512F is available by this function's contract.
        std::array::from_fn(|c| unsafe { _mm512_loadu_ps(o.add(i * d + c * 16)) })
    });
    let w = &ws[i0 * w_stride..];
    for s in 0..n {
        // SAFETY: s * v_stride + d <= values.len() (asserted by the caller).
        let v: [__m512; C] = std::array::from_fn(|c| unsafe {
            _mm512_loadu_ps(values.as_ptr().add(s * v_stride + c * 16))
        });
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: (i0 + i) · w_stride + s < ws.len() (asserted by the caller).
            let wi = _mm512_set1_ps(unsafe { *w.as_ptr().add(i * w_stride + s) });
            for c in 0..C {
                a[c] = _mm512_add_ps(a[c], _mm512_mul_ps(wi, v[c]));
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        for (c, v) in a.iter().enumerate() {
            // SAFETY: as for the loads above.
            unsafe { _mm512_storeu_ps(o.add(i * d + c * 16), *v) };
        }
    }
}

/// # Safety
/// The CPU must support AVX-512F; the slices hold what `VecOps::weighted_sum` asserts
/// for d = 16 · C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub unsafe fn weighted_sum_avx512<const C: usize>(
    ws: &[f32],
    w_stride: usize,
    m: usize,
    values: &[f32],
    v_stride: usize,
    n: usize,
    out: &mut [f32],
) {
    // Up to 24 registers of accumulators (the match arms below cover these group sizes).
    let group = (24 / C).min(12);
    let mut i0 = 0;
    while i0 < m {
        let g = (m - i0).min(group);
        // SAFETY: forwarded; i0 + g <= m.
        unsafe {
            match g {
                12 if C <= 2 => weighted_rows::<C, 12>(ws, w_stride, i0, values, v_stride, n, out),
                11 if C <= 2 => weighted_rows::<C, 11>(ws, w_stride, i0, values, v_stride, n, out),
                10 if C <= 2 => weighted_rows::<C, 10>(ws, w_stride, i0, values, v_stride, n, out),
                9 if C <= 2 => weighted_rows::<C, 9>(ws, w_stride, i0, values, v_stride, n, out),
                8 if C <= 2 => weighted_rows::<C, 8>(ws, w_stride, i0, values, v_stride, n, out),
                7 if C <= 2 => weighted_rows::<C, 7>(ws, w_stride, i0, values, v_stride, n, out),
                6 if C <= 4 => weighted_rows::<C, 6>(ws, w_stride, i0, values, v_stride, n, out),
                5 if C <= 4 => weighted_rows::<C, 5>(ws, w_stride, i0, values, v_stride, n, out),
                4 if C <= 4 => weighted_rows::<C, 4>(ws, w_stride, i0, values, v_stride, n, out),
                3 => weighted_rows::<C, 3>(ws, w_stride, i0, values, v_stride, n, out),
                2 => weighted_rows::<C, 2>(ws, w_stride, i0, values, v_stride, n, out),
                _ => weighted_rows::<C, 1>(ws, w_stride, i0, values, v_stride, n, out),
            }
        }
        i0 += g;
    }
}

/// The portable definitions compiled for AVX2: plain f32 operations that Rust never fuses
/// or reorders, so the wider vectors give the portable bits (the baseline build runs them
/// 4 lanes at a time, and its rounding and min/max take several instructions).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn scale_max_avx2(x: &mut [f32], scale: f32) -> f32 {
    super::scale_max_scalar(x, scale)
}

/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn exp_sum_avx2(x: &mut [f32], max: f32) -> f32 {
    super::exp_sum_scalar(x, max)
}

/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn gated_avx2<const GELU: bool>(gate: &[f32], up: &[f32], out: &mut [f32]) {
    super::gated_scalar::<GELU>(gate, up, out)
}

/// Lanes `0..n` (n ≤ 8) set: the mask of a partial `maskload`/`maskstore`.
#[inline(always)]
fn lanes_below(n: usize) -> __m256i {
    let idx = [0i32, 1, 2, 3, 4, 5, 6, 7];
    // SAFETY: reads the 8 lanes of a local array.
    let idx = unsafe { _mm256_loadu_si256(idx.as_ptr().cast()) };
    // SAFETY: AVX2 is enabled in every caller (all inlined into AVX2 functions).
    unsafe { _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx) }
}

/// Query rows `i0..i0 + G` of [`dot_t_avx2`]: 16 keys as two ymm, accumulators in
/// registers.
///
/// # Safety
/// As for [`dot_t_avx2`]; `i0 + G <= m`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn dot_t_rows_avx2<const G: usize>(
    qs: &[f32],
    i0: usize,
    hd: usize,
    kt: &[f32],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let q = &qs[i0 * hd..(i0 + G) * hd];
    let mut s = 0;
    while s < n {
        let block = (s / 16) * stride;
        let left = n - s;
        let masks = [
            lanes_below(left.min(8)),
            lanes_below(left.saturating_sub(8)),
        ];
        let mut acc = [[_mm256_setzero_ps(); 2]; G];
        for d in 0..hd {
            let k: [__m256; 2] = std::array::from_fn(|h| {
                // SAFETY: a block's 16 positions of element d lie in `kt` wherever the
                // mask is set (keys below n, asserted by the caller); masked-off lanes
                // are not read.
                let p = kt.as_ptr().wrapping_add(block + d * 16 + 8 * h);
                if left >= 16 {
                    // SAFETY: all 16 positions of the block are keys below n (see above).
                    unsafe { _mm256_loadu_ps(p) }
                } else {
                    // SAFETY: only the lanes `masks[h]` sets are read, all keys below n.
                    unsafe { _mm256_maskload_ps(p, masks[h]) }
                }
            });
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: i < G and d < hd, and `q` holds G · hd queries.
                let x = _mm256_set1_ps(unsafe { *q.as_ptr().add(i * hd + d) });
                for h in 0..2 {
                    a[h] = _mm256_add_ps(a[h], _mm256_mul_ps(x, k[h]));
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for h in 0..2 {
                // SAFETY: lanes below n - s of out[(i0 + i) * out_stride + s..].
                unsafe {
                    let p = out.as_mut_ptr().add((i0 + i) * out_stride + s + 8 * h);
                    if left >= 16 {
                        _mm256_storeu_ps(p, a[h]);
                    } else {
                        _mm256_maskstore_ps(p, masks[h], a[h]);
                    }
                }
            }
        }
        s += 16;
    }
}

/// `VecOps::dot_t` with 256-bit vectors: the same sums per key, d in order.
///
/// # Safety
/// The CPU must support AVX2; the slices hold what `VecOps::dot_t` asserts.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
pub unsafe fn dot_t_avx2(
    qs: &[f32],
    m: usize,
    hd: usize,
    kt: &[f32],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    // 4 queries × 2 halves of 8 accumulators, plus the two key vectors.
    const Q: usize = 4;
    let mut i0 = 0;
    while i0 < m {
        let g = (m - i0).min(Q);
        // SAFETY: forwarded; i0 + g <= m.
        unsafe {
            match g {
                4 => dot_t_rows_avx2::<4>(qs, i0, hd, kt, stride, n, out, out_stride),
                3 => dot_t_rows_avx2::<3>(qs, i0, hd, kt, stride, n, out, out_stride),
                2 => dot_t_rows_avx2::<2>(qs, i0, hd, kt, stride, n, out, out_stride),
                _ => dot_t_rows_avx2::<1>(qs, i0, hd, kt, stride, n, out, out_stride),
            }
        }
        i0 += g;
    }
}
