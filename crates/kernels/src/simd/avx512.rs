//! AVX-512 VNNI kernels: 16 columns per zmm (one 64-byte vector of the packed layout is
//! one 16-column half of a tile), up to 6 rows × 2 column groups of i32 accumulators per
//! block, f32 accumulators in registers across blocks. The arithmetic per output is the
//! portable kernel's (`scalar.rs`), lane for lane.

use super::{drive, prefetch, quad, Job, Tile, TileKernel};
use crate::format::{BlockMeta, WeightFormat, SCALES, TILE};
use std::arch::x86_64::*;

/// # Safety
/// AVX-512 F/BW/VNNI, F16C and FMA available, and the contract of [`drive`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
pub(super) unsafe fn run(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded; the kernels below are inlined into this feature-enabled function.
    unsafe {
        match job.format {
            WeightFormat::Q8_0 => drive::<Q8>(job, tiles),
            WeightFormat::Q4_0 => drive::<Nib<1, false, false>>(job, tiles),
            WeightFormat::Q4_1 => drive::<Nib<0, false, false>>(job, tiles),
            WeightFormat::Q5_0 => drive::<Nib<2, true, false>>(job, tiles),
            WeightFormat::Q4_K => drive::<Nib<0, false, true>>(job, tiles),
            WeightFormat::Q5_K => drive::<Nib<0, true, true>>(job, tiles),
            WeightFormat::Q6_K => drive::<Q6K>(job, tiles),
        }
    }
}

/// Q8_0: weights stored as q + 128; accumulators start at −128·Σx.
struct Q8;

/// The nibble formats. `OFFSET`: the accumulators start at `OFFSET · (−8·Σx)` (1 for
/// Q4_0, 2 for Q5_0; 0 for the formats with a min term instead: Q4_1, Q4_K, Q5_K).
/// `FIFTH`: a fifth bit per quant from the bit-planed vectors after the nibbles (Q5_0,
/// Q5_K). `SUPER`: scales from the K super-block (f16 d and dmin in the group's header
/// times the block's u8 scale and min, both products exact), else the block's f16 ones.
struct Nib<const OFFSET: i32, const FIFTH: bool, const SUPER: bool>;

/// Q6_K: 6-bit quants (nibbles and bit-planed high pairs) with an i8 scale per 16-value
/// half, so two i32 accumulators per row and column group.
struct Q6K;

/// Bytes of a block record's nibble vectors.
pub(super) const NIBBLES: usize = TILE * 16;

/// Walks the tile's block records in order, calling `f(b, rec, group)` with block b's
/// record and its group (whose header the K formats' scales are in).
///
/// # Safety
/// `t` from `drive` for `job`.
#[inline(always)]
unsafe fn blocks<const R: usize>(
    job: &Job,
    t: &Tile<R>,
    mut f: impl FnMut(usize, *const u8, *const u8),
) {
    // SAFETY: records and groups lie inside the tile (`format.rs`).
    unsafe {
        let format = job.format;
        // Addresses advance by additions: `block_offset` divides.
        let (per_group, header) = (format.blocks_per_group(), format.header_bytes());
        let (rec_bytes, group_bytes) = (format.block_record_bytes(), format.group_bytes());
        let (mut group, mut in_group) = (t.w, 0);
        for b in 0..job.kb {
            prefetch(&t.pf, b * job.rec, job.rec);
            f(b, group.add(header + in_group * rec_bytes), group);
            in_group += 1;
            if in_group == per_group {
                (group, in_group) = (group.add(group_bytes), 0);
            }
        }
    }
}

/// 16 f16 at `p` (32-aligned) widened exactly.
#[inline(always)]
pub(super) unsafe fn halfs(p: *const u8) -> __m512 {
    // SAFETY: per the contract; AVX-512 F enabled by the caller.
    unsafe { _mm512_cvtph_ps(_mm256_load_si256(p.cast())) }
}

/// 16 bytes at `p` (16-aligned) widened to f32.
#[inline(always)]
unsafe fn bytes_u8(p: *const u8) -> __m512 {
    // SAFETY: per the contract; AVX-512 F enabled by the caller.
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(p.cast()))) }
}

/// 16 bytes at `p` (16-aligned) widened to f32, signed.
#[inline(always)]
unsafe fn bytes_i8(p: *const u8) -> __m512 {
    // SAFETY: per the contract; AVX-512 F enabled by the caller.
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(p.cast()))) }
}

