//! AVX2 + FMA without VNNI: `vpmaddubsw` (u8 × i8 → i16 pairs, saturating) then
//! `vpmaddwd` with ones. Nibbles (≤ 15) never saturate; Q8_0 weights are flipped back to
//! signed and multiplied as |w| × sign(x, w), whose pair sums stay ≤ 2·128·127 < 2¹⁵
//! (activations are never −128, see `block_quant::round_i8`'s ±127 range).

use super::ymm::{Dot256, Q4, Q8};
use super::ymm_k::{KNib, Q6K};
use super::{drive, Job};
use crate::format::WeightFormat;
use std::arch::x86_64::*;

/// # Safety
/// AVX2, FMA and F16C available, and the contract of [`drive`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded; everything below is inlined into this feature-enabled function.
    unsafe {
        match job.format {
            WeightFormat::Q8_0 => drive::<Q8<Avx2Dot>>(job, tiles),
            WeightFormat::Q4_0 => drive::<Q4<Avx2Dot, false>>(job, tiles),
            WeightFormat::Q4_1 => drive::<Q4<Avx2Dot, true>>(job, tiles),
            WeightFormat::Q5_0 => drive::<KNib<Avx2Dot, true, false>>(job, tiles),
            WeightFormat::Q4_K => drive::<KNib<Avx2Dot, false, true>>(job, tiles),
            WeightFormat::Q5_K => drive::<KNib<Avx2Dot, true, true>>(job, tiles),
            WeightFormat::Q6_K => drive::<Q6K<Avx2Dot>>(job, tiles),
        }
    }
}

pub(super) struct Avx2Dot;

impl Dot256 for Avx2Dot {
    /// (|w|, signed w).
    type Q8W = (__m256i, __m256i);
    const Q8_OFFSET: bool = false;

    #[inline(always)]
    unsafe fn prep_q8(w: __m256i) -> Self::Q8W {
        // SAFETY: AVX2 enabled by the caller.
        unsafe {
            let signed = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
            (_mm256_abs_epi8(signed), signed)
        }
    }

    #[inline(always)]
    unsafe fn dot_q8(acc: __m256i, w: Self::Q8W, x: __m256i) -> __m256i {
        // SAFETY: AVX2 enabled by the caller.
        unsafe {
            let pairs = _mm256_maddubs_epi16(w.0, _mm256_sign_epi8(x, w.1));
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }

    #[inline(always)]
    unsafe fn dot_nib2(
        acc: __m256i,
        lo: __m256i,
        xa: __m256i,
        hi: __m256i,
        xb: __m256i,
    ) -> __m256i {
        // SAFETY: AVX2 enabled by the caller. Each pair sum is ≤ 2·15·128, so the two
        // i16 vectors can be added before widening (exact).
        unsafe {
            let pairs =
                _mm256_add_epi16(_mm256_maddubs_epi16(lo, xa), _mm256_maddubs_epi16(hi, xb));
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }

    #[inline(always)]
    unsafe fn dot_u6(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: AVX2 enabled by the caller. Each pair sum is ≤ 2·63·128 < 2¹⁵.
        unsafe {
            let pairs = _mm256_maddubs_epi16(w, x);
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }
}
