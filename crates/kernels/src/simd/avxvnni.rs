//! AVX-VNNI: the 256-bit kernels with the VEX `vpdpbusd` (u8 weights × i8 activations).

use super::ymm::{Dot256, Q4, Q8};
use super::ymm_k::{KNib, Q6K};
use super::{drive, Job};
use crate::format::WeightFormat;
use std::arch::x86_64::*;

/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI available, and the contract of [`drive`].
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn run(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded; everything below is inlined into this feature-enabled function.
    unsafe { by_format::<VexDot>(job, tiles) }
}

/// The same kernels with the EVEX encoding (AVX-512 VL + VNNI): the test of this code
/// path on CPUs without AVX-VNNI.
///
/// # Safety
/// AVX2, FMA, F16C, AVX-512 F/VL/VNNI available, and the contract of [`drive`].
#[cfg(test)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
pub(super) unsafe fn run_evex(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded.
    unsafe { by_format::<EvexDot>(job, tiles) }
}

#[inline(always)]
unsafe fn by_format<D: Dot256>(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded from the callers' contracts.
    unsafe {
        match job.format {
            WeightFormat::Q8_0 => drive::<Q8<D>>(job, tiles),
            WeightFormat::Q4_0 => drive::<Q4<D, false>>(job, tiles),
            WeightFormat::Q4_1 => drive::<Q4<D, true>>(job, tiles),
            WeightFormat::Q5_0 => drive::<KNib<D, true, false>>(job, tiles),
            WeightFormat::Q4_K => drive::<KNib<D, false, true>>(job, tiles),
            WeightFormat::Q5_K => drive::<KNib<D, true, true>>(job, tiles),
            WeightFormat::Q6_K => drive::<Q6K<D>>(job, tiles),
        }
    }
}

/// Generates a `Dot256` over a `vpdpbusd` intrinsic (the VEX and EVEX forms have the
/// same semantics: non-saturating i32 accumulate of four u8 × i8 products per lane).
macro_rules! dpbusd_dot {
    ($name:ident, $dp:ident) => {
        struct $name;

        impl Dot256 for $name {
            type Q8W = __m256i;
            const Q8_OFFSET: bool = true;

            #[inline(always)]
            unsafe fn prep_q8(w: __m256i) -> __m256i {
                w
            }

            #[inline(always)]
            unsafe fn dot_q8(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
                // SAFETY: the caller enabled the instruction's features.
                unsafe { $dp(acc, w, x) }
            }

            #[inline(always)]
            unsafe fn dot_nib2(
                acc: __m256i,
                lo: __m256i,
                xa: __m256i,
                hi: __m256i,
                xb: __m256i,
            ) -> __m256i {
                // SAFETY: as above.
                unsafe { $dp($dp(acc, lo, xa), hi, xb) }
            }

            #[inline(always)]
            unsafe fn dot_u6(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
                // SAFETY: as above.
                unsafe { $dp(acc, w, x) }
            }
        }
    };
}

dpbusd_dot!(VexDot, _mm256_dpbusd_avx_epi32);
#[cfg(test)]
dpbusd_dot!(EvexDot, _mm256_dpbusd_epi32);