/// `v` shifted left (`n` > 0) or right (`n` < 0) by |n| bits in each 16-bit lane (`n` a
/// constant after unrolling).
#[inline(always)]
unsafe fn shift16(v: __m512i, n: i32) -> __m512i {
    // SAFETY: AVX-512 BW enabled by the caller.
    unsafe {
        if n >= 0 {
            _mm512_sll_epi16(v, _mm_cvtsi32_si128(n))
        } else {
            _mm512_srl_epi16(v, _mm_cvtsi32_si128(-n))
        }
    }
}

impl TileKernel for Q8 {
    // 6 rows × 2 groups × (i32 + f32 accumulators) = 24 of the 32 zmm registers.
    const ROWS: usize = 6;
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: record b of the tile spans `job.rec` bytes, 64-aligned (aligned loads);
        // activation row pointers cover k bytes and kb metadata entries.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            blocks(job, t, |b, rec, _| {
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
                let dw = [halfs(rec), halfs(rec.add(32))];
                fold(t, b, dw, None, &isum, &mut acc);
            });
            store(t, &acc);
        }
    }
}

impl<const OFFSET: i32, const FIFTH: bool, const SUPER: bool> TileKernel
    for Nib<OFFSET, FIFTH, SUPER>
{
    // As for Q8: 24 accumulator registers, the rest for the unpacked nibbles. Six rows
    // share each load and unpack (4 did): 2-3% faster from 8 rows on (Zen 4).
    const ROWS: usize = 6;
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: as for Q8; the fifth-bit vectors follow the nibbles in the record, the
        // K formats' d and dmin lie in the group's header (`format.rs`).
        unsafe {
            let qoff = job.format.quant_offset();
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            blocks(job, t, |b, rec, group| {
                let mut isum: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                    let c = _mm512_set1_epi32(OFFSET * (*t.m[r].add(b)).c8);
                    [c, c]
                });
                let q = rec.add(qoff);
                let h = fifth_bits::<FIFTH>(q);
                for p in 0..4 {
                    let (lo, hi) = nib_quads::<FIFTH>(q, h, p);
                    for r in 0..R {
                        let xa = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                        let xb = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 16 + 4 * p)));
                        for g in 0..2 {
                            isum[r][g] = _mm512_dpbusd_epi32(isum[r][g], lo[g], xa);
                            isum[r][g] = _mm512_dpbusd_epi32(isum[r][g], hi[g], xb);
                        }
                    }
                }
                let (dw, mw) = nib_scales::<OFFSET, SUPER>(rec, group);
                fold(t, b, dw, mw, &isum, &mut acc);
            });
            store(t, &acc);
        }
    }
}

/// Block record `q`'s (its quants') fifth-bit vectors of both column groups, when the
/// format has them.
///
/// # Safety
/// `q` a nibble format's quants in a block record (`format.rs`); AVX-512 F enabled by the
/// caller.
#[inline(always)]
pub(super) unsafe fn fifth_bits<const FIFTH: bool>(q: *const u8) -> [__m512i; 2] {
    // SAFETY: per the contract, the fifth-bit vectors follow the nibbles.
    unsafe {
        if FIFTH {
            [0, 64].map(|g| _mm512_load_si512(q.add(NIBBLES + g).cast()))
        } else {
            [_mm512_setzero_si512(); 2]
        }
    }
}

/// The unsigned operands of k-quads `p` (k = 4p..4p+4, the low nibbles) and `4 + p`
/// (k = 16+4p..16+4p+4, the high ones) of both column groups, the fifth bits `h`
/// (`fifth_bits`) merged in: bits p and 4 + p of each byte move to bit 4.
///
/// # Safety
/// As for `fifth_bits`; AVX-512 F/BW enabled by the caller.
#[inline(always)]
pub(super) unsafe fn nib_quads<const FIFTH: bool>(
    q: *const u8,
    h: [__m512i; 2],
    p: usize,
) -> ([__m512i; 2], [__m512i; 2]) {
    // SAFETY: per the contract, vectors (p, 0) and (p, 1) lie in the record.
    unsafe {
        let nib = _mm512_set1_epi8(0x0f);
        let fifth = _mm512_set1_epi8(0x10);
        let v = [
            _mm512_load_si512(q.add(p * 128).cast()),
            _mm512_load_si512(q.add(p * 128 + 64).cast()),
        ];
        let mut lo = v.map(|v| _mm512_and_si512(v, nib));
        let mut hi = v.map(|v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), nib));
        if FIFTH {
            for g in 0..2 {
                let lo_h = _mm512_and_si512(shift16(h[g], 4 - p as i32), fifth);
                let hi_h = _mm512_and_si512(shift16(h[g], -(p as i32)), fifth);
                lo[g] = _mm512_or_si512(lo[g], lo_h);
                hi[g] = _mm512_or_si512(hi[g], hi_h);
            }
        }
        (lo, hi)
    }
}

