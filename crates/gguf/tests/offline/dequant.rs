//! Dequantization checked bit for bit against candle's port of ggml's reference code, plus
//! hand-computed blocks for what candle lacks and for the error paths.

use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use specdec_gguf::{dequantize, GgmlType, GgufError};

/// splitmix64: deterministic data without another dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Roughly normal (sum of uniforms), like trained weights.
    fn normal(&mut self) -> f32 {
        let s: f32 = (0..4)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        s - 2.0
    }
}

const QUANTIZED: [(GgmlType, GgmlDType); 10] = [
    (GgmlType::Q4_0, GgmlDType::Q4_0),
    (GgmlType::Q4_1, GgmlDType::Q4_1),
    (GgmlType::Q5_0, GgmlDType::Q5_0),
    (GgmlType::Q5_1, GgmlDType::Q5_1),
    (GgmlType::Q8_0, GgmlDType::Q8_0),
    (GgmlType::Q2_K, GgmlDType::Q2K),
    (GgmlType::Q3_K, GgmlDType::Q3K),
    (GgmlType::Q4_K, GgmlDType::Q4K),
    (GgmlType::Q5_K, GgmlDType::Q5K),
    (GgmlType::Q6_K, GgmlDType::Q6K),
];

fn candle_dequant(q: &QTensor) -> Vec<f32> {
    q.dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

fn ours(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n];
    dequantize(ty, bytes, &mut out).unwrap();
    out
}

/// Bit equality, except that any NaN matches any NaN (random scale bytes can be NaN and the
/// payload is not part of the format).
fn assert_same(ty: GgmlType, what: &str, ours: &[f32], theirs: &[f32]) {
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{ty:?} {what}: element {i} ours {a:e} ({:#x}) candle {b:e} ({:#x})",
            a.to_bits(),
            b.to_bits()
        );
    }
}

