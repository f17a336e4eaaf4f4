//! The portable block quantizer: ggml's Q8_0 rule for activations and weights. Scalar
//! code whose every operation is exactly rounded, so the bits never depend on the CPU or
//! the batch; the vector builds in `simd/quantize.rs` must match it.

use crate::format::{BlockMeta, QK};
use half::f16;

/// Quantizes whole blocks: `x`, `q` of equal length (a multiple of 32), one `meta` per
/// block. Inlined into `simd::quantize_rows`'s wider-vector builds of the same code.
#[inline(always)]
pub(crate) fn quantize_into(x: &[f32], q: &mut [i8], meta: &mut [BlockMeta]) {
    let blocks = x.chunks_exact(QK).zip(q.chunks_exact_mut(QK));
    for ((xb, qb), m) in blocks.zip(meta.iter_mut()) {
        let (d, sum, first_half) = quantize_block(xb, qb);
        *m = BlockMeta::new(d, sum, first_half);
    }
}

/// `v.round() as i8` (round half away from zero, saturating, NaN → 0), bit for bit, in
/// plain float and integer operations that vectorize (on baseline x86-64, `f32::round`
/// is a libm call and `as i32` a scalar conversion with saturation fix-ups).
#[inline(always)]
pub(crate) fn round_i8(v: f32) -> i8 {
    // 1.5 · 2²³: adding it rounds to an integer (ties to even) in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let v = if v.is_nan() {
        0.0
    } else {
        v.clamp(-128.0, 127.0)
    };
    let m = v + MAGIC;
    let nearest = m - MAGIC; // exact
    let i = m.to_bits() as i32 - MAGIC.to_bits() as i32;
    // Exact (|diff| ≤ 0.5 on v's grid). Ties went to even; move them away from zero.
    let diff = v - nearest;
    let away = ((diff == 0.5) & (v > 0.0)) as i32 - ((diff == -0.5) & (v < 0.0)) as i32;
    (i + away) as i8
}

/// Quantizes one block of 32: d = amax/127, q = round(x · (1/d)). Returns (d, Σq, and
/// the sum of the first 16 q).
/// This is ggml's `quantize_row_q8_0_ref` (also used for activations).
#[inline(always)]
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32, i32) {
    let x: &[f32; QK] = x.try_into().expect("block of 32");
    let q: &mut [i8; QK] = q.try_into().expect("block of 32");
    // amax on the bit patterns: for floats ≥ +0 integer order is float order, and NaN
    // maps to 0 (ignored, as by f32::max). Integer max vectorizes (vpmaxud); a float
    // max with f32::max's NaN rule does not.
    let mut lanes = [0u32; 16];
    for chunk in x.chunks_exact(16) {
        for (m, v) in lanes.iter_mut().zip(chunk) {
            let a = v.to_bits() & 0x7fff_ffff;
            *m = (*m).max(if a > 0x7f80_0000 { 0 } else { a });
        }
    }
    let amax = f32::from_bits(lanes.iter().fold(0, |m, &a| m.max(a)));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut wide = [0i32; QK];
    for (o, &v) in wide.iter_mut().zip(x) {
        *o = round_i8(v * id) as i32;
    }
    for (o, &v) in q.iter_mut().zip(&wide) {
        *o = v as i8;
    }
    (d, wide.iter().sum(), wide[..QK / 2].iter().sum())
}

/// One GGML Q8_0 block (34 bytes: f16 d, 32 × i8) from 32 floats, as ggml writes it.
pub(crate) fn quantize_row_q8_0_ggml(x: &[f32], out: &mut [u8]) {
    let mut q = [0i8; QK];
    let (d, _, _) = quantize_block(x, &mut q);
    out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (o, v) in out[2..].iter_mut().zip(q) {
        *o = v as u8;
    }
}