/// A nibble format's per-column scales of block record `rec` (in `group`) for both column
/// groups, and its min term (`true`: it subtracts), as `fold` takes them.
///
/// # Safety
/// `rec` and `group` as `blocks` passes them; AVX-512 F enabled by the caller.
#[inline(always)]
pub(super) unsafe fn nib_scales<const OFFSET: i32, const SUPER: bool>(
    rec: *const u8,
    group: *const u8,
) -> ([__m512; 2], Option<([__m512; 2], bool)>) {
    // SAFETY: per the contract; the K formats' d and dmin lie in the group's header.
    unsafe {
        if SUPER {
            // (d · sc) and (dmin · m) per column, exact; the min term subtracts.
            let dw =
                [0, 1].map(|g| _mm512_mul_ps(halfs(group.add(g * 32)), bytes_u8(rec.add(g * 16))));
            let mw = [0, 1].map(|g| {
                _mm512_mul_ps(
                    halfs(group.add(SCALES + g * 32)),
                    bytes_u8(rec.add(TILE + g * 16)),
                )
            });
            (dw, Some((mw, true)))
        } else {
            // Q4_1's f16 mins follow its f16 scales; they add.
            let dw = [halfs(rec), halfs(rec.add(32))];
            let mw = (OFFSET == 0).then(|| {
                let mw = [halfs(rec.add(SCALES)), halfs(rec.add(SCALES + 32))];
                (mw, false)
            });
            (dw, mw)
        }
    }
}

/// Q6_K's unsigned operands of k-quads `p = 2hh + e` and `4 + p` of column group `g`
/// (`hv`: the group's high-bit vector `hh`).
///
/// # Safety
/// `q` Q6_K quants in a block record (`format.rs`); AVX-512 F/BW enabled by the caller.
#[inline(always)]
pub(super) unsafe fn q6_quads(
    q: *const u8,
    hv: __m512i,
    g: usize,
    hh: usize,
    e: usize,
) -> (__m512i, __m512i) {
    // SAFETY: per the contract, vector (p, g) lies in the record.
    unsafe {
        let nib = _mm512_set1_epi8(0x0f);
        let top = _mm512_set1_epi8(0x30);
        let p = 2 * hh + e;
        let v = _mm512_load_si512(q.add(p * 128 + g * 64).cast());
        // High bits of the low nibbles at bits 4e, of the high ones at 4e + 2; both move
        // to bits 4..6.
        let (lo_h, hi_h) = if e == 0 {
            (_mm512_slli_epi16::<4>(hv), _mm512_slli_epi16::<2>(hv))
        } else {
            (hv, _mm512_srli_epi16::<2>(hv))
        };
        let lo = _mm512_or_si512(_mm512_and_si512(v, nib), _mm512_and_si512(lo_h, top));
        let hi = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(v), nib),
            _mm512_and_si512(hi_h, top),
        );
        (lo, hi)
    }
}

/// Q6_K's high-bit vector `hh` of column group `g`.
///
/// # Safety
/// As for `q6_quads`.
#[inline(always)]
pub(super) unsafe fn q6_high(q: *const u8, g: usize, hh: usize) -> __m512i {
    // SAFETY: per the contract.
    unsafe { _mm512_load_si512(q.add(NIBBLES + hh * 128 + g * 64).cast()) }
}

/// Q6_K's `d · sc_h` per column of group `g`, for the block's two 16-value halves, exact.
///
/// # Safety
/// `rec` and `group` as `blocks` passes them; AVX-512 F enabled by the caller.
#[inline(always)]
pub(super) unsafe fn q6_scales(rec: *const u8, group: *const u8, g: usize) -> [__m512; 2] {
    // SAFETY: per the contract; d lies in the group's header.
    unsafe {
        let d = halfs(group.add(g * 32));
        [
            _mm512_mul_ps(d, bytes_i8(rec.add(g * 16))),
            _mm512_mul_ps(d, bytes_i8(rec.add(TILE + g * 16))),
        ]
    }
}

