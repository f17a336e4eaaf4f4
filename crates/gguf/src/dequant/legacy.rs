//! The 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
//!
//! Low nibbles hold elements 0..16 of a block and high nibbles elements 16..32.

use super::{f16_at, sub};

/// `{ f16 d; u8 qs[16] }`: `y = (q - 8) * d`.
pub(super) fn q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qs: &[u8; 16] = sub(b, 2);
    for (j, &q) in qs.iter().enumerate() {
        y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `{ f16 d; f16 m; u8 qs[16] }`: `y = q * d + m`.
pub(super) fn q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs: &[u8; 16] = sub(b, 4);
    for (j, &q) in qs.iter().enumerate() {
        y[j] = (q & 0x0F) as f32 * d + m;
        y[j + 16] = (q >> 4) as f32 * d + m;
    }
}

/// Fifth bits of a 5-bit block: bit `j` of `qh` belongs to element `j`, returned as 0 or 0x10
/// for elements `j` and `j + 16`.
#[inline(always)]
fn high_bits(qh: u32, j: usize) -> (u8, u8) {
    let h0 = ((qh >> j) << 4) & 0x10;
    let h1 = (qh >> (j + 12)) & 0x10;
    (h0 as u8, h1 as u8)
}

/// `{ f16 d; u8 qh[4]; u8 qs[16] }`: `y = (q - 16) * d`.
pub(super) fn q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes(*sub(b, 2));
    let qs: &[u8; 16] = sub(b, 6);
    for (j, &q) in qs.iter().enumerate() {
        let (h0, h1) = high_bits(qh, j);
        y[j] = (((q & 0x0F) | h0) as i32 - 16) as f32 * d;
        y[j + 16] = (((q >> 4) | h1) as i32 - 16) as f32 * d;
    }
}

/// `{ f16 d; f16 m; u8 qh[4]; u8 qs[16] }`: `y = q * d + m`.
pub(super) fn q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes(*sub(b, 4));
    let qs: &[u8; 16] = sub(b, 8);
    for (j, &q) in qs.iter().enumerate() {
        let (h0, h1) = high_bits(qh, j);
        y[j] = ((q & 0x0F) | h0) as f32 * d + m;
        y[j + 16] = ((q >> 4) | h1) as f32 * d + m;
    }
}

/// `{ f16 d; i8 qs[32] }`: `y = q * d`.
pub(super) fn q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qs: &[u8; 32] = sub(b, 2);
    for (o, &q) in y.iter_mut().zip(qs) {
        *o = q as i8 as f32 * d;
    }
}
