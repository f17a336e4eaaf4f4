//! f32 vector primitives for attention, with one arithmetic definition for every ISA.
//!
//! `dot` keeps 16 partial sums: element i goes to lane i % 16 as `lane + a*b` (a rounded
//! multiply, then a rounded add; never a fused multiply-add), the last partial chunk padded
//! with zeros, then lanes are folded in a fixed tree (l + l+8, l + l+4, l + l+2, l + l+1).
//! A 512-bit register holds the 16 lanes, two 256-bit registers hold them as 0..8 and
//! 8..16, and the scalar code spells the same sequence out, so all give identical bits.
//! `axpy` is element-wise and exact to order by construction.

use crate::isa::Isa;

const LANES: usize = 16;

/// Dispatches the vector primitives to one instruction set.
#[derive(Clone, Copy, Debug)]
pub struct VecOps {
    isa: Isa,
}

impl VecOps {
    pub(crate) fn new(isa: Isa) -> Self {
        VecOps { isa }
    }

    /// Dot product with the fixed 16-lane order described in the module docs.
    #[inline]
    pub fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed.
            Isa::Avx512Vnni => unsafe { x86::dot_avx512(a, b) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above; AVX-VNNI and AVX2 paths both imply AVX2.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::dot_avx2(a, b) },
            _ => dot_scalar(a, b),
        }
    }

    /// `out[i] = dot(q, rows[i * stride..][..q.len()])`: many keys against one query in
    /// one call, so the per-call dispatch is paid once.
    pub fn dot_rows(&self, q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        let d = q.len();
        if out.is_empty() {
            return;
        }
        assert!(
            (out.len() - 1) * stride + d <= rows.len(),
            "dot_rows: rows too short"
        );
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the Isa is available (see `dot`); every row slice is in bounds
            // (asserted above).
            Isa::Avx512Vnni => unsafe { x86::dot_rows_avx512(q, rows, stride, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::dot_rows_avx2(q, rows, stride, out) },
            _ => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = dot_scalar(q, &rows[i * stride..][..d]);
                }
            }
        }
    }

    /// `y += w[i] * rows[i * stride..][..y.len()]` for i in order: the same element
    /// operations as calling `axpy` once per row.
    pub fn axpy_rows(&self, w: &[f32], rows: &[f32], stride: usize, y: &mut [f32]) {
        let d = y.len();
        if w.is_empty() {
            return;
        }
        assert!(
            (w.len() - 1) * stride + d <= rows.len(),
            "axpy_rows: rows too short"
        );
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the Isa is available (see `dot`); every row slice is in bounds.
            Isa::Avx512Vnni => unsafe { x86::axpy_rows_avx512(w, rows, stride, y) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::axpy_rows_avx2(w, rows, stride, y) },
            _ => {
                for (i, &a) in w.iter().enumerate() {
                    axpy_scalar(a, &rows[i * stride..][..d], y);
                }
            }
        }
    }

    /// `x[i] = exp(x[i] - max)` for every element, returning their sum (16 partial sums
    /// folded like `dot`). The exponential is our own polynomial built from plain f32
    /// operations, so every instruction set computes the same bits (libm's `expf` would
    /// not vectorize and costs a call per attention score).
    pub fn exp_sum(&self, x: &mut [f32], max: f32) -> f32 {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the Isa is available (see `dot`).
            Isa::Avx512Vnni => unsafe { x86::exp_sum_avx512(x, max) },
            _ => exp_sum_scalar(x, max),
        }
    }

    /// Attention scores against keys stored transposed in blocks of 16 positions
    /// (element d of key s at `kt_index(s, d, block_stride)`):
    /// `out[i * out_stride + s] = Σ_d qs[i * hd + d] · key_s[d]` for `m` queries and keys
    /// `0..n`, the sum taken over d in order from +0.0 (a rounded multiply, then a rounded
    /// add). Vectorized across keys, so no horizontal reductions and contiguous loads;
    /// `dot_t_one` is the same arithmetic for a single key.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_t(
        &self,
        qs: &[f32],
        m: usize,
        hd: usize,
        kt: &[f32],
        stride: usize,
        n: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        if m == 0 || n == 0 {
            return;
        }
        assert!(m * hd <= qs.len(), "dot_t: queries too short");
        assert!(
            kt_index(n - 1, hd - 1, stride) < kt.len() && hd * 16 <= stride,
            "dot_t: keys too short"
        );
        assert!(
            (m - 1) * out_stride + n <= out.len(),
            "dot_t: output too short"
        );
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the Isa is available (see `dot`); bounds were asserted above.
            Isa::Avx512Vnni => unsafe {
                x86::dot_t_avx512(qs, m, hd, kt, stride, n, out, out_stride)
            },
            _ => {
                for i in 0..m {
                    for s in 0..n {
                        out[i * out_stride + s] = dot_t_one(&qs[i * hd..][..hd], kt, stride, s);
                    }
                }
            }
        }
    }

    /// Weighted sums of value rows for `m` outputs: for each key `s` in `0..n` in order,
    /// `out[i * d..][..d] += ws[i * w_stride + s] * values[s * v_stride..][..d]`, the
    /// element operations of one `axpy` per (key, output). Outputs are kept in registers
    /// in small groups so each value row is loaded once per group.
    #[allow(clippy::too_many_arguments)]
    pub fn weighted_sum(
        &self,
        ws: &[f32],
        w_stride: usize,
        m: usize,
        values: &[f32],
        v_stride: usize,
        n: usize,
        out: &mut [f32],
        d: usize,
    ) {
        if m == 0 || n == 0 {
            return;
        }
        assert!(
            (m - 1) * w_stride + n <= ws.len(),
            "weighted_sum: weights too short"
        );
        assert!(
            (n - 1) * v_stride + d <= values.len(),
            "weighted_sum: values too short"
        );
        assert!(m * d <= out.len(), "weighted_sum: output too short");
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the Isa is available (see `dot`); bounds were asserted above.
            Isa::Avx512Vnni if d == 64 => unsafe {
                x86::weighted_sum64_avx512(ws, w_stride, m, values, v_stride, n, out)
            },
            _ => {
                for i in 0..m {
                    let w = &ws[i * w_stride..][..n];
                    self.axpy_rows(w, values, v_stride, &mut out[i * d..(i + 1) * d]);
                }
            }
        }
    }

    /// SwiGLU: `out[i] = gate[i] / (1 + exp(-gate[i])) * up[i]`, with the same
    /// exponential as `exp_sum`.
    pub fn swiglu(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        let n = gate.len().min(up.len()).min(out.len());
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the Isa is available (see `dot`).
            Isa::Avx512Vnni => unsafe { x86::swiglu_avx512(&gate[..n], &up[..n], &mut out[..n]) },
            _ => swiglu_scalar(&gate[..n], &up[..n], &mut out[..n]),
        }
    }

    /// `y[i] += alpha * x[i]`.
    #[inline]
    pub fn axpy(&self, alpha: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed.
            Isa::Avx512Vnni => unsafe { x86::axpy_avx512(alpha, &x[..n], &mut y[..n]) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::axpy_avx2(alpha, &x[..n], &mut y[..n]) },
            _ => axpy_scalar(alpha, &x[..n], &mut y[..n]),
        }
    }
}