impl TileKernel for Q6K {
    // Column groups one after the other, so a block's live registers are 4 rows × 2 halves
    // of i32 sums and 4 × 2 f32 accumulators besides the unpacked quants. Both groups at
    // once (3 rows: 12 i32 sums live) spilled and ran at half the 256-bit kernel's rate.
    const ROWS: usize = 4;
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: as for Nib; the high-bit vectors follow the nibbles in the record, d in
        // the group's header.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            blocks(job, t, |b, rec, group| {
                let q = rec.add(SCALES);
                for g in 0..2 {
                    // isum[r][h]: the block's two 16-value halves.
                    let mut isum: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                        let c = (*t.m[r].add(b)).c32;
                        [_mm512_set1_epi32(c[0]), _mm512_set1_epi32(c[1])]
                    });
                    for hh in 0..2 {
                        let hv = q6_high(q, g, hh);
                        for e in 0..2 {
                            let p = 2 * hh + e;
                            let (lo, hi) = q6_quads(q, hv, g, hh, e);
                            for r in 0..R {
                                let xa = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 4 * p)));
                                let xb = _mm512_set1_epi32(quad(t.x[r].add(b * 32 + 16 + 4 * p)));
                                isum[r][0] = _mm512_dpbusd_epi32(isum[r][0], lo, xa);
                                isum[r][1] = _mm512_dpbusd_epi32(isum[r][1], hi, xb);
                            }
                        }
                    }
                    let dw = q6_scales(rec, group, g);
                    for r in 0..R {
                        q6_fold_row(&*t.m[r].add(b), dw, isum[r], &mut acc[r][g]);
                    }
                }
            });
            store(t, &acc);
        }
    }
}

/// The fixed float sequence at the end of block `b`: `acc = fma(isum, dw·dx, acc)`, then
/// with a min term `acc = fma(mw, sx, acc)`, or `fma(−mw, sx, acc)` when it subtracts
/// (`fnmadd`: the same bits, as negation is exact).
///
/// # Safety
/// `t.m[r]` covers block `b`; AVX-512 F and FMA enabled by the caller.
#[inline(always)]
unsafe fn fold<const R: usize>(
    t: &Tile<R>,
    b: usize,
    dw: [__m512; 2],
    mw: Option<([__m512; 2], bool)>,
    isum: &[[__m512i; 2]; R],
    acc: &mut [[__m512; 2]; R],
) {
    // SAFETY: per the contract.
    unsafe {
        for r in 0..R {
            fold_row(&*t.m[r].add(b), dw, mw, isum[r], &mut acc[r]);
        }
    }
}

/// `fold` for one row with block meta `m`.
///
/// # Safety
/// AVX-512 F and FMA enabled by the caller.
#[inline(always)]
pub(super) unsafe fn fold_row(
    m: &BlockMeta,
    dw: [__m512; 2],
    mw: Option<([__m512; 2], bool)>,
    isum: [__m512i; 2],
    acc: &mut [__m512; 2],
) {
    // SAFETY: per the contract.
    unsafe {
        let dx = _mm512_set1_ps(m.d);
        for g in 0..2 {
            let s = _mm512_mul_ps(dw[g], dx);
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g]), s, acc[g]);
            match mw {
                Some((mw, false)) => acc[g] = _mm512_fmadd_ps(mw[g], _mm512_set1_ps(m.sx), acc[g]),
                Some((mw, true)) => acc[g] = _mm512_fnmadd_ps(mw[g], _mm512_set1_ps(m.sx), acc[g]),
                None => {}
            }
        }
    }
}

/// Q6_K's float sequence for one row and column group at the end of a block: per half h,
/// `acc = fma(isum_h, dw_h·dx, acc)`.
///
/// # Safety
/// AVX-512 F and FMA enabled by the caller.
#[inline(always)]
pub(super) unsafe fn q6_fold_row(
    m: &BlockMeta,
    dw: [__m512; 2],
    isum: [__m512i; 2],
    acc: &mut __m512,
) {
    // SAFETY: per the contract.
    unsafe {
        let dx = _mm512_set1_ps(m.d);
        for h in 0..2 {
            let s = _mm512_mul_ps(dw[h], dx);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[h]), s, *acc);
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