#[test]
fn quantized_by_candle_matches_candle_dequantization() {
    let mut rng = Rng(42);
    let (rows, cols) = (16, 1024);
    for (ty, cty) in QUANTIZED {
        // Several magnitudes, including an all-zero row and a row with one outlier, so block
        // scales and mins span their ranges.
        let mut data: Vec<f32> = (0..rows * cols)
            .map(|i| rng.normal() * [1e-3f32, 0.05, 1.0, 300.0][i / cols % 4])
            .collect();
        data[..cols].fill(0.0);
        data[cols + 7] = 40.0;
        let src = Tensor::from_vec(data, (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&src, cty).unwrap();
        let bytes = q.data().unwrap();
        let (bs, bsize) = ty.block_geometry();
        assert_eq!(bytes.len(), rows * cols / bs * bsize, "{ty:?} block size");
        assert_same(
            ty,
            "quantized",
            &ours(ty, &bytes, rows * cols),
            &candle_dequant(&q),
        );
    }
}

#[test]
fn random_blocks_match_candle_dequantization() {
    // Random bytes reach bit patterns no quantizer emits (negative Q6_K scales, every Q3_K
    // scale bit, every high-bit mask), and f16 scales of every size, subnormal through NaN.
    let mut rng = Rng(7);
    for (ty, cty) in QUANTIZED {
        let (bs, bsize) = ty.block_geometry();
        let blocks = 512;
        // u64 backing keeps the buffer aligned for candle's cast to its block structs.
        let words: Vec<u64> = (0..(blocks * bsize).div_ceil(8))
            .map(|_| rng.next())
            .collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let bytes = &bytes[..blocks * bsize];
        let q = qtensor_from_ggml(cty, bytes, vec![blocks * bs], &Device::Cpu).unwrap();
        assert_same(
            ty,
            "random",
            &ours(ty, bytes, blocks * bs),
            &candle_dequant(&q),
        );
    }
}

#[test]
fn float_types_match_candle() {
    let mut rng = Rng(3);
    let n = 4096;
    for (ty, cty) in [
        (GgmlType::F32, GgmlDType::F32),
        (GgmlType::F16, GgmlDType::F16),
        (GgmlType::BF16, GgmlDType::BF16),
    ] {
        let words: Vec<u64> = (0..n / 2).map(|_| rng.next()).collect();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let bytes = &bytes[..n * ty.block_geometry().1];
        let q = qtensor_from_ggml(cty, bytes, vec![n], &Device::Cpu).unwrap();
        assert_same(ty, "random", &ours(ty, bytes, n), &candle_dequant(&q));
    }
}

fn f16(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

#[test]
fn hand_computed_blocks() {
    // F64 (candle has no F64): round to nearest, overflow to infinity.
    let vals = [1.0f64, -0.1, 1e300, 1.0 + f64::EPSILON];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = ours(GgmlType::F64, &bytes, 4);
    assert_eq!(out, [1.0, -0.1f32, f32::INFINITY, 1.0]);

    // BF16 is the top half of an f32.
    let out = ours(GgmlType::BF16, &[0x80, 0x3f, 0x49, 0xc0], 2);
    assert_eq!(out, [1.0, -3.140625]);

    // Q4_0: d = 0.5; byte j holds element j (low nibble) and j + 16 (high nibble), minus 8.
    let mut b = f16(0.5).to_vec();
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let out = ours(GgmlType::Q4_0, &b, 32);
    for j in 0..16 {
        assert_eq!(out[j], (j as f32 - 8.0) * 0.5);
        assert_eq!(out[j + 16], (7.0 - j as f32) * 0.5);
    }

    // Q4_1: d = 2, m = -1.
    let mut b = [f16(2.0), f16(-1.0)].concat();
    b.extend([0x1f; 16]);
    let out = ours(GgmlType::Q4_1, &b, 32);
    assert_eq!((out[0], out[16]), (15.0 * 2.0 - 1.0, 2.0 - 1.0));

    // Q5_0: qh bit j is element j's fifth bit, bit j + 16 element j + 16's.
    let mut b = f16(1.0).to_vec();
    b.extend(0x0001_0002u32.to_le_bytes()); // bits 1 and 16
    b.extend([0x00; 16]);
    let out = ours(GgmlType::Q5_0, &b, 32);
    assert_eq!((out[0], out[1], out[16], out[17]), (-16.0, 0.0, 0.0, -16.0));

    // Q5_1: all bits set, d = 1, m = 0.5 -> 31.5 everywhere.
    let mut b = [f16(1.0), f16(0.5)].concat();
    b.extend([0xff; 20]);
    assert!(ours(GgmlType::Q5_1, &b, 32).iter().all(|&v| v == 31.5));

    // Q8_0: signed bytes times d.
    let mut b = f16(0.25).to_vec();
    b.extend((0..32).map(|i| (i as i8 * 4 - 64) as u8));
    let out = ours(GgmlType::Q8_0, &b, 32);
    assert_eq!((out[0], out[31]), (-16.0, 15.0));

    // Q6_K: every q = 0x3f (31 after the bias), scale[i] = i - 8, d = 1.
    let mut b = vec![0xff; 128 + 64];
    b.extend((0..16).map(|i| (i as i8 - 8) as u8));
    b.extend(f16(1.0));
    let out = ours(GgmlType::Q6_K, &b, 256);
    // Element 0 uses scale 0; element 32 scale 2; element 128 + 16 scale 9.
    assert_eq!(
        (out[0], out[32], out[144]),
        (-8.0 * 31.0, -6.0 * 31.0, 31.0)
    );
}

#[test]
fn unsupported_types_are_errors_not_panics() {
    use GgmlType::*;
    for ty in [
        Q8_1, Q8_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0,
        TQ2_0, I8, I16, I32, I64,
    ] {
        assert!(!ty.can_dequantize());
        let (bs, bsize) = ty.block_geometry();
        let mut out = vec![0f32; bs];
        let e = dequantize(ty, &vec![0; bsize], &mut out).unwrap_err();
        assert!(
            matches!(e, GgufError::NoDequantization(t) if t == ty),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("{ty:?}")));
    }
}

#[test]
fn shape_mismatches_are_errors() {
    for (ty, _) in QUANTIZED {
        let (bs, bsize) = ty.block_geometry();
        let mut out = vec![0f32; 2 * bs];
        assert!(dequantize(ty, &vec![0; 2 * bsize], &mut out).is_ok());
        for len in [0, bsize, 2 * bsize - 1, 2 * bsize + 1, 3 * bsize] {
            let e = dequantize(ty, &vec![0; len], &mut out).unwrap_err();
            assert!(matches!(e, GgufError::DequantShape { .. }), "{e}");
        }
        let mut partial = vec![0f32; bs + 1];
        assert!(dequantize(ty, &vec![0; bsize], &mut partial).is_err());
    }
    let mut out = [0f32; 3];
    assert!(dequantize(GgmlType::F16, &[0; 5], &mut out).is_err());
}

/// Not a benchmark, a guard against accidental quadratic or per-element-allocating code:
/// 4M Q4_K elements should take milliseconds.
#[test]
fn dequantization_is_not_pathologically_slow() {
    let n = 4 << 20;
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ] {
        let (bs, bsize) = ty.block_geometry();
        let bytes = vec![0x11u8; n / bs * bsize];
        let mut out = vec![0f32; n];
        let t = std::time::Instant::now();
        dequantize(ty, &bytes, &mut out).unwrap();
        let dt = t.elapsed();
        assert!(dt.as_secs_f64() < 2.0, "{ty:?}: {n} elements took {dt:?}");
    }
}

/// The load-time budget from the design: a 50M-element tensor well under a second. Ignored by
/// default (it allocates 200 MB); run with `--ignored` when touching the kernels.
#[test]
#[ignore]
fn fifty_million_elements_under_a_second() {
    let n = 50 * 1024 * 1024;
    for ty in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let (bs, bsize) = ty.block_geometry();
        let bytes = vec![0x3au8; n / bs * bsize];
        let mut out = vec![0f32; n];
        let t = std::time::Instant::now();
        dequantize(ty, &bytes, &mut out).unwrap();
        let dt = t.elapsed();
        println!("{ty:?}: {n} elements in {dt:?}");
        assert!(dt.as_secs_f64() < 1.0, "{ty:?} took {dt:?}");
    }
}
