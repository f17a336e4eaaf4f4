//! Bit-exact batch invariance: a row's output never depends on the other rows in the
//! batch, the thread count or the instruction set.

use crate::common;

use common::*;
use specdec_kernels::{Executor, Isa, PackedMatrix, QuantizedRows, WeightFormat};

const POOL_ROWS: usize = 72;

fn run(e: &Executor, w: &PackedMatrix, x: &[f32], rows: usize) -> Vec<f32> {
    let mut q = QuantizedRows::new();
    q.quantize(x, rows, w.k());
    let mut out = vec![f32::NAN; rows * w.n()];
    e.matmul(w, &q, &mut out).unwrap();
    out
}

fn check_shape(n: usize, k: usize, seed: u64) {
    let mut rng = rng(seed);
    let fastest = Executor::new(2);
    let scalar = Executor::with_isa(1, Isa::Scalar).unwrap();
    for format in formats_for(k) {
        let bytes = random_ggml(&mut rng, format, n, k);
        let w = PackedMatrix::from_ggml(format, &bytes, n, k).unwrap();
        let xs = random_activations(&mut rng, POOL_ROWS * k);
        let want = bits(&run(&scalar, &w, &xs, POOL_ROWS));
        let row = |r: usize| &want[r * n..(r + 1) * n];

        // Every ISA and thread count on the whole batch.
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                if isa == Isa::Scalar && threads == 1 {
                    continue;
                }
                let e = Executor::with_isa(threads, isa).unwrap();
                let got = bits(&run(&e, &w, &xs, POOL_ROWS));
                assert!(got == want, "{format:?} {n}x{k} {isa} threads={threads}");
            }
        }

        // Batches of every size 1..=64 at shifting offsets, against rows computed alone.
        for r in 0..POOL_ROWS {
            let got = bits(&run(&fastest, &w, &xs[r * k..(r + 1) * k], 1));
            assert!(got == row(r), "{format:?} {n}x{k} row {r} alone");
        }
        for m in 1..=64 {
            let s = (m * 5) % (POOL_ROWS - m + 1);
            let got = bits(&run(&fastest, &w, &xs[s * k..(s + m) * k], m));
            for i in 0..m {
                let g = &got[i * n..(i + 1) * n];
                assert!(g == row(s + i), "{format:?} {n}x{k} batch {m} row {i}");
            }
        }
    }
}

#[test]
fn invariant_576x576() {
    check_shape(576, 576, 1);
}

#[test]
fn invariant_1536x576() {
    check_shape(1536, 576, 2);
}

#[test]
fn invariant_576x1536() {
    check_shape(576, 1536, 3);
}

#[test]
fn invariant_3072x576() {
    check_shape(3072, 576, 4);
}

/// n not a multiple of the 32-column tile: padding columns are never written.
#[test]
fn invariant_ragged_n() {
    for n in [1, 5, 17, 31, 33, 100] {
        check_shape(n, 64, 100 + n as u64);
        check_shape(n, 256, 200 + n as u64);
    }
}

/// Shapes of the K-quant files' matrices (k a multiple of 256).
#[test]
fn invariant_288x1536() {
    check_shape(288, 1536, 5);
}

#[test]
fn invariant_1536x512() {
    check_shape(1536, 512, 6);
}

#[test]
fn ragged_n_leaves_no_padding_writes() {
    let mut rng = rng(7);
    for isa in Isa::available() {
        let e = Executor::with_isa(2, isa).unwrap();
        let (n, k, rows) = (37, 96, 5);
        let bytes = random_ggml(&mut rng, WeightFormat::Q8_0, n, k);
        let w = PackedMatrix::from_ggml(WeightFormat::Q8_0, &bytes, n, k).unwrap();
        let xs = random_activations(&mut rng, rows * k);
        let mut q = QuantizedRows::new();
        q.quantize(&xs, rows, k);
        // The output slice sits inside a larger buffer whose guard values must survive.
        let mut buf = vec![f32::from_bits(0x7fc0_1234); rows * n + 64];
        e.matmul(&w, &q, &mut buf[32..32 + rows * n]).unwrap();
        assert!(buf[..32]
            .iter()
            .chain(&buf[32 + rows * n..])
            .all(|v| v.to_bits() == 0x7fc0_1234));
        assert!(buf[32..32 + rows * n].iter().all(|v| v.is_finite()));
    }
}

