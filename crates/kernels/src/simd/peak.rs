//! Peak-rate probes for the roofline: the int8 dot-product step each path's matmul
//! kernels issue, and the f32 FMA attention uses, on independent register accumulators
//! with no memory traffic, so their throughput is the compute floor under a forward.

use crate::isa::Isa;

/// Independent accumulator chains: enough to hide the instruction's latency on every
/// port that executes it (4-5 cycles × 2 ports on current x86 cores).
const CHAINS: usize = 12;

/// What one probe did: multiply-adds, and a value that depends on every one of them (so
/// none can be optimised away).
pub(crate) struct Probe {
    pub macs: u64,
    pub check: i64,
}

/// `iters` × CHAINS of the int8 dot-product step of `isa`'s matmul kernels: AMX's
/// `tdpbsud` of full tiles (16,384 multiply-adds; 4 per iteration), `vpdpbusd`
/// zmm (64 u8×i8 multiply-adds), `vpdpbusd` ymm (32), AVX2's `vpmaddubsw` + `vpmaddwd` +
/// `vpaddd` (32), or portable integer code.
pub(crate) fn int8(isa: Isa, iters: usize) -> Probe {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the ISA was checked available when the executor was built.
        Isa::Avx512Vnni => unsafe { x86::vnni512(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Amx => unsafe { super::amx::peak(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::AvxVnni => unsafe { x86::vnni256(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { x86::maddubs256(iters) },
        _ => portable_int8(iters),
    }
}

/// `iters` × CHAINS f32 FMAs of the widest vectors `isa` has (16 lanes with AVX-512, 8
/// with AVX2), or portable code.
pub(crate) fn f32_fma(isa: Isa, iters: usize) -> Probe {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8`.
        Isa::Amx | Isa::Avx512Vnni => unsafe { x86::fma512(iters) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8`.
        Isa::AvxVnni | Isa::Avx2 => unsafe { x86::fma256(iters) },
        _ => portable_f32(iters),
    }
}

/// Sums `words` with the widest loads `isa` has and eight independent accumulators, so
/// the loads alone bound it: a streaming read.
pub(crate) fn read(isa: Isa, words: &[u64]) -> u64 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8`.
        Isa::Amx | Isa::Avx512Vnni => unsafe { x86::read512(words) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `int8`.
        Isa::AvxVnni | Isa::Avx2 => unsafe { x86::read256(words) },
        _ => portable_read(words),
    }
}

fn portable_read(words: &[u64]) -> u64 {
    let mut s = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(0, |a: u64, &b| a.wrapping_add(b));
    for c in chunks {
        for j in 0..8 {
            s[j] = s[j].wrapping_add(c[j]);
        }
    }
    s.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

fn portable_int8(iters: usize) -> Probe {
    let a = std::hint::black_box([3i8; 64]);
    let b = std::hint::black_box([5u8; 64]);
    let mut acc = [0i32; 64];
    for _ in 0..iters {
        for (i, s) in acc.iter_mut().enumerate() {
            *s = s.wrapping_add(a[i] as i32 * b[i] as i32);
        }
    }
    Probe {
        macs: iters as u64 * 64,
        check: acc.iter().map(|&x| x as i64).sum(),
    }
}

fn portable_f32(iters: usize) -> Probe {
    let a = std::hint::black_box([1.000_001f32; 64]);
    let mut acc = [0f32; 64];
    for _ in 0..iters {
        for (i, s) in acc.iter_mut().enumerate() {
            *s = s.mul_add(a[i], 1e-7);
        }
    }
    Probe {
        macs: iters as u64 * 64,
        check: acc.iter().map(|&x| x.to_bits() as i64).sum(),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Probe, CHAINS};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512 F/BW/VNNI available.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn vnni512(iters: usize) -> Probe {
        let a = std::hint::black_box(_mm512_set1_epi8(3));
        let b = std::hint::black_box(_mm512_set1_epi8(5));
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for s in acc.iter_mut() {
                *s = _mm512_dpbusd_epi32(*s, a, b);
            }
        }
        let check = acc.iter().map(|&s| _mm512_reduce_add_epi32(s) as i64).sum();
        Probe {
            macs: (iters * CHAINS * 64) as u64,
            check,
        }
    }

    /// # Safety
    /// AVX2 and AVX-VNNI available.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn vnni256(iters: usize) -> Probe {
        let a = std::hint::black_box(_mm256_set1_epi8(3));
        let b = std::hint::black_box(_mm256_set1_epi8(5));
        let mut acc = [_mm256_setzero_si256(); CHAINS];
        for _ in 0..iters {
            for s in acc.iter_mut() {
                *s = _mm256_dpbusd_avx_epi32(*s, a, b);
            }
        }
        Probe {
            macs: (iters * CHAINS * 32) as u64,
            check: acc.iter().map(|&s| sum256(s)).sum(),
        }
    }

    /// # Safety
    /// AVX2 available.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn maddubs256(iters: usize) -> Probe {
        let a = std::hint::black_box(_mm256_set1_epi8(3));
        let b = std::hint::black_box(_mm256_set1_epi8(5));
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); CHAINS];
        for _ in 0..iters {
            for s in acc.iter_mut() {
                let pairs = _mm256_maddubs_epi16(a, b);
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(pairs, ones));
            }
        }
        Probe {
            macs: (iters * CHAINS * 32) as u64,
            check: acc.iter().map(|&s| sum256(s)).sum(),
        }
    }

    /// # Safety
    /// AVX-512 F available.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma512(iters: usize) -> Probe {
        let a = std::hint::black_box(_mm512_set1_ps(1.000_001));
        let b = std::hint::black_box(_mm512_set1_ps(1e-7));
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iters {
            for s in acc.iter_mut() {
                *s = _mm512_fmadd_ps(*s, a, b);
            }
        }
        Probe {
            macs: (iters * CHAINS * 16) as u64,
            check: acc
                .iter()
                .map(|&s| _mm512_reduce_add_ps(s).to_bits() as i64)
                .sum(),
        }
    }

    /// # Safety
    /// AVX2 and FMA available.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma256(iters: usize) -> Probe {
        let a = std::hint::black_box(_mm256_set1_ps(1.000_001));
        let b = std::hint::black_box(_mm256_set1_ps(1e-7));
        let mut acc = [_mm256_setzero_ps(); CHAINS];
        for _ in 0..iters {
            for s in acc.iter_mut() {
                *s = _mm256_fmadd_ps(*s, a, b);
            }
        }
        let mut check = 0i64;
        for s in acc {
            let mut lanes = [0f32; 8];
            // SAFETY: `lanes` is 8 writable f32s; the store is unaligned.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
            check += lanes.iter().map(|x| x.to_bits() as i64).sum::<i64>();
        }
        Probe {
            macs: (iters * CHAINS * 8) as u64,
            check,
        }
    }

    /// # Safety
    /// AVX-512 F available.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn read512(words: &[u64]) -> u64 {
        let mut acc = [_mm512_setzero_si512(); 8];
        let lines = words.len() / 64;
        let p = words.as_ptr();
        for l in 0..lines {
            for (j, a) in acc.iter_mut().enumerate() {
                // SAFETY: line l of 64 words is inside `words` (l < len / 64).
                let v = unsafe { _mm512_loadu_si512(p.add(l * 64 + j * 8).cast()) };
                *a = _mm512_add_epi64(*a, v);
            }
        }
        let tail: u64 = words[lines * 64..]
            .iter()
            .fold(0, |a, &b| a.wrapping_add(b));
        acc.iter().fold(tail, |t, &a| {
            t.wrapping_add(_mm512_reduce_add_epi64(a) as u64)
        })
    }

    /// # Safety
    /// AVX2 available.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn read256(words: &[u64]) -> u64 {
        let mut acc = [_mm256_setzero_si256(); 8];
        let blocks = words.len() / 32;
        let p = words.as_ptr();
        for l in 0..blocks {
            for (j, a) in acc.iter_mut().enumerate() {
                // SAFETY: block l of 32 words is inside `words` (l < len / 32).
                let v = unsafe { _mm256_loadu_si256(p.add(l * 32 + j * 4).cast()) };
                *a = _mm256_add_epi64(*a, v);
            }
        }
        let tail: u64 = words[blocks * 32..]
            .iter()
            .fold(0, |a, &b| a.wrapping_add(b));
        acc.iter().fold(tail, |t, &a| t.wrapping_add(sum256_u64(a)))
    }

    #[target_feature(enable = "avx2")]
    fn sum256_u64(s: __m256i) -> u64 {
        let mut lanes = [0u64; 4];
        // SAFETY: `lanes` is 4 writable u64s; the store is unaligned.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), s) };
        lanes.iter().fold(0, |a, &b| a.wrapping_add(b))
    }

    #[target_feature(enable = "avx2")]
    fn sum256(s: __m256i) -> i64 {
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` is 8 writable i32s; the store is unaligned.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), s) };
        lanes.iter().map(|&x| x as i64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path's probe does the multiply-adds it counts: the same count, and the
    /// integer checksum each path's arithmetic gives (3 × 5 per multiply-add, wrapping in
    /// i32 lanes only far beyond these counts).
    #[test]
    fn every_available_path_counts_and_computes_its_work() {
        for isa in Isa::available() {
            let p = int8(isa, 100);
            assert!(p.macs > 0, "{isa}");
            assert_eq!(p.check, 15 * p.macs as i64, "{isa}");
            let f = f32_fma(isa, 100);
            assert!(f.macs > 0, "{isa}");
            // Lengths around every path's block and tail.
            for n in [0, 5, 64, 200, 1000] {
                let w: Vec<u64> = (0..n as u64).map(|i| i * 0x9e37_79b9).collect();
                let want = w.iter().fold(0u64, |a, &b| a.wrapping_add(b));
                assert_eq!(read(isa, &w), want, "{isa} {n}");
            }
        }
    }
}