fn fold(mut lanes: [f32; LANES]) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            lanes[l] += lanes[l + w];
        }
        w /= 2;
    }
    lanes[0]
}

pub(crate) fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; LANES];
    for (ca, cb) in a.chunks(LANES).zip(b.chunks(LANES)) {
        for l in 0..LANES {
            let (x, y) = (
                ca.get(l).copied().unwrap_or(0.0),
                cb.get(l).copied().unwrap_or(0.0),
            );
            lanes[l] += x * y;
        }
    }
    fold(lanes)
}

// exp(x) = 2^n · p(r), n = round(x / ln 2), r = x - n·ln 2 in two parts (Cephes expf).
const EXP_LO: f32 = -87.0;
const EXP_HI: f32 = 88.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// 1.5 · 2^23: adding and subtracting it rounds to the nearest integer.
const ROUNDER: f32 = 12_582_912.0;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    5e-1,
];

#[inline(always)]
fn exp_scalar(x: f32) -> f32 {
    let x = x.clamp(EXP_LO, EXP_HI);
    let n = (x * LOG2E + ROUNDER) - ROUNDER;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = P[0];
    for c in &P[1..] {
        p = p * r + c;
    }
    let y = (p * (r * r) + r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

fn exp_sum_scalar(x: &mut [f32], max: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    for chunk in x.chunks_mut(LANES) {
        for (l, v) in chunk.iter_mut().enumerate() {
            *v = exp_scalar(*v - max);
            lanes[l] += *v;
        }
        // Padding lanes add +0.0, as the vector code's zeroed lanes do.
        for lane in lanes.iter_mut().skip(chunk.len()) {
            *lane += 0.0;
        }
    }
    fold(lanes)
}

/// Where element `d` of key `s` lies in a blocked transposed key buffer: blocks of 16
/// positions, `block_stride` floats apart, each holding 16 consecutive values per element.
#[inline]
pub fn kt_index(s: usize, d: usize, block_stride: usize) -> usize {
    (s / 16) * block_stride + d * 16 + s % 16
}

/// One score of [`VecOps::dot_t`]: `Σ_d q[d] · key_s[d]`, d in order.
#[inline]
pub fn dot_t_one(q: &[f32], kt: &[f32], block_stride: usize, s: usize) -> f32 {
    let mut acc = 0f32;
    for (d, &qd) in q.iter().enumerate() {
        acc += qd * kt[kt_index(s, d, block_stride)];
    }
    acc
}

fn swiglu_scalar(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp_scalar(-g)) * u;
    }
}

