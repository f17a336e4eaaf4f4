//! f32 vector primitives for attention, with one arithmetic definition for every ISA.
//!
//! Each primitive is defined by its portable code: a rounded multiply then a rounded add
//! (never a fused multiply-add), in a fixed order. Attention scores (`dot_t`) sum over the
//! head dimension in order for 16 keys at a time; sums of many values (`exp_sum`) keep 16
//! partial sums folded in a fixed tree (l + l+8, l + l+4, l + l+2, l + l+1); `axpy` and
//! `weighted_sum` are element-wise. The vector builds do the same operations per lane, so
//! every instruction set gives identical bits.

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

    /// `y += w[i] * rows[i * stride..][..y.len()]` for i in order: the same element
    /// operations as calling `axpy` once per row.
    fn axpy_rows(&self, w: &[f32], rows: &[f32], stride: usize, y: &mut [f32]) {
        let d = y.len();
        if w.is_empty() {
            return;
        }
        assert!(
            (w.len() - 1) * stride + d <= rows.len(),
            "axpy_rows: rows too short"
        );
        match self.isa {
            // Attention's head sizes take `weighted_sum`'s register-blocked AVX-512 paths;
            // this serves the other shapes, on AVX2 (which every AVX-512 ISA here has).
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed, and each of these implies AVX2; every row slice is in bounds.
            Isa::Amx | Isa::Avx512Vnni | Isa::AvxVnni | Isa::Avx2 => unsafe {
                x86::axpy_rows_avx2(w, rows, stride, y)
            },
            _ => {
                for (i, &a) in w.iter().enumerate() {
                    axpy_scalar(a, &rows[i * stride..][..d], y);
                }
            }
        }
    }

    /// `x[i] *= scale` for every element (one rounded multiply each), returning the
    /// largest product, NaNs skipped (−∞ if none is left). Any order of comparisons gives
    /// the same maximum, up to the sign of a zero one, which `exp_sum` turns into the same
    /// bits either way (`exp(±0) = 1`, and `x − (±0) = x` for every other x).
    pub fn scale_max(&self, x: &mut [f32], scale: f32) -> f32 {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed.
            Isa::Amx | Isa::Avx512Vnni => unsafe { x86::scale_max_avx512(x, scale) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above; every AVX2 ISA here has AVX2.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::scale_max_avx2(x, scale) },
            _ => scale_max_scalar(x, scale),
        }
    }

    /// `x[i] = exp(x[i] - max)` for every element, returning their sum (16 partial sums
    /// folded in the fixed tree). The exponential is our own polynomial built from plain f32
    /// operations, so every instruction set computes the same bits (libm's `expf` would
    /// not vectorize and costs a call per attention score).
    pub fn exp_sum(&self, x: &mut [f32], max: f32) -> f32 {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed.
            Isa::Amx | Isa::Avx512Vnni => unsafe { x86::exp_sum_avx512(x, max) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::exp_sum_avx2(x, max) },
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
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed; bounds were asserted above.
            Isa::Amx | Isa::Avx512Vnni => unsafe {
                x86::dot_t_avx512(qs, m, hd, kt, stride, n, out, out_stride)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni | Isa::Avx2 => unsafe {
                x86::dot_t_avx2(qs, m, hd, kt, stride, n, out, out_stride)
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
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed; bounds were asserted above.
            Isa::Amx | Isa::Avx512Vnni if d == 64 => unsafe {
                x86::weighted_sum_avx512::<4>(ws, w_stride, m, values, v_stride, n, out)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Amx | Isa::Avx512Vnni if d == 32 => unsafe {
                x86::weighted_sum_avx512::<2>(ws, w_stride, m, values, v_stride, n, out)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Amx | Isa::Avx512Vnni if d == 128 => unsafe {
                x86::weighted_sum_avx512::<8>(ws, w_stride, m, values, v_stride, n, out)
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
        self.gated::<false>(gate, up, out)
    }

    /// `gate / (1 + exp(arg(gate))) * up` on this ISA: SiLU's argument `-x`, or with
    /// `GELU` tanh-GELU's ([`gelu_arg`]).
    fn gated<const GELU: bool>(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        let n = gate.len().min(up.len()).min(out.len());
        let (gate, up, out) = (&gate[..n], &up[..n], &mut out[..n]);
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an executor only holds an Isa that `is_available()` confirmed.
            Isa::Amx | Isa::Avx512Vnni => unsafe { x86::gated_avx512::<GELU>(gate, up, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::AvxVnni | Isa::Avx2 => unsafe { x86::gated_avx2::<GELU>(gate, up, out) },
            _ => gated_scalar::<GELU>(gate, up, out),
        }
    }
}

/// `2·√(2/π)`: tanh-GELU's `0.5·x·(1 + tanh(u))` is `x / (1 + exp(-2u))`.
const GELU_2C: f32 = 1.595_769_2;
const GELU_K: f32 = 0.044_715;

impl VecOps {
    /// GeGLU with tanh-GELU: `out[i] = gelu(gate[i]) * up[i]`, where
    /// `gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as
    /// `x / (1 + exp(-2√(2/π)·(x + 0.044715·x·x·x)))` with the same exponential as
    /// `exp_sum` (its clamp keeps both tails finite: `x / huge` is 0 far left, and
    /// `x / 1` far right).
    pub fn geglu(&self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        self.gated::<true>(gate, up, out)
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

// exp(x) = 2^n · p(r), n = round(x / ln 2), r = x - n·ln 2 in two parts (Cephes expf).
const EXP_LO: f32 = -87.0;
/// exp(x - max) below e^-70 counts as 0 in softmax sums (see `exp_sum`).
const SOFTMAX_FLUSH: f32 = -70.0;
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

fn scale_max_scalar(x: &mut [f32], scale: f32) -> f32 {
    x.iter_mut().fold(f32::NEG_INFINITY, |m, v| {
        *v *= scale;
        m.max(*v)
    })
}

fn exp_sum_scalar(x: &mut [f32], max: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    for chunk in x.chunks_mut(LANES) {
        for (l, v) in chunk.iter_mut().enumerate() {
            let t = *v - max;
            // Weights this small are flushed: they cannot matter, and as factors of the
            // value sums they would produce subnormals, which cost ~100 cycles each.
            *v = if t < SOFTMAX_FLUSH {
                0.0
            } else {
                exp_scalar(t)
            };
            lanes[l] += *v;
        }
        // Padding lanes stay as they are: the vector code adds +0.0 to them, and lanes
        // never hold -0.0 (they start at +0.0 and only gain non-negative terms).
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
pub(crate) fn dot_t_one(q: &[f32], kt: &[f32], block_stride: usize, s: usize) -> f32 {
    let mut acc = 0f32;
    for (d, &qd) in q.iter().enumerate() {
        acc += qd * kt[kt_index(s, d, block_stride)];
    }
    acc
}

#[inline(always)]
fn gelu_arg(x: f32) -> f32 {
    -(GELU_2C * (x + GELU_K * (x * x * x)))
}

fn gated_scalar<const GELU: bool>(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let arg = if GELU { gelu_arg(g) } else { -g };
        *o = g / (1.0 + exp_scalar(arg)) * u;
    }
}

fn axpy_scalar(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o += alpha * v;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;
