//! Cost curve of all matmuls of one SmolLM2-135M forward versus the number of rows.
//!
//! 30 layers × [qkv fused 960×576, o 576×576, gate+up fused 3072×576, down 576×1536]
//! in Q4_1, plus the tied head 49152×576 in Q8_0, random weights. For each available ISA
//! and 1 and 2 threads, times the whole set for n = 1..64 rows (medians over interleaved
//! repeats: the machine is noisy) and prints ms and the ratio to n = 1.
//!
//! `cargo run --release -p specdec-kernels --example matmul_curve -- [reps] [--scalar]
//! [--breakdown]` (`--breakdown`: per matrix kind, fastest ISA, 2 threads).

use half::f16;
use specdec_kernels::{Executor, Isa, PackedMatrix, QuantizedRows, WeightFormat};
use std::time::Instant;

const NS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
const LAYERS: usize = 30;
const HIDDEN: usize = 576;
const FFN: usize = 1536;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn matrix(rng: &mut Rng, format: WeightFormat, n: usize, k: usize) -> PackedMatrix {
    let bs = format.block_bytes();
    let mut bytes = vec![0u8; n * k / 32 * bs];
    for blk in bytes.chunks_exact_mut(bs) {
        let d = 1e-3 + 1e-2 * rng.unit();
        blk[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        blk[2..4].copy_from_slice(&f16::from_f32(-8.0 * d).to_le_bytes());
        let start = if format == WeightFormat::Q8_0 { 2 } else { 4 };
        for b in &mut blk[start..] {
            *b = rng.next() as u8;
        }
    }
    PackedMatrix::from_ggml(format, &bytes, n, k).expect("valid shape")
}

struct Model {
    layers: Vec<[PackedMatrix; 4]>,
    head: PackedMatrix,
}

/// Quantized inputs and output buffers for one row count.
struct Batch {
    x576: QuantizedRows,
    x1536: QuantizedRows,
    out: Vec<f32>,
}

impl Batch {
    fn new(rng: &mut Rng, rows: usize) -> Batch {
        let mut quant = |k: usize| {
            let x: Vec<f32> = (0..rows * k).map(|_| rng.unit() * 2.0 - 1.0).collect();
            let mut q = QuantizedRows::new();
            q.quantize(&x, rows, k);
            q
        };
        Batch {
            x576: quant(HIDDEN),
            x1536: quant(FFN),
            out: vec![0.0; rows * 49152],
        }
    }
}

fn forward(e: &Executor, m: &Model, b: &mut Batch) {
    let rows = b.x576.rows();
    for l in &m.layers {
        for (w, x) in [
            (&l[0], &b.x576),
            (&l[1], &b.x576),
            (&l[2], &b.x576),
            (&l[3], &b.x1536),
        ] {
            e.matmul(w, x, &mut b.out[..rows * w.n()])
                .expect("shapes match");
        }
    }
    e.matmul(&m.head, &b.x576, &mut b.out[..rows * m.head.n()])
        .expect("shapes match");
}

/// (median, minimum).
fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(15);
    let scalar = args.iter().any(|a| a == "--scalar");
    let breakdown = args.iter().any(|a| a == "--breakdown");

    let mut rng = Rng(0x2545f4914f6cdd1d);
    let q41 = WeightFormat::Q4_1;
    let model = Model {
        layers: (0..LAYERS)
            .map(|_| {
                [
                    matrix(&mut rng, q41, 960, HIDDEN),
                    matrix(&mut rng, q41, HIDDEN, HIDDEN),
                    matrix(&mut rng, q41, 2 * FFN, HIDDEN),
                    matrix(&mut rng, q41, HIDDEN, FFN),
                ]
            })
            .collect(),
        head: matrix(&mut rng, WeightFormat::Q8_0, 49152, HIDDEN),
    };
    let bytes: usize = model
        .layers
        .iter()
        .flatten()
        .map(|w| w.packed_bytes())
        .sum::<usize>()
        + model.head.packed_bytes();
    println!(
        "weights: {:.1} MB packed, {reps} repeats",
        bytes as f64 / 1e6
    );

    if breakdown {
        return per_kind(&model, reps, &mut rng);
    }

    let mut configs = Vec::new();
    for isa in Isa::available() {
        if isa == Isa::Scalar && !scalar {
            continue;
        }
        for threads in [1, 2] {
            configs.push(Executor::with_isa(threads, isa).expect("available"));
        }
    }
    let mut batches: Vec<Batch> = NS.iter().map(|&n| Batch::new(&mut rng, n)).collect();
    let mut times = vec![vec![Vec::new(); NS.len()]; configs.len()];
    for e in &configs {
        forward(e, &model, &mut batches[0]);
    }
    for _ in 0..reps {
        for (ci, e) in configs.iter().enumerate() {
            for (ni, b) in batches.iter_mut().enumerate() {
                let t = Instant::now();
                forward(e, &model, b);
                times[ci][ni].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }

    println!("median ms (ratio to n = 1) [minimum ms]");
    print!("{:>3}", "n");
    for e in &configs {
        print!(" | {:>24}", format!("{} x{}", e.isa().name(), e.threads()));
    }
    println!();
    let base: Vec<f64> = times.iter_mut().map(|t| stats(&mut t[0]).0).collect();
    for (ni, n) in NS.iter().enumerate() {
        print!("{n:>3}");
        for (ci, t) in times.iter_mut().enumerate() {
            let (med, min) = stats(&mut t[ni]);
            print!(" | {med:>7.2} ({:>5.2}) [{min:>6.2}]", med / base[ci]);
        }
        println!();
    }

    // Activation quantization, for scale: 4 quantizations per layer + 1 for the head.
    for n in [1, 64] {
        let x: Vec<f32> = (0..n * FFN).map(|_| rng.unit()).collect();
        let mut q = QuantizedRows::new();
        let t = Instant::now();
        for _ in 0..100 {
            for _ in 0..LAYERS {
                for _ in 0..3 {
                    q.quantize(&x[..n * HIDDEN], n, HIDDEN);
                }
                q.quantize(&x, n, FFN);
            }
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / 100.0;
        println!("activation quantization per forward (121 calls), n = {n}: {ms:.3} ms");
    }
}

/// Time of each matrix kind (all 30 layers' matrices of it, or the head) at a few n.
fn per_kind(m: &Model, reps: usize, rng: &mut Rng) {
    let e = Executor::new(2);
    println!(
        "{} x{}: median ms, GB/s of weights, GMAC/s",
        e.isa(),
        e.threads()
    );
    let kinds: [(&str, Vec<&PackedMatrix>); 5] = [
        ("qkv 960x576", m.layers.iter().map(|l| &l[0]).collect()),
        ("o 576x576", m.layers.iter().map(|l| &l[1]).collect()),
        ("gate_up 3072x576", m.layers.iter().map(|l| &l[2]).collect()),
        ("down 576x1536", m.layers.iter().map(|l| &l[3]).collect()),
        ("head 49152x576 q8", vec![&m.head]),
    ];
    for n in [1, 4, 16, 64] {
        let mut b = Batch::new(rng, n);
        for (name, ws) in &kinds {
            let mut t = Vec::new();
            for _ in 0..reps {
                let start = Instant::now();
                for w in ws {
                    let x = if w.k() == FFN { &b.x1536 } else { &b.x576 };
                    e.matmul(w, x, &mut b.out[..n * w.n()])
                        .expect("shapes match");
                }
                t.push(start.elapsed().as_secs_f64());
            }
            let (med, _) = stats(&mut t);
            let bytes: usize = ws.iter().map(|w| w.packed_bytes()).sum();
            let macs: usize = ws.iter().map(|w| w.n() * w.k() * n).sum();
            println!(
                "n={n:>2} {name:>18}: {:7.3} ms {:6.1} GB/s {:6.1} GMAC/s",
                med * 1e3,
                bytes as f64 / med / 1e9,
                macs as f64 / med / 1e9
            );
        }
    }
}
