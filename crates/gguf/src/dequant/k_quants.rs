//! The 256-element "K" super-block formats (Q2_K .. Q6_K).
//!
//! Each kernel walks the super-block in ggml's order; indices are written out instead of
//! advancing pointers, which keeps every access inside the fixed-size block arrays.

use super::{f16_at, sub};

/// `{ u8 scales[16]; u8 qs[64]; f16 d; f16 dmin }`: 16 sub-blocks of 16, each with a 4-bit
/// scale (low nibble) and 4-bit min (high nibble); `y = d*sc * q - dmin*m` with 2-bit `q`.
pub(super) fn q2_k(b: &[u8; 84], y: &mut [f32; 256]) {
    let scales: &[u8; 16] = sub(b, 0);
    let d = f16_at(b, 80);
    let min = f16_at(b, 82);
    for half in 0..2 {
        let q: &[u8; 32] = sub(b, 16 + 32 * half);
        for j in 0..4 {
            let shift = 2 * j;
            for part in 0..2 {
                let sc = scales[half * 8 + j * 2 + part];
                let dl = d * (sc & 0x0F) as f32;
                let ml = min * (sc >> 4) as f32;
                let base = half * 128 + j * 32 + part * 16;
                for l in 0..16 {
                    y[base + l] = dl * ((q[part * 16 + l] >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// Unpacks Q3_K's twelve bytes into sixteen 6-bit scales: the low nibbles come from bytes
/// 0..8 (low nibble for scales 0..8, high for 8..16), the top two bits from bytes 8..12.
fn q3_k_scales(s: &[u8; 12]) -> [i32; 16] {
    let mut out = [0i32; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low | (high << 4)) as i32;
    }
    out
}

/// `{ u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d }`: 3-bit values (2 low bits in `qs`, the
/// third in `hmask`, *set* meaning no -4 offset) with signed 6-bit scales biased by 32.
pub(super) fn q3_k(b: &[u8; 110], y: &mut [f32; 256]) {
    let hmask: &[u8; 32] = sub(b, 0);
    let scales = q3_k_scales(sub(b, 96));
    let d_all = f16_at(b, 108);
    for half in 0..2 {
        let q: &[u8; 32] = sub(b, 32 + 32 * half);
        for j in 0..4 {
            let shift = 2 * j;
            let m = 1u8 << (half * 4 + j);
            for part in 0..2 {
                let dl = d_all * (scales[half * 8 + j * 2 + part] - 32) as f32;
                let base = half * 128 + j * 32 + part * 16;
                for l in 0..16 {
                    let i = part * 16 + l;
                    let offset = if hmask[i] & m != 0 { 0 } else { 4 };
                    let v = ((q[i] >> shift) & 3) as i32 - offset;
                    y[base + l] = dl * v as f32;
                }
            }
        }
    }
}

/// ggml's `get_scale_min_k4`: scale and min of sub-block `j` (0..8) from the 12 packed bytes
/// of Q4_K/Q5_K (6 bits each; sub-blocks 4..8 borrow their top bits from bytes 0..8).
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }`: 8 sub-blocks of 32 with 6-bit scale and
/// min; each 32 bytes of `qs` hold two sub-blocks (low nibbles, then high nibbles).
pub(super) fn q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales: &[u8; 12] = sub(b, 4);
    for n in 0..4 {
        let q: &[u8; 32] = sub(b, 16 + 32 * n);
        let (sc1, m1) = scale_min_k4(2 * n, scales);
        let (sc2, m2) = scale_min_k4(2 * n + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let base = 64 * n;
        for l in 0..32 {
            y[base + l] = d1 * (q[l] & 0x0F) as f32 - m1;
            y[base + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }`: Q4_K plus a fifth bit per
/// value; sub-block pair `n` takes bits `2n` and `2n + 1` of each `qh` byte.
pub(super) fn q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales: &[u8; 12] = sub(b, 4);
    let qh: &[u8; 32] = sub(b, 16);
    for n in 0..4 {
        let ql: &[u8; 32] = sub(b, 48 + 32 * n);
        let (u1, u2) = (1u8 << (2 * n), 2u8 << (2 * n));
        let (sc1, m1) = scale_min_k4(2 * n, scales);
        let (sc2, m2) = scale_min_k4(2 * n + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let base = 64 * n;
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[base + l] = d1 * ((ql[l] & 0x0F) + h1) as f32 - m1;
            y[base + 32 + l] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }`: 6-bit values biased by 32 with signed
/// 8-bit scales per 16 values; `y = (d * sc) * q`, multiplied in that order as ggml does.
pub(super) fn q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let d = f16_at(b, 208);
    for n in 0..2 {
        let ql: &[u8; 64] = sub(b, 64 * n);
        let qh: &[u8; 32] = sub(b, 128 + 32 * n);
        let sc: &[u8; 8] = sub(b, 192 + 8 * n);
        let base = 128 * n;
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[base + l] = d * sc[is] as i8 as f32 * q1 as f32;
            y[base + l + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
            y[base + l + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
            y[base + l + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
        }
    }
}
