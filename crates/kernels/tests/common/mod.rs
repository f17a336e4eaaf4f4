//! Shared test helpers: random GGML weights, and the result definition computed straight
//! from GGML bytes (independent of the packed layout and of the kernels).
#![allow(dead_code)]

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use specdec_kernels::WeightFormat;

pub const FORMATS: [WeightFormat; 3] = [WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q8_0];

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// n × k/32 GGML blocks with realistic scales (d ≈ 1e-3..2e-2, Q4_1 m ≈ −8d).
pub fn random_ggml(rng: &mut StdRng, format: WeightFormat, n: usize, k: usize) -> Vec<u8> {
    let bs = format.block_bytes();
    let mut bytes = vec![0u8; n * k / 32 * bs];
    for blk in bytes.chunks_exact_mut(bs) {
        let d: f32 = rng.gen_range(1e-3..2e-2);
        blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let qs = match format {
            WeightFormat::Q4_1 => {
                let m = -d * 8.0 * rng.gen_range(0.8f32..1.2);
                blk[2..4].copy_from_slice(&f16::from_f32(m).to_le_bytes());
                &mut blk[4..]
            }
            _ => &mut blk[2..],
        };
        rng.fill(qs);
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

/// Block of a weight row: (signed integer weights, d, m).
pub fn weight_block(format: WeightFormat, blk: &[u8]) -> ([i32; 32], f32, f32) {
    let mut w = [0i32; 32];
    let d = f16_at(blk, 0);
    match format {
        WeightFormat::Q8_0 => {
            for (o, &b) in w.iter_mut().zip(&blk[2..34]) {
                *o = b as i8 as i32;
            }
            (w, d, 0.0)
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
            (w, d, m)
        }
    }
}

/// The exact result definition from GGML bytes and f32 activations.
pub fn reference(format: WeightFormat, bytes: &[u8], n: usize, k: usize, x: &[f32]) -> Vec<f32> {
    let (kb, bs) = (k / 32, format.block_bytes());
    let xq: Vec<_> = x.chunks_exact(32).map(quantize_block).collect();
    let rows = x.len() / k;
    let mut out = vec![0.0f32; rows * n];
    for r in 0..rows {
        for c in 0..n {
            let mut acc = 0.0f32;
            for b in 0..kb {
                let (w, dw, mw) = weight_block(format, &bytes[(c * kb + b) * bs..][..bs]);
                let (q, dx, sum) = &xq[r * kb + b];
                let isum: i32 = w.iter().zip(q).map(|(&w, &q)| w * q as i32).sum();
                acc = (isum as f32).mul_add(dw * dx, acc);
                if format == WeightFormat::Q4_1 {
                    acc = mw.mul_add(dx * *sum as f32, acc);
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
