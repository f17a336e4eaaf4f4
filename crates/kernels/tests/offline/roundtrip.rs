//! Packing round trip: the kernels on packed weights equal the definition evaluated
//! directly on the GGML bytes, bit for bit, for random shapes, bytes and every ISA.

use crate::common;

use common::*;
use half::f16;
use proptest::prelude::*;
use specdec_kernels::{Executor, Isa, PackedMatrix, QuantizedRows, WeightFormat};

fn format() -> impl Strategy<Value = WeightFormat> {
    proptest::sample::select(FORMATS.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn packed_kernels_equal_definition_on_ggml_bytes(
        format in format(),
        n in 1usize..80,
        kb in 1usize..4,
        rows in 1usize..10,
        seed in any::<u64>(),
    ) {
        let k = kb * format.block_values();
        let mut rng = rng(seed);
        // Arbitrary quant bytes (Q8_0 includes −128), scales kept finite, some negative.
        let mut bytes = random_ggml(&mut rng, format, n, k);
        let d = format.f16_offsets()[0];
        for blk in bytes.chunks_exact_mut(format.block_bytes()) {
            if blk[d] & 1 == 0 {
                blk[d + 1] = f16::from_f32(-1.5).to_le_bytes()[1];
            }
        }
        let xs = random_activations(&mut rng, rows * k);
        let want = bits(&reference(format, &bytes, n, k, &xs));
        let w = PackedMatrix::from_ggml(format, &bytes, n, k).unwrap();
        prop_assert_eq!((w.n(), w.k()), (n, k));
        prop_assert_eq!(w.formats().collect::<Vec<_>>(), vec![(format, n)]);
        let mut q = QuantizedRows::new();
        q.quantize(&xs, rows, k);
        for isa in Isa::available() {
            let e = Executor::with_isa(2, isa).unwrap();
            let mut y = vec![0.0; rows * n];
            e.matmul(&w, &q, &mut y).unwrap();
            prop_assert!(bits(&y) == want, "{} differs", isa);
        }
    }

    #[test]
    fn from_f32_is_ggml_q8_0(n in 1usize..40, kb in 1usize..4, seed in any::<u64>()) {
        let k = kb * 32;
        let mut rng = rng(seed);
        let wf = random_activations(&mut rng, n * k);
        // ggml's quantize_row_q8_0_ref: d = amax/127 (f16), q = round(x · (1/d)).
        let mut bytes = Vec::new();
        for blk in wf.chunks_exact(32) {
            let (q, d, _) = quantize_block(blk);
            bytes.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            bytes.extend(q.iter().map(|&v| v as u8));
        }
        let a = PackedMatrix::from_f32(&wf, n, k).unwrap();
        let b = PackedMatrix::from_ggml(WeightFormat::Q8_0, &bytes, n, k).unwrap();
        prop_assert_eq!(a.formats().collect::<Vec<_>>(), vec![(WeightFormat::Q8_0, n)]);
        let xs = random_activations(&mut rng, 3 * k);
        let mut q = QuantizedRows::new();
        q.quantize(&xs, 3, k);
        let e = Executor::new(2);
        let (mut ya, mut yb) = (vec![0.0; 3 * n], vec![0.0; 3 * n]);
        e.matmul(&a, &q, &mut ya).unwrap();
        e.matmul(&b, &q, &mut yb).unwrap();
        prop_assert_eq!(bits(&ya), bits(&yb));
        prop_assert_eq!(bits(&ya), bits(&reference(WeightFormat::Q8_0, &bytes, n, k, &xs)));
    }
}

/// A reused activation buffer shrinking and growing gives the same results as a fresh one.
#[test]
fn quantized_rows_reuse() {
    let mut rng = rng(5);
    let e = Executor::new(2);
    let mut reused = QuantizedRows::new();
    for (rows, k) in [(9, 64), (2, 64), (1, 160), (12, 32), (3, 64)] {
        let bytes = random_ggml(&mut rng, WeightFormat::Q4_1, 40, k);
        let w = PackedMatrix::from_ggml(WeightFormat::Q4_1, &bytes, 40, k).unwrap();
        let xs = random_activations(&mut rng, rows * k);
        reused.quantize(&xs, rows, k);
        assert_eq!((reused.rows(), reused.k()), (rows, k));
        let mut y = vec![0.0; rows * 40];
        e.matmul(&w, &reused, &mut y).unwrap();
        assert_eq!(
            bits(&y),
            bits(&reference(WeightFormat::Q4_1, &bytes, 40, k, &xs))
        );
    }
}

/// A matrix stacked from parts of different formats (a Q4_K_M file's q, k and v) gives
/// each part's columns exactly as that part packed alone does, on every ISA, the ragged
/// last part included.
#[test]
fn stacked_formats_equal_their_parts() {
    let mut rng = rng(9);
    let k = 512;
    let shapes = [
        (WeightFormat::Q4_K, 64),
        (WeightFormat::Q4_K, 32),
        (WeightFormat::Q6_K, 96),
        (WeightFormat::Q5_K, 32),
        (WeightFormat::Q8_0, 32),
        (WeightFormat::Q5_0, 45),
    ];
    let bytes: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(f, n)| random_ggml(&mut rng, f, n, k))
        .collect();
    let parts: Vec<_> = shapes
        .iter()
        .zip(&bytes)
        .map(|(&(f, n), b)| (f, &b[..], n))
        .collect();
    let w = PackedMatrix::stack(&parts, k).unwrap();
    let n: usize = shapes.iter().map(|s| s.1).sum();
    assert_eq!(w.n(), n);
    let runs: Vec<_> = w.formats().collect();
    assert_eq!(
        runs,
        [
            (WeightFormat::Q4_K, 96),
            (WeightFormat::Q6_K, 96),
            (WeightFormat::Q5_K, 32),
            (WeightFormat::Q8_0, 32),
            (WeightFormat::Q5_0, 45)
        ]
    );
    for rows in [1, 5, 16] {
        let xs = random_activations(&mut rng, rows * k);
        let mut want = vec![0u32; rows * n];
        let mut col0 = 0;
        for &(f, b, pn) in &parts {
            let part = bits(&reference(f, b, pn, k, &xs));
            for r in 0..rows {
                want[r * n + col0..r * n + col0 + pn].copy_from_slice(&part[r * pn..][..pn]);
            }
            col0 += pn;
        }
        let mut q = QuantizedRows::new();
        q.quantize(&xs, rows, k);
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                let e = Executor::with_isa(threads, isa).unwrap();
                let mut y = vec![0.0; rows * n];
                e.matmul(&w, &q, &mut y).unwrap();
                assert!(bits(&y) == want, "{isa} threads={threads} rows={rows}");
                let tiles = 2..7;
                let mut block = vec![0.0; rows * 5 * 32];
                e.matmul_block(&w, &q, tiles, &mut block).unwrap();
                for r in 0..rows {
                    assert!(bits(&block[r * 160..][..160]) == want[r * n + 64..][..160]);
                }
            }
        }
    }
}
