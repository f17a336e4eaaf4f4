//! Portable kernel: the definition written plainly, reading the same packed layout.
//! It is the reference every SIMD path must match bit for bit.

use super::{drive, Job, Tile, TileKernel};
use crate::pack::{WeightFormat, SCALES, TILE};
use crate::quant::BlockMeta;
use crate::quant::QK;

/// # Safety
/// The contract of [`drive`].
pub(super) unsafe fn run(job: &Job, tiles: std::ops::Range<usize>) {
    // SAFETY: forwarded.
    unsafe { drive::<Scalar>(job, tiles) }
}

struct Scalar;

impl TileKernel for Scalar {
    #[inline(always)]
    unsafe fn tile<const R: usize>(job: &Job, t: &Tile<R>) {
        // SAFETY: `drive` built `t` from a live job: the tile spans kb records, each row
        // has k quants and kb metadata entries.
        let w = unsafe { std::slice::from_raw_parts(t.w, job.kb * job.rec) };
        for r in 0..R {
            let (x, m) = unsafe {
                (
                    std::slice::from_raw_parts(t.x[r], job.k),
                    std::slice::from_raw_parts(t.m[r], job.kb),
                )
            };
            let acc = row(job.format, job.rec, w, x, m);
            // SAFETY: the first `t.valid` columns of this row belong to this tile, and
            // only the thread owning the tile writes them.
            unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), t.out[r], t.valid) };
        }
    }
}

/// One row of activations × one tile: the 32 results.
fn row(format: WeightFormat, rec: usize, w: &[u8], x: &[i8], meta: &[BlockMeta]) -> [f32; TILE] {
    let qo = format.quant_offset();
    let mut acc = [0.0f32; TILE];
    for (b, (rec, m)) in w.chunks_exact(rec).zip(meta).enumerate() {
        let xb = &x[b * QK..][..QK];
        for (j, acc) in acc.iter_mut().enumerate() {
            let (g, c) = (j / 16, j % 16);
            let quant = |p: usize, i: usize| rec[qo + (2 * p + g) * 64 + 4 * c + i] as i32;
            let isum: i32 = match format {
                WeightFormat::Q8_0 => {
                    let raw: i32 = (0..QK)
                        .map(|kk| quant(kk / 4, kk % 4) * xb[kk] as i32)
                        .sum();
                    raw + m.c128
                }
                _ => {
                    let raw: i32 = (0..16)
                        .map(|kk| {
                            let v = quant(kk / 4, kk % 4);
                            (v & 15) * xb[kk] as i32 + (v >> 4) * xb[kk + 16] as i32
                        })
                        .sum();
                    if format == WeightFormat::Q4_0 {
                        raw + m.c8
                    } else {
                        raw
                    }
                }
            };
            let dw = f16_at(rec, 2 * j);
            *acc = (isum as f32).mul_add(dw * m.d, *acc);
            if format == WeightFormat::Q4_1 {
                *acc = f16_at(rec, SCALES + 2 * j).mul_add(m.sx, *acc);
            }
        }
    }
    acc
}

/// The record's f16 at `at`, widened (exactly).
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_ne_bytes([b[at], b[at + 1]]).to_f32()
}