fn axpy_scalar(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o += alpha * v;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512F; `a` and `b` have equal lengths.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let mut acc = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n for both slices.
            let (x, y) = unsafe {
                (
                    _mm512_loadu_ps(a.as_ptr().add(i)),
                    _mm512_loadu_ps(b.as_ptr().add(i)),
                )
            };
            acc = _mm512_add_ps(acc, _mm512_mul_ps(x, y));
            i += 16;
        }
        if i < n {
            let m: __mmask16 = ((1u32 << (n - i)) - 1) as u16;
            // SAFETY: masked loads read only the n - i valid elements.
            let (x, y) = unsafe {
                (
                    _mm512_maskz_loadu_ps(m, a.as_ptr().add(i)),
                    _mm512_maskz_loadu_ps(m, b.as_ptr().add(i)),
                )
            };
            acc = _mm512_add_ps(acc, _mm512_mul_ps(x, y));
        }
        let lo = _mm512_castps512_ps256(acc);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
        fold8(_mm256_add_ps(lo, hi))
    }

    /// Folds lanes 0..8 as l + l+4, l + l+2, l + l+1.
    #[target_feature(enable = "avx2")]
    fn fold8(v: __m256) -> f32 {
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
        _mm_cvtss_f32(s1)
    }

    /// # Safety
    /// The CPU must support AVX2; `a` and `b` have equal lengths.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut pa = [0f32; 16];
        let mut pb = [0f32; 16];
        let mut i = 0;
        while i < n {
            let (xa, xb): (*const f32, *const f32) = if i + 16 <= n {
                (a[i..].as_ptr(), b[i..].as_ptr())
            } else {
                pa[..n - i].copy_from_slice(&a[i..]);
                pb[..n - i].copy_from_slice(&b[i..]);
                (pa.as_ptr(), pb.as_ptr())
            };
            // SAFETY: xa/xb point at 16 readable floats (the slice or the padded copy).
            unsafe {
                lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(xa), _mm256_loadu_ps(xb)));
                hi = _mm256_add_ps(
                    hi,
                    _mm256_mul_ps(_mm256_loadu_ps(xa.add(8)), _mm256_loadu_ps(xb.add(8))),
                );
            }
            i += 16;
        }
        fold8(_mm256_add_ps(lo, hi))
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

    /// # Safety
    /// The CPU must support AVX-512F; the three slices have equal lengths.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn swiglu_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
        let n = gate.len();
        let mut i = 0;
        while i < n {
            let m: __mmask16 = if n - i >= 16 {
                0xFFFF
            } else {
                ((1u32 << (n - i)) - 1) as u16
            };
            // SAFETY: masked loads and store touch only the valid elements.
            unsafe {
                let g = _mm512_maskz_loadu_ps(m, gate.as_ptr().add(i));
                let u = _mm512_maskz_loadu_ps(m, up.as_ptr().add(i));
                let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
                let y = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e)), u);
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, y);
            }
            i += 16;
        }
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
            let m: __mmask16 = if n - i >= 16 {
                0xFFFF
            } else {
                ((1u32 << (n - i)) - 1) as u16
            };
            // SAFETY: the mask limits the load to the valid elements.
            let v = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)) };
            let y = exp16(_mm512_sub_ps(v, c(max)));
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
        let mut s = 0;
        while s < n {
            let mask: __mmask16 = if n - s >= 16 {
                0xFFFF
            } else {
                ((1u32 << (n - s)) - 1) as u16
            };
            let mut i0 = 0;
            while i0 < m {
                let qn = (m - i0).min(Q);
                let mut acc = [_mm512_setzero_ps(); Q];
                let block = (s / 16) * stride;
                for d in 0..hd {
                    // SAFETY: the mask keeps the load within keys s..n of this block, whose
                    // elements lie in `kt` (asserted by the caller).
                    let k = unsafe { _mm512_maskz_loadu_ps(mask, kt.as_ptr().add(block + d * 16)) };
                    for (i, a) in acc.iter_mut().enumerate().take(qn) {
                        let q = _mm512_set1_ps(qs[(i0 + i) * hd + d]);
                        *a = _mm512_add_ps(*a, _mm512_mul_ps(q, k));
                    }
                }
                for (i, a) in acc.iter().enumerate().take(qn) {
                    // SAFETY: masked store within out[(i0 + i) * out_stride + s..][..n - s].
                    unsafe {
                        _mm512_mask_storeu_ps(
                            out.as_mut_ptr().add((i0 + i) * out_stride + s),
                            mask,
                            *a,
                        )
                    };
                }
                i0 += Q;
            }
            s += 16;
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F; the slices hold what `VecOps::weighted_sum` asserts
    /// for d = 64.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn weighted_sum64_avx512(
        ws: &[f32],
        w_stride: usize,
        m: usize,
        values: &[f32],
        v_stride: usize,
        n: usize,
        out: &mut [f32],
    ) {
        const G: usize = 6;
        let mut i0 = 0;
        while i0 < m {
            let g = (m - i0).min(G);
            let mut acc = [[_mm512_setzero_ps(); 4]; G];
            for (i, a) in acc.iter_mut().enumerate().take(g) {
                for (c, v) in a.iter_mut().enumerate() {
                    // SAFETY: (i0 + i) * 64 + c * 16 + 16 <= m * 64 <= out.len().
                    *v = unsafe { _mm512_loadu_ps(out.as_ptr().add((i0 + i) * 64 + c * 16)) };
                }
            }
            for s in 0..n {
                // SAFETY: s * v_stride + 64 <= values.len() (asserted by the caller).
                let v: [__m512; 4] = std::array::from_fn(|c| unsafe {
                    _mm512_loadu_ps(values.as_ptr().add(s * v_stride + c * 16))
                });
                for (i, a) in acc.iter_mut().enumerate().take(g) {
                    let w = _mm512_set1_ps(ws[(i0 + i) * w_stride + s]);
                    for c in 0..4 {
                        a[c] = _mm512_add_ps(a[c], _mm512_mul_ps(w, v[c]));
                    }
                }
            }
            for (i, a) in acc.iter().enumerate().take(g) {
                for (c, v) in a.iter().enumerate() {
                    // SAFETY: as for the loads above.
                    unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((i0 + i) * 64 + c * 16), *v) };
                }
            }
            i0 += G;
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F; rows `0..out.len()` at `stride` lie in `rows`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_rows_avx512(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            // SAFETY: the caller checked the bounds; the feature is enabled here.
            *o = unsafe { dot_avx512(q, &rows[i * stride..][..q.len()]) };
        }
    }

    /// # Safety
    /// The CPU must support AVX2; rows `0..out.len()` at `stride` lie in `rows`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot_rows_avx2(q: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            // SAFETY: the caller checked the bounds; the feature is enabled here.
            *o = unsafe { dot_avx2(q, &rows[i * stride..][..q.len()]) };
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F; rows `0..w.len()` at `stride` lie in `rows`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn axpy_rows_avx512(w: &[f32], rows: &[f32], stride: usize, y: &mut [f32]) {
        const MAX: usize = 8;
        let d = y.len();
        if d.is_multiple_of(16) && d <= 16 * MAX {
            // Keep y in registers across rows: the same per-element adds, in row order.
            let v = d / 16;
            let mut acc = [_mm512_setzero_ps(); MAX];
            for (j, a) in acc.iter_mut().enumerate().take(v) {
                // SAFETY: j * 16 + 16 <= d.
                *a = unsafe { _mm512_loadu_ps(y.as_ptr().add(j * 16)) };
            }
            for (i, &a) in w.iter().enumerate() {
                let av = _mm512_set1_ps(a);
                let row = &rows[i * stride..][..d];
                for (j, acc) in acc.iter_mut().enumerate().take(v) {
                    // SAFETY: j * 16 + 16 <= d = row.len().
                    let x = unsafe { _mm512_loadu_ps(row.as_ptr().add(j * 16)) };
                    *acc = _mm512_add_ps(*acc, _mm512_mul_ps(av, x));
                }
            }
            for (j, a) in acc.iter().enumerate().take(v) {
                // SAFETY: j * 16 + 16 <= d.
                unsafe { _mm512_storeu_ps(y.as_mut_ptr().add(j * 16), *a) };
            }
            return;
        }
        for (i, &a) in w.iter().enumerate() {
            // SAFETY: the caller checked the bounds; the feature is enabled here.
            unsafe { axpy_avx512(a, &rows[i * stride..][..y.len()], y) };
        }
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
    /// The CPU must support AVX-512F; `x` and `y` have equal lengths.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn axpy_avx512(alpha: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len();
        let a = _mm512_set1_ps(alpha);
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n for both slices.
            unsafe {
                let v = _mm512_add_ps(
                    _mm512_loadu_ps(y.as_ptr().add(i)),
                    _mm512_mul_ps(a, _mm512_loadu_ps(x.as_ptr().add(i))),
                );
                _mm512_storeu_ps(y.as_mut_ptr().add(i), v);
            }
            i += 16;
        }
        for j in i..n {
            y[j] += alpha * x[j];
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_gives_the_scalar_bits() {
        let mut s = 1u32;
        let mut rnd = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for n in [1usize, 7, 15, 16, 17, 31, 64, 100, 128] {
            let a: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..n).map(|_| rnd() * 1e3).collect();
            let want = dot_scalar(&a, &b).to_bits();
            let mut y0: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let y_ref = {
                let mut y = y0.clone();
                axpy_scalar(0.37, &a, &mut y);
                y
            };
            for isa in Isa::available() {
                let ops = VecOps::new(isa);
                assert_eq!(ops.dot(&a, &b).to_bits(), want, "{} n={n}", isa.name());
                let mut y = y0.clone();
                ops.axpy(0.37, &a, &mut y);
                assert_eq!(y, y_ref, "{} n={n}", isa.name());
            }
            y0.clear();
            let mut e: Vec<f32> = (0..n).map(|_| rnd() * 200.0).collect();
            let mx = e.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut e_ref = e.clone();
            let s_ref = exp_sum_scalar(&mut e_ref, mx);
            for (&got, &orig) in e_ref.iter().zip(&e) {
                let want = ((orig - mx) as f64).exp();
                assert!(
                    (got as f64 - want).abs() <= 2e-7 * want.max(1e-30) + 1e-37,
                    "{orig}"
                );
            }
            for isa in Isa::available() {
                let mut v = e.clone();
                let s = VecOps::new(isa).exp_sum(&mut v, mx);
                assert_eq!(s.to_bits(), s_ref.to_bits(), "{} n={n}", isa.name());
                assert_eq!(v, e_ref, "{} n={n}", isa.name());
            }
            e.clear();
            // Multi-output weighted sums equal per-output axpys (d = n here).
            let (m, nk) = (7usize, 9usize);
            let ws: Vec<f32> = (0..m * nk).map(|_| rnd()).collect();
            let vals: Vec<f32> = (0..nk * (n + 3)).map(|_| rnd()).collect();
            let mut want_w = vec![0.5f32; m * n];
            for s in 0..nk {
                for i in 0..m {
                    axpy_scalar(
                        ws[i * nk + s],
                        &vals[s * (n + 3)..][..n],
                        &mut want_w[i * n..(i + 1) * n],
                    );
                }
            }
            for isa in Isa::available() {
                let mut got = vec![0.5f32; m * n];
                VecOps::new(isa).weighted_sum(&ws, nk, m, &vals, n + 3, nk, &mut got, n);
                assert_eq!(got, want_w, "{} n={n}", isa.name());
            }
            // Transposed-key scores equal the one-key definition.
            let (m, nk) = (5usize, 37usize);
            let stride = n * 16 + 32;
            let qs: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            let kt: Vec<f32> = (0..nk.div_ceil(16) * stride).map(|_| rnd()).collect();
            let mut want_t = vec![0f32; m * nk];
            for i in 0..m {
                for s in 0..nk {
                    want_t[i * nk + s] = dot_t_one(&qs[i * n..][..n], &kt, stride, s);
                }
            }
            for isa in Isa::available() {
                let mut got = vec![0f32; m * nk];
                VecOps::new(isa).dot_t(&qs, m, n, &kt, stride, nk, &mut got, nk);
                assert_eq!(got, want_t, "{} n={n}", isa.name());
            }
            let g: Vec<f32> = (0..n).map(|_| rnd() * 40.0).collect();
            let u: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let mut want_s = vec![0f32; n];
            swiglu_scalar(&g, &u, &mut want_s);
            for (i, &w) in want_s.iter().enumerate() {
                let exact = g[i] as f64 / (1.0 + (-g[i] as f64).exp()) * u[i] as f64;
                assert!((w as f64 - exact).abs() <= 1e-6 * exact.abs() + 1e-30);
            }
            for isa in Isa::available() {
                let mut o = vec![0f32; n];
                VecOps::new(isa).swiglu(&g, &u, &mut o);
                assert_eq!(o, want_s, "{} n={n}", isa.name());
            }
            let rows: Vec<f32> = (0..n * 5 + 3).map(|_| rnd()).collect();
            let w: Vec<f32> = (0..5).map(|_| rnd()).collect();
            let stride = n + 1;
            let m = (rows.len() - n) / stride + 1;
            let scalar = VecOps::new(Isa::Scalar);
            let mut want_d = vec![0f32; m.min(5)];
            scalar.dot_rows(&a, &rows, stride, &mut want_d);
            let mut want_y = vec![0.5f32; n];
            scalar.axpy_rows(&w[..m.min(5)], &rows, stride, &mut want_y);
            for isa in Isa::available() {
                let ops = VecOps::new(isa);
                let mut d = vec![0f32; m.min(5)];
                ops.dot_rows(&a, &rows, stride, &mut d);
                assert_eq!(d, want_d, "{} n={n}", isa.name());
                let mut y = vec![0.5f32; n];
                ops.axpy_rows(&w[..m.min(5)], &rows, stride, &mut y);
                assert_eq!(y, want_y, "{} n={n}", isa.name());
            }
        }
    }
}
