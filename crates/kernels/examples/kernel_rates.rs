//! Prints the ceilings `specdec bench roofline` measures (bandwidth, int8 and f32 peaks,
//! each format's kernel rate on cached weights), for kernel work without the whole CLI:
//! `cargo run --release -p specdec-kernels --example kernel_rates [THREADS]`.

use specdec_kernels::{Executor, WeightFormat};

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let e = Executor::new(threads);
    let c = e.ceilings(256 << 20).expect("ceilings");
    println!(
        "{threads} threads, {}: read {:.1} GB/s, int8 {:.0} G MAC/s, f32 {:.0} G MAC/s",
        e.isa(),
        c.read_bytes_per_s / 1e9,
        c.int8_macs_per_s / 1e9,
        c.f32_macs_per_s / 1e9
    );
    for f in WeightFormat::ALL {
        let r = c.kernel_rate(f);
        println!(
            "{:5} {:6.0} G MAC/s ({:.0}% of int8 peak)",
            f.name(),
            r / 1e9,
            100.0 * r / c.int8_macs_per_s
        );
    }
}
