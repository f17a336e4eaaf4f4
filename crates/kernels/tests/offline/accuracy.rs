//! Arithmetic checks: against an f64 evaluation on the same int8 operands (only f32
//! rounding differs: ~1e-7), and against plain f32 activations (int8 activation
//! quantization error: ~5e-3).

use crate::common;

use common::*;
use specdec_kernels::{Executor, PackedMatrix, QuantizedRows};

#[test]
fn close_to_f64_on_same_operands_and_to_f32_definition() {
    let mut rng = rng(11);
    let e = Executor::new(2);
    for (n, k) in [(576, 576), (576, 1536), (96, 4096)] {
        for format in formats_for(k) {
            let rows = 8;
            let bytes = random_ggml(&mut rng, format, n, k);
            let w = PackedMatrix::from_ggml(format, &bytes, n, k).unwrap();
            let xs = random_activations(&mut rng, rows * k);
            let mut q = QuantizedRows::new();
            q.quantize(&xs, rows, k);
            let mut y = vec![0.0; rows * n];
            e.matmul(&w, &q, &mut y).unwrap();

            let kb = k / 32;
            let row_bytes = k / format.block_values() * format.block_bytes();
            let (mut worst_q, mut worst_f) = (0.0f64, 0.0f64);
            for r in 0..rows {
                for c in 0..n {
                    // (value, |value|) sums for: quantized operands, f32 activations.
                    let (mut sq, mut aq, mut sf, mut af) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
                    for b in 0..kb {
                        let wb = weight_block(format, &bytes[c * row_bytes..][..row_bytes], b);
                        let xb = &xs[r * k + b * 32..][..32];
                        let (xq, dx, _) = quantize_block(xb);
                        for j in 0..32 {
                            let wv = wb.dw[j / 16] as f64 * wb.w[j] as f64 + wb.mw as f64;
                            let tq = wv * (dx as f64 * xq[j] as f64);
                            let tf = wv * xb[j] as f64;
                            (sq, aq, sf, af) = (sq + tq, aq + tq.abs(), sf + tf, af + tf.abs());
                        }
                    }
                    let got = y[r * n + c] as f64;
                    worst_q = worst_q.max((got - sq).abs() / aq);
                    worst_f = worst_f.max((got - sf).abs() / af);
                }
            }
            eprintln!(
                "{format:?} {n}x{k}: rel err vs f64 {worst_q:.2e}, vs f32 acts {worst_f:.2e}"
            );
            assert!(worst_q < 1e-6, "{format:?} {n}x{k}: {worst_q:e}");
            assert!(worst_f < 2e-2, "{format:?} {n}x{k}: {worst_f:e}");
        }
    }
}
