//! `specdec bench roofline`: every forward size set against the floor this machine puts
//! under it. The floor of a forward is the larger of the bytes it must read over the
//! measured streaming bandwidth and its multiply-adds over the measured peak rates (int8
//! for the matrices, f32 FMA for attention); the fraction achieved is floor / measured.

use serde::Serialize;
use specdec_runtime::{Ceilings, ForwardWork};

use crate::bench::cost_curve;
use crate::common::{self, ModelArgs};

#[derive(Serialize)]
struct Row {
    prefix: usize,
    n: usize,
    ms: f64,
    floor_ms: f64,
    /// What sets the floor: "memory" or "compute".
    bound: &'static str,
    fraction: f64,
    ratio_to_one: f64,
    floor_ratio_to_one: f64,
}

/// Milliseconds no forward doing `w` can beat on `c`, and which ceiling sets it.
fn floor_ms(w: ForwardWork, c: &Ceilings) -> (f64, &'static str) {
    let memory = w.bytes as f64 / c.read_bytes_per_s;
    let compute = w.int8_macs as f64 / c.int8_macs_per_s + w.f32_macs as f64 / c.f32_macs_per_s;
    if memory >= compute {
        (memory * 1e3, "memory")
    } else {
        (compute * 1e3, "compute")
    }
}

pub fn run(
    args: &ModelArgs,
    repeats: usize,
    prefixes: &[usize],
    buffer_mib: usize,
    json: bool,
) -> anyhow::Result<()> {
    let loaded = common::load(args)?;
    let model = &loaded.model;
    let exec = model.executor();
    let c = exec.ceilings(buffer_mib << 20)?;
    let mut rows = Vec::new();
    for &prefix in prefixes {
        let curve = cost_curve(&loaded, repeats, prefix)?;
        let one = curve.ms(1);
        let one_floor = floor_ms(model.forward_work(prefix, 1), &c).0;
        for &(n, ms) in curve.points() {
            let (floor, bound) = floor_ms(model.forward_work(prefix, n), &c);
            rows.push(Row {
                prefix,
                n,
                ms,
                floor_ms: floor,
                bound,
                fraction: floor / ms,
                ratio_to_one: ms / one,
                floor_ratio_to_one: floor / one_floor,
            });
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({
                "threads": exec.threads(),
                "isa": exec.isa().name(),
                "read_gb_per_s": c.read_bytes_per_s / 1e9,
                "int8_gmacs_per_s": c.int8_macs_per_s / 1e9,
                "f32_gmacs_per_s": c.f32_macs_per_s / 1e9,
                "rows": rows,
            })
        );
        return Ok(());
    }
    println!(
        "{} threads, {}: streaming read {:.1} GB/s ({buffer_mib} MiB buffer), int8 dot {:.0} G MAC/s, f32 FMA {:.0} G MAC/s",
        exec.threads(),
        exec.isa().name(),
        c.read_bytes_per_s / 1e9,
        c.int8_macs_per_s / 1e9,
        c.f32_macs_per_s / 1e9,
    );
    let w1 = model.forward_work(prefixes[0], 1);
    println!(
        "one row reads {:.1} MB and does {:.1} M int8 multiply-adds",
        w1.bytes as f64 / 1e6,
        w1.int8_macs as f64 / 1e6
    );
    println!(
        "{:>6} {:>4} {:>9} {:>9} {:>8} {:>9} {:>8} {:>8}",
        "prefix", "n", "ms", "floor ms", "bound", "fraction", "n/1", "floor n/1"
    );
    for r in &rows {
        println!(
            "{:>6} {:>4} {:>9.2} {:>9.2} {:>8} {:>8.0}% {:>8.2} {:>8.2}",
            r.prefix,
            r.n,
            r.ms,
            r.floor_ms,
            r.bound,
            100.0 * r.fraction,
            r.ratio_to_one,
            r.floor_ratio_to_one
        );
    }
    Ok(())
}
