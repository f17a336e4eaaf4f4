//! Bad inputs are reported as errors, never panics.

use specdec_kernels::*;

fn q8(n: usize, k: usize) -> PackedMatrix {
    PackedMatrix::from_ggml(WeightFormat::Q8_0, &vec![0u8; n * k / 32 * 34], n, k).unwrap()
}

#[test]
fn packing_errors() {
    use KernelError::*;
    let f = WeightFormat::Q4_1;
    let ok = vec![0u8; 4 * 2 * 20];
    assert!(PackedMatrix::from_ggml(f, &ok, 4, 64).is_ok());
    assert!(matches!(
        PackedMatrix::from_ggml(f, &ok[1..], 4, 64),
        Err(WeightBytes {
            expected: 160,
            actual: 159
        })
    ));
    assert!(matches!(
        PackedMatrix::from_ggml(f, &ok, 4, 48),
        Err(BadK { k: 48, .. })
    ));
    assert!(matches!(
        PackedMatrix::from_ggml(f, &[], 4, 0),
        Err(BadK { k: 0, .. })
    ));
    assert!(matches!(
        PackedMatrix::from_ggml(f, &[], 0, 64),
        Err(EmptyMatrix)
    ));
    assert!(matches!(
        PackedMatrix::from_ggml(f, &ok, usize::MAX / 8, 64),
        Err(ShapeOverflow { .. })
    ));
    assert!(matches!(
        PackedMatrix::from_f32(&[0.0; 63], 1, 64),
        Err(WeightValues {
            expected: 64,
            actual: 63
        })
    ));
    assert!(matches!(
        PackedMatrix::from_f32(&[0.0; 40], 1, 40),
        Err(BadK { k: 40, .. })
    ));
    // The K formats need whole super-blocks of 256.
    let q4k = WeightFormat::Q4_K;
    assert!(matches!(
        PackedMatrix::from_ggml(q4k, &[0u8; 144], 1, 128),
        Err(BadK {
            k: 128,
            block: 256,
            ..
        })
    ));
    // Stacked parts may change format only at a tile boundary.
    let (a, b) = (vec![0u8; 33 * 2 * 18], vec![0u8; 32 * 2 * 34]);
    let parts = [
        (WeightFormat::Q4_0, &a[..], 33),
        (WeightFormat::Q8_0, &b[..], 32),
    ];
    assert!(matches!(
        PackedMatrix::stack(&parts, 64),
        Err(RaggedStack { columns: 33 })
    ));
    assert!(matches!(PackedMatrix::stack(&[], 64), Err(EmptyMatrix)));
}

#[test]
fn matmul_errors() {
    use KernelError::*;
    let e = Executor::new(2);
    let w = q8(40, 64);
    let mut x = QuantizedRows::new();
    x.quantize(&[0.5; 3 * 64], 3, 64);
    let mut out = vec![0.0; 3 * 40];
    assert!(e.matmul(&w, &x, &mut out).is_ok());
    assert!(matches!(
        e.matmul(&w, &x, &mut out[1..]),
        Err(OutputLength {
            expected: 120,
            actual: 119
        })
    ));
    let mut long = vec![0.0; 121];
    assert!(matches!(
        e.matmul(&w, &x, &mut long),
        Err(OutputLength { .. })
    ));
    assert!(matches!(
        e.matmul(&q8(40, 96), &x, &mut out),
        Err(KMismatch {
            weights: 96,
            activations: 64
        })
    ));
    // Inconsistent quantize arguments poison the buffer until the next good call.
    x.quantize(&[0.5; 100], 3, 64);
    assert_eq!(x.rows(), 0);
    assert!(matches!(
        e.matmul(&w, &x, &mut []),
        Err(BadActivations { len: 100, .. })
    ));
    x.quantize(&[0.5; 96], 2, 48);
    assert!(matches!(
        e.matmul(&w, &x, &mut []),
        Err(BadActivations { .. })
    ));
    x.quantize(&[0.5; 64], 1, 64);
    assert!(e.matmul(&w, &x, &mut out[..40]).is_ok());
    // Zero rows is fine.
    x.quantize(&[], 0, 64);
    assert!(e.matmul(&w, &x, &mut []).is_ok());
    // Never quantized: k = 0.
    assert!(matches!(
        e.matmul(&w, &QuantizedRows::new(), &mut []),
        Err(KMismatch { .. })
    ));
}

#[test]
fn isa_selection() {
    let avail = Isa::available();
    assert_eq!(avail.last(), Some(&Isa::Scalar));
    assert_eq!(avail[0], Isa::detect());
    for isa in [
        Isa::Amx,
        Isa::Avx512Vnni,
        Isa::AvxVnni,
        Isa::Avx2,
        Isa::Scalar,
    ] {
        let r = Executor::with_isa(2, isa);
        if isa.is_available() {
            let e = r.unwrap();
            assert_eq!((e.isa(), e.threads()), (isa, 2));
        } else {
            assert!(matches!(r, Err(KernelError::IsaUnavailable(i)) if i == isa));
        }
        assert!(!isa.name().is_empty());
    }
    assert_eq!(Executor::new(0).threads(), 1);
}

#[test]
fn types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<PackedMatrix>();
    check::<Executor>();
    check::<QuantizedRows>();
    check::<KernelError>();
}

/// Concurrent callers on one executor are serialised and get correct results.
#[test]
fn shared_executor_across_threads() {
    let e = Executor::new(2);
    let w = PackedMatrix::from_f32(
        &(0..64 * 64).map(|i| (i % 7) as f32).collect::<Vec<_>>(),
        64,
        64,
    )
    .unwrap();
    let mut x = QuantizedRows::new();
    x.quantize(&[1.0; 64], 1, 64);
    let mut want = vec![0.0; 64];
    e.matmul(&w, &x, &mut want).unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..200 {
                    let mut y = vec![0.0; 64];
                    e.matmul(&w, &x, &mut y).unwrap();
                    assert_eq!(y, want);
                }
            });
        }
    });
}
