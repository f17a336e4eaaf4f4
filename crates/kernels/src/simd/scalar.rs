//! Portable kernel: the definition written plainly, reading the same packed layout.
//! It is the reference every SIMD path must match bit for bit.

use super::{drive, Job, Tile, TileKernel};
use crate::format::{quant_at, BlockMeta, WeightFormat, QK, SCALES, TILE};

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
            // SAFETY: `tile_at` points row r's starts at a row below `job.rows` of the
            // live activations, which holds k quants and kb metadata entries per row.
            let (x, m) = unsafe {
                (
                    std::slice::from_raw_parts(t.x[r], job.k),
                    std::slice::from_raw_parts(t.m[r], job.kb),
                )
            };
            let acc = row(job.format, w, x, m);
            // SAFETY: the first `t.valid` columns of this row belong to this tile, and
            // only the thread owning the tile writes them.
            unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), t.out[r], t.valid) };
        }
    }
}

/// One row of activations × one tile: the 32 results.
fn row(format: WeightFormat, tile: &[u8], x: &[i8], meta: &[BlockMeta]) -> [f32; TILE] {
    let mut acc = [0.0f32; TILE];
    for (b, m) in meta.iter().enumerate() {
        let rec = &tile[format.block_offset(b)..][..format.block_record_bytes()];
        let group = &tile[format.group_offset(b)..];
        let xb = &x[b * QK..][..QK];
        for (j, acc) in acc.iter_mut().enumerate() {
            // Exact integer dot products of the unsigned quants, per 16-value half.
            let half = |h: usize| -> i32 {
                (16 * h..16 * h + 16)
                    .map(|kk| quant_at(format, rec, j, kk) as i32 * xb[kk] as i32)
                    .sum()
            };
            let raw = half(0) + half(1);
            let dx = m.d;
            match format {
                WeightFormat::Q8_0 | WeightFormat::Q4_0 | WeightFormat::Q5_0 => {
                    let offset = match format {
                        WeightFormat::Q8_0 => m.c128,
                        WeightFormat::Q4_0 => m.c8,
                        _ => 2 * m.c8,
                    };
                    *acc = ((raw + offset) as f32).mul_add(f16_at(rec, 2 * j) * dx, *acc);
                }
                WeightFormat::Q4_1 => {
                    *acc = (raw as f32).mul_add(f16_at(rec, 2 * j) * dx, *acc);
                    *acc = f16_at(rec, SCALES + 2 * j).mul_add(m.sx, *acc);
                }
                WeightFormat::Q4_K | WeightFormat::Q5_K => {
                    let dw = f16_at(group, 2 * j) * rec[j] as f32;
                    let mw = f16_at(group, SCALES + 2 * j) * rec[TILE + j] as f32;
                    *acc = (raw as f32).mul_add(dw * dx, *acc);
                    *acc = (-mw).mul_add(m.sx, *acc);
                }
                WeightFormat::Q6_K => {
                    let d = f16_at(group, 2 * j);
                    for h in 0..2 {
                        let dw = d * rec[TILE * h + j] as i8 as f32;
                        *acc = ((half(h) + m.c32[h]) as f32).mul_add(dw * dx, *acc);
                    }
                }
            }
        }
    }
    acc
}

/// The record's f16 at `at`, widened (exactly).
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_ne_bytes([b[at], b[at + 1]]).to_f32()
}
