//! Conversion of GGML tensor types to f32.
//!
//! Each block format follows ggml's reference `dequantize_row_*` (ggml-quants.c) operation for
//! operation, in the same order and without fused multiply-adds, so the f32 results are
//! bit-identical to ggml's scalar path: the runtime requantizes from these values and must see
//! exactly what llama.cpp would.

mod k_quants;
mod legacy;

use crate::{GgmlType, GgufError, Result};

impl GgmlType {
    /// Whether [`dequantize`] converts this type.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | F64
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q2_K
                | Q3_K
                | Q4_K
                | Q5_K
                | Q6_K
        )
    }
}

/// Dequantizes `bytes` of type `ty` into `out`.
///
/// `out.len()` must be a whole number of blocks and `bytes` exactly that many blocks; types
/// without a conversion give [`GgufError::NoDequantization`].
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if !ty.can_dequantize() {
        return Err(GgufError::NoDequantization(ty));
    }
    if ty.bytes_for(out.len() as u64) != Some(bytes.len() as u64) {
        return Err(GgufError::DequantShape {
            ty,
            len: bytes.len(),
        });
    }
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.as_chunks::<4>().0) {
                *o = f32::from_le_bytes(*c);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
                *o = half::f16::from_le_bytes(*c).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.as_chunks::<2>().0) {
                *o = half::bf16::from_le_bytes(*c).to_f32();
            }
        }
        GgmlType::F64 => {
            for (o, c) in out.iter_mut().zip(bytes.as_chunks::<8>().0) {
                // Round-to-nearest narrowing, as a C `(float)` cast does.
                *o = f64::from_le_bytes(*c) as f32;
            }
        }
        GgmlType::Q4_0 => blocks(bytes, out, legacy::q4_0),
        GgmlType::Q4_1 => blocks(bytes, out, legacy::q4_1),
        GgmlType::Q5_0 => blocks(bytes, out, legacy::q5_0),
        GgmlType::Q5_1 => blocks(bytes, out, legacy::q5_1),
        GgmlType::Q8_0 => blocks(bytes, out, legacy::q8_0),
        GgmlType::Q2_K => blocks(bytes, out, k_quants::q2_k),
        GgmlType::Q3_K => blocks(bytes, out, k_quants::q3_k),
        GgmlType::Q4_K => blocks(bytes, out, k_quants::q4_k),
        GgmlType::Q5_K => blocks(bytes, out, k_quants::q5_k),
        GgmlType::Q6_K => blocks(bytes, out, k_quants::q6_k),
        _ => unreachable!("can_dequantize() admitted {ty:?}"),
    }
    Ok(())
}

/// Runs a per-block kernel over fixed-size chunks; the array types let the compiler drop the
/// bounds checks inside the kernels. Lengths were checked by the caller.
fn blocks<const B: usize, const N: usize>(
    bytes: &[u8],
    out: &mut [f32],
    f: fn(&[u8; B], &mut [f32; N]),
) {
    let (src, _) = bytes.as_chunks::<B>();
    let (dst, _) = out.as_chunks_mut::<N>();
    for (b, y) in src.iter().zip(dst) {
        f(b, y);
    }
}

/// Little-endian f16 at byte `at`, widened exactly.
#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// A fixed-size view of `b[at..at + N]`.
#[inline(always)]
fn sub<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..at + N].try_into().expect("in-block range")
}
