//! Activation rows quantized to int8 blocks of 32 (`QuantizedRows`), with the block
//! definition in `block_quant.rs` and its vector builds in `simd/quantize.rs`.

use crate::error::KernelError;
use crate::format::{BlockMeta, QK};

/// Activations quantized per row into int8 blocks of 32, with per-block scale and sums.
/// Reusable: `quantize` keeps the allocations of earlier calls.
#[derive(Debug, Default, Clone)]
pub struct QuantizedRows {
    rows: usize,
    k: usize,
    q: Vec<i8>,
    meta: Vec<BlockMeta>,
    /// Arguments of the last `quantize` call if they were inconsistent.
    bad: Option<(usize, usize, usize)>,
}

impl QuantizedRows {
    /// An empty buffer (0 rows).
    pub fn new() -> Self {
        Self::default()
    }

    /// Quantizes `rows` rows of `k` values from `x` (row-major, `x.len() == rows * k`,
    /// `k` a multiple of 32). Never panics: on inconsistent arguments the buffer becomes
    /// empty and invalid, and the next `Executor::matmul` with it returns
    /// `KernelError::BadActivations`.
    pub fn quantize(&mut self, x: &[f32], rows: usize, k: usize) {
        if self.prepare(x, rows, k) {
            crate::simd::quantize_rows(x, &mut self.q, &mut self.meta);
        }
    }

    /// Checks the shape and sizes the buffers for it; `false` (and an invalid buffer)
    /// when the arguments are inconsistent.
    pub(crate) fn prepare(&mut self, x: &[f32], rows: usize, k: usize) -> bool {
        if !k.is_multiple_of(QK) || rows.checked_mul(k) != Some(x.len()) {
            self.bad = Some((x.len(), rows, k));
            self.rows = 0;
            self.k = 0;
            return false;
        }
        self.bad = None;
        self.rows = rows;
        self.k = k;
        self.q.resize(x.len(), 0);
        self.meta.resize(x.len() / QK, BlockMeta::default());
        true
    }

    /// The prepared buffers in parts of `rows_per` rows each (the last may be shorter):
    /// quants and block metadata, for [`QuantizedRows::quantize_on`] (in `exec.rs`, beside
    /// the threads it spreads the parts over).
    pub(crate) fn row_parts_mut(
        &mut self,
        rows_per: usize,
    ) -> impl Iterator<Item = (&mut [i8], &mut [BlockMeta])> {
        let k = self.k;
        self.q
            .chunks_mut(rows_per * k)
            .zip(self.meta.chunks_mut(rows_per * k / QK))
    }

    /// Number of rows quantized by the last successful `quantize` (0 if it failed).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row length of the last successful `quantize`.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The error the last `quantize` arguments deserve, if any.
    pub(crate) fn check(&self) -> Result<(), KernelError> {
        match self.bad {
            Some((len, rows, k)) => Err(KernelError::BadActivations { len, rows, k }),
            None => Ok(()),
        }
    }

    /// The rows as a kernel job reads them.
    pub(crate) fn view(&self) -> crate::simd::Acts<'_> {
        crate::simd::Acts {
            q: self.q(),
            meta: self.meta(),
            rows: self.rows,
            k: self.k,
        }
    }

    /// Quants, `rows × k`, row-major.
    pub(crate) fn q(&self) -> &[i8] {
        &self.q[..self.rows * self.k]
    }

    /// Block metadata, `rows × k/32`, row-major.
    pub(crate) fn meta(&self) -> &[BlockMeta] {
        &self.meta[..self.rows * self.k / QK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_quant::{quantize_block, round_i8};
    use proptest::prelude::*;

    /// The definition, written the obvious way.
    fn reference_block(x: &[f32]) -> (f32, Vec<i8>) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        (d, x.iter().map(|&v| (v * id).round() as i8).collect())
    }

    proptest! {
        #[test]
        fn round_matches_std(bits in any::<u32>()) {
            let v = f32::from_bits(bits);
            prop_assert_eq!(round_i8(v), v.round() as i8);
        }

        #[test]
        fn round_matches_std_near_halves(i in -140i32..140, e in -3i32..4) {
            let v = i as f32 + 0.5 + e as f32 * f32::EPSILON * 64.0;
            prop_assert_eq!(round_i8(v), v.round() as i8);
        }

        #[test]
        fn quantizer_matches_definition(
            rows in 1usize..4,
            kb in 1usize..4,
            scale in prop_oneof![Just(0.0f32), 1e-30f32..1e-20, 1e-3f32..1e3],
            seed in any::<u64>(),
        ) {
            let k = kb * QK;
            let mut s = seed | 1;
            let x: Vec<f32> = (0..rows * k).map(|_| {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            }).collect();
            let mut qr = QuantizedRows::new();
            qr.quantize(&x, rows, k);
            prop_assert_eq!(qr.rows(), rows);
            for (bi, xb) in x.chunks_exact(QK).enumerate() {
                let (d, q) = reference_block(xb);
                let got = &qr.q()[bi * QK..][..QK];
                prop_assert_eq!(got, &q[..]);
                let m = qr.meta()[bi];
                let sum: i32 = q.iter().map(|&v| v as i32).sum();
                prop_assert_eq!(m.d.to_bits(), d.to_bits());
                prop_assert_eq!(m.sx.to_bits(), (d * sum as f32).to_bits());
                prop_assert_eq!((m.c8, m.c128), (-8 * sum, -128 * sum));
                let half: i32 = q[..16].iter().map(|&v| v as i32).sum();
                prop_assert_eq!(m.c32, [-32 * half, -32 * (sum - half)]);
                prop_assert!(q.iter().all(|&v| v != -128));
            }
        }
    }

    #[test]
    fn round_matches_std_around_every_half() {
        for h in -300..=300 {
            let mut v = h as f32 / 2.0;
            for _ in 0..8 {
                v = v.next_down();
            }
            for _ in 0..16 {
                assert_eq!(round_i8(v), v.round() as i8, "{v}");
                v = v.next_up();
            }
        }
    }

    #[test]
    fn bad_arguments_make_invalid_buffer() {
        let mut qr = QuantizedRows::new();
        qr.quantize(&[0.0; 64], 2, 32);
        assert!(qr.check().is_ok());
        qr.quantize(&[0.0; 64], 1, 48);
        assert_eq!(qr.rows(), 0);
        assert!(qr.check().is_err());
        qr.quantize(&[0.0; 64], 3, 32);
        assert!(qr.check().is_err());
        qr.quantize(&[0.0; 96], 3, 32);
        assert!(qr.check().is_ok());
        assert_eq!(qr.q().len(), 96);
    }

    #[test]
    fn nan_and_inf_do_not_panic() {
        let mut x = [1.0f32; 32];
        x[3] = f32::NAN;
        x[4] = f32::INFINITY;
        let mut q = [0i8; 32];
        let (d, _, _) = quantize_block(&x, &mut q);
        assert!(d.is_infinite());
        assert!(q.iter().all(|&v| v == 0));
    }
}
