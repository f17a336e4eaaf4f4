//! Shared test helpers: random GGML weights, and the result definition computed straight
//! from GGML bytes (independent of the packed layout and of the kernels).
#![allow(dead_code)]

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use specdec_kernels::WeightFormat;

pub const FORMATS: [WeightFormat; 7] = WeightFormat::ALL;

/// The formats whose blocks fit an inner dimension of `k`.
pub fn formats_for(k: usize) -> impl Iterator<Item = WeightFormat> {
    FORMATS
        .into_iter()
        .filter(move |f| k.is_multiple_of(f.block_values()))
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// n × k GGML weights with random quants and realistic scales (d ≈ 1e-3..2e-2 for the
/// block formats, a tenth of it for the K formats whose integer scales multiply it;
/// Q4_1's min ≈ −8d, Q4_K's and Q5_K's dmin ≈ d).
pub fn random_ggml(rng: &mut StdRng, format: WeightFormat, n: usize, k: usize) -> Vec<u8> {
    let bs = format.block_bytes();
    let mut bytes = vec![0u8; n * k / format.block_values() * bs];
    for blk in bytes.chunks_exact_mut(bs) {
        rng.fill(&mut blk[..]);
        let mut d: f32 = rng.gen_range(1e-3..2e-2);
        if format.block_values() == 256 {
            d /= 10.0;
        }
        let offsets = format.f16_offsets();
        blk[offsets[0]..offsets[0] + 2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        if let Some(&at) = offsets.get(1) {
            let m = match format {
                WeightFormat::Q4_1 => -d * 8.0 * rng.gen_range(0.8f32..1.2),
                _ => d * rng.gen_range(0.5f32..1.5),
            };
            blk[at..at + 2].copy_from_slice(&f16::from_f32(m).to_le_bytes());
        }
    }
    bytes
}

/// Activations: roughly normal values with occasional outliers, as hidden states have.
pub fn random_activations(rng: &mut StdRng, len: usize) -> Vec<f32> {
    (0..len)
        .map(|_| {
            let v: f32 = (0..4).map(|_| rng.gen_range(-1.0f32..1.0)).sum();
            if rng.gen_ratio(1, 50) {
                v * 20.0
            } else {
                v
            }
        })
        .collect()
}

/// One activation block quantized by the definition: (q, d, Σq).
pub fn quantize_block(x: &[f32]) -> (Vec<i8>, f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q: Vec<i8> = x.iter().map(|&v| (v * id).round() as i8).collect();
    let s = q.iter().map(|&v| v as i32).sum();
    (q, d, s)
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// One block of 32 weights, decoded from GGML bytes by ggml's definitions: weight j is
/// `dw[j / 16] · w[j] + mw`.
pub struct Decoded {
    /// Signed integer weights (offsets such as Q4_0's −8 applied).
    pub w: [i32; 32],
    /// Scale of each 16-value half (equal but for Q6_K).
    pub dw: [f32; 2],
    /// The additive min term (Q4_1's m, Q4_K's and Q5_K's −dmin·m), 0 for the others.
    pub mw: f32,
}

/// ggml's `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Block `b` (of 32 values) of a weight row's GGML bytes.
pub fn weight_block(format: WeightFormat, row: &[u8], b: usize) -> Decoded {
    let (per, bs) = (format.block_values() / 32, format.block_bytes());
    let blk = &row[(b / per) * bs..][..bs];
    let sub = b % per;
    let mut w = [0i32; 32];
    let d = f16_at(blk, 0);
    let (dw, mw) = match format {
        WeightFormat::Q8_0 => {
            for (o, &v) in w.iter_mut().zip(&blk[2..34]) {
                *o = v as i8 as i32;
            }
            ([d; 2], 0.0)
        }
        WeightFormat::Q4_0 | WeightFormat::Q4_1 => {
            let (qs, m, off) = if format == WeightFormat::Q4_0 {
                (&blk[2..18], 0.0, 8)
            } else {
                (&blk[4..20], f16_at(blk, 2), 0)
            };
            for j in 0..16 {
                w[j] = (qs[j] & 15) as i32 - off;
                w[j + 16] = (qs[j] >> 4) as i32 - off;
            }
            ([d; 2], m)
        }
        WeightFormat::Q5_0 => {
            let qh = u32::from_le_bytes(blk[2..6].try_into().unwrap());
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                w[j] = ((blk[6 + j] & 15) as u32 | h0) as i32 - 16;
                w[j + 16] = ((blk[6 + j] >> 4) as u32 | h1) as i32 - 16;
            }
            ([d; 2], 0.0)
        }
        WeightFormat::Q4_K => {
            let dmin = f16_at(blk, 2);
            let (sc, m) = scale_min_k4(sub, &blk[4..16]);
            let qs = &blk[16 + 32 * (sub / 2)..][..32];
            for j in 0..32 {
                w[j] = if sub.is_multiple_of(2) {
                    qs[j] & 15
                } else {
                    qs[j] >> 4
                } as i32;
            }
            ([d * sc as f32; 2], -(dmin * m as f32))
        }
        WeightFormat::Q5_K => {
            // ggml's dequantize_row_q5_K, for values 32·sub .. 32·sub + 32: chunk j of 64
            // takes its low and high nibbles from qs[32j..], its fifth bits from qh[l] under
            // the masks u1 = 1 << 2j and u2 = 2 << 2j.
            let dmin = f16_at(blk, 2);
            let (sc, m) = scale_min_k4(sub, &blk[4..16]);
            let (qh, ql) = (&blk[16..48], &blk[48 + 32 * (sub / 2)..]);
            let (u1, u2) = (1u8 << (2 * (sub / 2)), 2u8 << (2 * (sub / 2)));
            for l in 0..32 {
                let (low, mask) = if sub.is_multiple_of(2) {
                    (ql[l] & 0xF, u1)
                } else {
                    (ql[l] >> 4, u2)
                };
                w[l] = low as i32 + if qh[l] & mask != 0 { 16 } else { 0 };
            }
            ([d * sc as f32; 2], -(dmin * m as f32))
        }
        WeightFormat::Q6_K => {
            // ggml's dequantize_row_q6_K, for values 32·sub .. 32·sub + 32.
            let d = f16_at(blk, 208);
            let mut all = [0i32; 256];
            for n in 0..2 {
                let (ql, qh) = (&blk[64 * n..], &blk[128 + 32 * n..]);
                for l in 0..32 {
                    let base = 128 * n;
                    all[base + l] = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i32 - 32;
                    all[base + l + 32] =
                        ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    all[base + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    all[base + l + 96] =
                        ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                }
            }
            w.copy_from_slice(&all[32 * sub..32 * sub + 32]);
            let sc = |i: usize| blk[192 + i] as i8 as f32;
            ([d * sc(2 * sub), d * sc(2 * sub + 1)], 0.0)
        }
    };
    Decoded { w, dw, mw }
}

/// The exact result definition from GGML bytes and f32 activations.
pub fn reference(format: WeightFormat, bytes: &[u8], n: usize, k: usize, x: &[f32]) -> Vec<f32> {
    let kb = k / 32;
    let row_bytes = k / format.block_values() * format.block_bytes();
    let xq: Vec<_> = x.chunks_exact(32).map(quantize_block).collect();
    let rows = x.len() / k;
    let mut out = vec![0.0f32; rows * n];
    for r in 0..rows {
        for c in 0..n {
            let mut acc = 0.0f32;
            for b in 0..kb {
                let wb = weight_block(format, &bytes[c * row_bytes..][..row_bytes], b);
                let (q, dx, sum) = &xq[r * kb + b];
                let dot =
                    |h: std::ops::Range<usize>| -> i32 { h.map(|j| wb.w[j] * q[j] as i32).sum() };
                if format == WeightFormat::Q6_K {
                    for h in 0..2 {
                        let isum = dot(16 * h..16 * h + 16);
                        acc = (isum as f32).mul_add(wb.dw[h] * dx, acc);
                    }
                } else {
                    acc = (dot(0..32) as f32).mul_add(wb.dw[0] * dx, acc);
                }
                if matches!(
                    format,
                    WeightFormat::Q4_1 | WeightFormat::Q4_K | WeightFormat::Q5_K
                ) {
                    acc = wb.mw.mul_add(dx * *sum as f32, acc);
                }
            }
            out[r * n + c] = acc;
        }
    }
    out
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}