/// Random activations of each row count in `rows`, quantized, with the full matmul's bits
/// on the portable path; then `check(executor, activations, bits, rows)` on every ISA this
/// CPU has at 1, 2 and 3 threads.
fn for_each_executor(
    rng: &mut rand::rngs::StdRng,
    w: &PackedMatrix,
    rows: &[usize],
    mut check: impl FnMut(&Executor, &QuantizedRows, &[u32], usize),
) {
    let scalar = Executor::with_isa(1, Isa::Scalar).unwrap();
    for &rows in rows {
        let xs = random_activations(rng, rows * w.k());
        let want = bits(&run(&scalar, w, &xs, rows));
        let mut q = QuantizedRows::new();
        q.quantize(&xs, rows, w.k());
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                check(&Executor::with_isa(threads, isa).unwrap(), &q, &want, rows);
            }
        }
    }
}

/// `matmul_columns`: the selected columns (and their tiles') bits are `matmul`'s, on every
/// ISA and thread count; columns of untouched tiles keep what the output held.
#[test]
fn selected_columns_match_the_full_matmul() {
    let mut rng = rng(11);
    let (n, k) = (300, 256);
    // Scattered, repeated, unsorted, in the ragged last tile; and none at all.
    let sets: [&[u32]; 4] = [&[5], &[299, 3, 3, 170, 64, 65], &[0, 31, 32, 288], &[]];
    for format in FORMATS {
        let bytes = random_ggml(&mut rng, format, n, k);
        let w = PackedMatrix::from_ggml(format, &bytes, n, k).unwrap();
        for_each_executor(&mut rng, &w, &[1, 3, 6], |e, q, want, rows| {
            let isa = e.isa();
            for cols in sets {
                let guard = f32::from_bits(0x7fc0_4321);
                let mut out = vec![guard; rows * n];
                e.matmul_columns(&w, q, cols, &mut out).unwrap();
                let tiles: Vec<usize> = cols.iter().map(|&c| c as usize / 32).collect();
                for (i, v) in out.iter().enumerate() {
                    let c = i % n;
                    if tiles.contains(&(c / 32)) {
                        assert_eq!(v.to_bits(), want[i], "{format:?} {isa} col {c}");
                    } else {
                        assert_eq!(v.to_bits(), guard.to_bits(), "{format:?} col {c}");
                    }
                }
            }
        });
        let e = Executor::new(1);
        let mut q = QuantizedRows::new();
        q.quantize(&vec![0.5; k], 1, k);
        let mut out = vec![0.0; n];
        assert!(e.matmul_columns(&w, &q, &[300], &mut out).is_err());
        assert!(e.matmul_columns(&w, &q, &[1], &mut out[1..]).is_err());
    }
}

/// `matmul_block`: a block of tiles, into an output holding only its columns, has the
/// bits of the full matmul's columns, on every ISA and thread count, the ragged last tile
/// included; ranges outside the matrix and wrong lengths are errors.
#[test]
fn tile_blocks_match_the_full_matmul() {
    let mut rng = rng(12);
    let (n, k) = (300, 256);
    for format in FORMATS {
        let bytes = random_ggml(&mut rng, format, n, k);
        let w = PackedMatrix::from_ggml(format, &bytes, n, k).unwrap();
        for_each_executor(&mut rng, &w, &[1, 4, 7], |e, q, want, rows| {
            let isa = e.isa();
            for tiles in [0..1, 0..10, 3..7, 9..10, 2..3] {
                let (c0, c1) = (tiles.start * 32, (tiles.end * 32).min(n));
                let mut out = vec![f32::NAN; rows * (c1 - c0)];
                e.matmul_block(&w, q, tiles.clone(), &mut out).unwrap();
                for r in 0..rows {
                    for c in c0..c1 {
                        let got = out[r * (c1 - c0) + c - c0].to_bits();
                        assert_eq!(got, want[r * n + c], "{format:?} {isa} {tiles:?}");
                    }
                }
            }
        });
        let e = Executor::new(1);
        let mut q = QuantizedRows::new();
        q.quantize(&vec![0.5; k], 1, k);
        let mut out = vec![0.0; 32];
        assert!(e.matmul_block(&w, &q, 10..11, &mut out).is_err());
        assert!(e.matmul_block(&w, &q, 0..1, &mut out[1..]).is_err());
        assert!(e.matmul_block(&w, &q, 1..1, &mut out).is_err());
    }
}
