use super::*;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn gelu_tails_and_zero_are_exact_enough_and_finite() {
    let g = [-1e30f32, -200.0, -20.0, -0.0, 0.0, 1e-30, 20.0, 200.0, 1e30];
    let u = [1f32; 9];
    for isa in Isa::available() {
        let mut o = [0f32; 9];
        VecOps::new(isa).geglu(&g, &u, &mut o);
        assert!(o.iter().all(|v| v.is_finite()), "{}: {o:?}", isa.name());
        // Far left the clamped exponential leaves a tiny negative, not the exact 0.
        assert!(
            o[..5].iter().all(|v| v.abs() < 1e-8),
            "{}: {o:?}",
            isa.name()
        );
        assert_eq!(&o[6..], &g[6..], "{}", isa.name());
    }
}

#[test]
fn every_isa_gives_the_scalar_bits() {
    let mut s = 1u32;
    let mut rnd = || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        (s >> 8) as f32 / (1 << 24) as f32 - 0.5
    };
    for n in [1usize, 7, 15, 16, 17, 31, 32, 64, 100, 128] {
        let a: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let mut y0: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let y_ref = {
            let mut y = y0.clone();
            axpy_scalar(0.37, &a, &mut y);
            y
        };
        for isa in Isa::available() {
            let ops = VecOps::new(isa);
            let mut y = y0.clone();
            ops.axpy_rows(&[0.37], &a, n, &mut y);
            assert_eq!(y, y_ref, "{} n={n}", isa.name());
        }
        y0.clear();
        let mut e: Vec<f32> = (0..n).map(|_| rnd() * 200.0).collect();
        let mx = e.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let mut e_ref = e.clone();
        let s_ref = exp_sum_scalar(&mut e_ref, mx);
        for (&got, &orig) in e_ref.iter().zip(&e) {
            let t = orig - mx;
            if t < SOFTMAX_FLUSH {
                assert_eq!(got, 0.0, "{orig}: flushed");
                continue;
            }
            let want = (t as f64).exp();
            assert!(
                (got as f64 - want).abs() <= 2e-7 * want.max(1e-30) + 1e-37,
                "{orig}"
            );
        }
        for isa in Isa::available() {
            let mut v = e.clone();
            let s = VecOps::new(isa).exp_sum(&mut v, mx);
            assert_eq!(s.to_bits(), s_ref.to_bits(), "{} n={n}", isa.name());
            assert_eq!(v, e_ref, "{} n={n}", isa.name());
        }
        e.clear();
        // Multi-output weighted sums equal per-output axpys (d = n here), for every
        // register-block size.
        for m in 1..=13 {
            let nk = 9usize;
            let ws: Vec<f32> = (0..m * nk).map(|_| rnd()).collect();
            let vals: Vec<f32> = (0..nk * (n + 3)).map(|_| rnd()).collect();
            let mut want_w = vec![0.5f32; m * n];
            for s in 0..nk {
                for i in 0..m {
                    axpy_scalar(
                        ws[i * nk + s],
                        &vals[s * (n + 3)..][..n],
                        &mut want_w[i * n..(i + 1) * n],
                    );
                }
            }
            for isa in Isa::available() {
                let mut got = vec![0.5f32; m * n];
                VecOps::new(isa).weighted_sum(&ws, nk, m, &vals, n + 3, nk, &mut got, n);
                assert_eq!(got, want_w, "{} n={n} m={m}", isa.name());
            }
        }
        // Transposed-key scores equal the one-key definition, for every row block.
        for m in 1..=17 {
            let nk = 37usize;
            let stride = n * 16 + 32;
            let qs: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            let kt: Vec<f32> = (0..nk.div_ceil(16) * stride).map(|_| rnd()).collect();
            let mut want_t = vec![0f32; m * nk];
            for i in 0..m {
                for s in 0..nk {
                    want_t[i * nk + s] = dot_t_one(&qs[i * n..][..n], &kt, stride, s);
                }
            }
            for isa in Isa::available() {
                let mut got = vec![0f32; m * nk];
                VecOps::new(isa).dot_t(&qs, m, n, &kt, stride, nk, &mut got, nk);
                assert_eq!(got, want_t, "{} n={n} m={m}", isa.name());
            }
        }
        let g: Vec<f32> = (0..n).map(|_| rnd() * 40.0).collect();
        let u: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let mut want_s = vec![0f32; n];
        gated_scalar::<false>(&g, &u, &mut want_s);
        for (i, &w) in want_s.iter().enumerate() {
            let exact = g[i] as f64 / (1.0 + (-g[i] as f64).exp()) * u[i] as f64;
            assert!((w as f64 - exact).abs() <= 1e-6 * exact.abs() + 1e-30);
        }
        for isa in Isa::available() {
            let mut o = vec![0f32; n];
            VecOps::new(isa).swiglu(&g, &u, &mut o);
            assert_eq!(o, want_s, "{} n={n}", isa.name());
        }
        let mut want_g = vec![0f32; n];
        gated_scalar::<true>(&g, &u, &mut want_g);
        for (i, &w) in want_g.iter().enumerate() {
            let x = g[i] as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            // 0.5·x·(1 + tanh(v)) = x / (1 + exp(-2v)), without 1 + tanh's cancellation.
            let exact = x / (1.0 + (-2.0 * c * (x + 0.044715 * x * x * x)).exp()) * u[i] as f64;
            assert!(
                (w as f64 - exact).abs() <= 2e-5 * exact.abs() + 1e-30,
                "gelu({x}) * {}: {w} vs {exact}",
                u[i]
            );
        }
        for isa in Isa::available() {
            let mut o = vec![0f32; n];
            VecOps::new(isa).geglu(&g, &u, &mut o);
            assert_eq!(bits(&o), bits(&want_g), "{} n={n}", isa.name());
        }
        let rows: Vec<f32> = (0..n * 5 + 3).map(|_| rnd()).collect();
        let w: Vec<f32> = (0..5).map(|_| rnd()).collect();
        let stride = n + 1;
        let m = (rows.len() - n) / stride + 1;
        let scalar = VecOps::new(Isa::Scalar);
        let mut want_y = vec![0.5f32; n];
        scalar.axpy_rows(&w[..m.min(5)], &rows, stride, &mut want_y);
        for isa in Isa::available() {
            let ops = VecOps::new(isa);
            let mut y = vec![0.5f32; n];
            ops.axpy_rows(&w[..m.min(5)], &rows, stride, &mut y);
            assert_eq!(y, want_y, "{} n={n}", isa.name());
        }
    }
}

#[test]
fn scale_max_gives_the_scalar_products_and_maximum_on_every_isa() {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-40,
        -3.5,
        7.25,
    ];
    let mut s = 7u32;
    let mut rnd = || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        s
    };
    for n in [0usize, 1, 5, 15, 16, 17, 33, 100, 1016] {
        for trial in 0..20 {
            let x: Vec<f32> = (0..n)
                .map(|_| match rnd() % 4 {
                    0 => specials[(rnd() % 8) as usize],
                    1 => f32::from_bits(rnd()),
                    _ => (rnd() >> 8) as f32 / (1 << 20) as f32 - 8.0,
                })
                .collect();
            let scale = [0.125f32, -0.37, 1.0][trial % 3];
            let mut want = x.clone();
            let want_max = scale_max_scalar(&mut want, scale);
            for isa in Isa::available() {
                let mut got = x.clone();
                let max = VecOps::new(isa).scale_max(&mut got, scale);
                assert_eq!(bits(&got), bits(&want), "{} n {n}", isa.name());
                assert!(
                    max == want_max || (max.is_nan() && want_max.is_nan()),
                    "{} n {n}: {max} vs {want_max}",
                    isa.name()
                );
                assert!(!max.is_nan());
            }
        }
    }
}
