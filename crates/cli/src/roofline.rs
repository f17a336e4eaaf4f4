//! `specdec bench roofline`: every forward size set against the floor this machine puts
//! under it. The floor of a forward is the larger of the bytes it must read over the
//! measured streaming bandwidth and its multiply-adds over the measured peak rates (int8
//! for the matrices, f32 FMA for attention); the fraction achieved is floor / measured.
//! A second, higher floor replaces the int8 instruction's peak with the matmul kernels'
//! own measured rate on cached weights: what the kernels' fixed arithmetic allows, so the
//! gap to it is the forward's (attention, row-wise steps, memory, synchronisation).

use serde::Serialize;
use specdec_runtime::{Ceilings, ForwardWork, Node, SeqInput, Want, WeightFormat};

use crate::common::{self, Loaded, ModelArgs};
use specdec_bench::cost::{cost_curve, median, prefilled};

#[derive(Serialize)]
struct Row {
    prefix: usize,
    n: usize,
    ms: f64,
    floor_ms: f64,
    /// What sets the floor: "memory" or "compute".
    bound: &'static str,
    fraction: f64,
    /// The floor with the kernels' own rate in place of the instruction's peak.
    kernel_floor_ms: f64,
    kernel_fraction: f64,
    ratio_to_one: f64,
    floor_ratio_to_one: f64,
}

/// Milliseconds no forward doing `w` can beat on `c`, and which ceiling sets it.
fn floor_ms(w: ForwardWork, c: &Ceilings) -> (f64, &'static str) {
    let int8 = w.int8_macs as f64 / c.int8_macs_per_s;
    bound(w, c, int8)
}

/// [`floor_ms`] with each format's matrices at the kernels' measured rate on it.
fn kernel_floor_ms(w: ForwardWork, c: &Ceilings) -> f64 {
    let int8 = WeightFormat::ALL
        .iter()
        .map(|&f| w.int8_macs_by_format[f.index()] as f64 / c.kernel_rate(f))
        .sum();
    bound(w, c, int8).0
}

/// The larger of the memory time and the compute time (`int8_s` for the matrices).
fn bound(w: ForwardWork, c: &Ceilings, int8_s: f64) -> (f64, &'static str) {
    let memory = w.bytes as f64 / c.read_bytes_per_s;
    let compute = int8_s + w.f32_macs as f64 / c.f32_macs_per_s;
    if memory >= compute {
        (memory * 1e3, "memory")
    } else {
        (compute * 1e3, "compute")
    }
}

/// One phase of a profiled forward.
#[derive(Serialize)]
struct PhaseRow {
    phase: &'static str,
    ms: f64,
    share: f64,
    /// The phase's own floor (matrix phases only).
    floor_ms: Option<f64>,
    /// The same with the kernels' own rate.
    kernel_floor_ms: Option<f64>,
}

/// Where the time of one forward size goes.
#[derive(Serialize)]
struct Profile {
    prefix: usize,
    n: usize,
    forward_ms: f64,
    phases: Vec<PhaseRow>,
    /// Forward time no phase claims (final norm, splitting logits, the loop itself).
    other_ms: f64,
    dispatches: f64,
    barrier_wait_ms: f64,
    /// An empty job's fork and join, measured alone.
    empty_dispatch_us: f64,
}

/// Runs `repeats` forwards of `n` chained nodes after `prefix` with profiling on.
fn profile(
    loaded: &Loaded,
    c: &Ceilings,
    prefix: usize,
    n: usize,
    repeats: usize,
    empty_dispatch_us: f64,
) -> anyhow::Result<Profile> {
    let model = &loaded.model;
    let (mut seq, tokens) = prefilled(&loaded.model, &loaded.tokenizer, prefix, n)?;
    let nodes = Node::chain(&tokens[prefix..prefix + n]);
    let forward = |seq: &mut specdec_runtime::Sequence| {
        model.forward(&mut [SeqInput {
            seq,
            nodes: &nodes,
            want: Want::All,
        }])
    };
    for _ in 0..3 {
        forward(&mut seq)?;
    }
    model.set_profiling(true);
    let runs = (0..repeats.max(1)).try_for_each(|_| forward(&mut seq).map(drop));
    model.set_profiling(false);
    runs?;
    let p = model.take_profile();
    let per = |ns: u64| ns as f64 / 1e6 / p.forwards.max(1) as f64;
    let forward_ms = per(p.total_ns);
    let phases: Vec<PhaseRow> = p
        .phase_ns
        .iter()
        .map(|&(phase, ns)| PhaseRow {
            phase: phase.name(),
            ms: per(ns),
            share: per(ns) / forward_ms,
            floor_ms: model.matrix_work(phase, n).map(|w| floor_ms(w, c).0),
            kernel_floor_ms: model.matrix_work(phase, n).map(|w| kernel_floor_ms(w, c)),
        })
        .collect();
    let claimed: f64 = phases.iter().map(|r| r.ms).sum();
    Ok(Profile {
        prefix,
        n,
        forward_ms,
        other_ms: forward_ms - claimed,
        phases,
        dispatches: p.dispatches as f64 / p.forwards.max(1) as f64,
        barrier_wait_ms: per(p.barrier_wait_ns),
        empty_dispatch_us,
    })
}

/// Microseconds of one empty job's fork and join on the executor's pool (median of
/// batches).
fn empty_dispatch_us(exec: &specdec_runtime::Executor) -> anyhow::Result<f64> {
    let mut per = Vec::new();
    for _ in 0..9 {
        let t = std::time::Instant::now();
        for _ in 0..2000 {
            exec.for_each(exec.threads(), &|_| {})?;
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / 2000.0);
    }
    Ok(median(per))
}

fn print_profile(p: &Profile) {
    println!(
        "\nprofile, prefix {} n {}: {:.2} ms per forward",
        p.prefix, p.n, p.forward_ms
    );
    println!(
        "{:>16} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "phase", "ms", "share", "floor ms", "fraction", "kernel", "fraction"
    );
    let of = |floor: Option<f64>, ms: f64| match floor {
        Some(f) => (format!("{f:.2}"), format!("{:.0}%", 100.0 * f / ms)),
        None => (String::new(), String::new()),
    };
    for r in &p.phases {
        let (floor, frac) = of(r.floor_ms, r.ms);
        let (kernel, kfrac) = of(r.kernel_floor_ms, r.ms);
        println!(
            "{:>16} {:>8.3} {:>6.1}% {floor:>9} {frac:>9} {kernel:>9} {kfrac:>9}",
            r.phase,
            r.ms,
            100.0 * r.share
        );
    }
    println!(
        "{:>16} {:>8.3} {:>6.1}%",
        "other",
        p.other_ms,
        100.0 * p.other_ms / p.forward_ms
    );
    println!(
        "sync: {:.0} dispatches per forward (an empty one costs {:.2} µs: {:.2} ms), the caller waited {:.3} ms at joins",
        p.dispatches,
        p.empty_dispatch_us,
        p.dispatches * p.empty_dispatch_us / 1e3,
        p.barrier_wait_ms
    );
}

pub fn run(
    args: &ModelArgs,
    repeats: usize,
    prefixes: &[usize],
    buffer_mib: usize,
    profile_nodes: &[usize],
    json: bool,
) -> anyhow::Result<()> {
    let loaded = common::load(args)?;
    let model = &loaded.model;
    let exec = model.executor();
    let c = exec.ceilings(buffer_mib << 20)?;
    let mut rows = Vec::new();
    for &prefix in prefixes {
        let curve = cost_curve(&loaded.model, &loaded.tokenizer, repeats, prefix)?;
        let one = curve.ms(1);
        let one_floor = floor_ms(model.forward_work(prefix, 1), &c).0;
        for &(n, ms) in curve.points() {
            let work = model.forward_work(prefix, n);
            let (floor, bound) = floor_ms(work, &c);
            let kernel_floor = kernel_floor_ms(work, &c);
            rows.push(Row {
                prefix,
                n,
                ms,
                floor_ms: floor,
                bound,
                fraction: floor / ms,
                kernel_floor_ms: kernel_floor,
                kernel_fraction: kernel_floor / ms,
                ratio_to_one: ms / one,
                floor_ratio_to_one: floor / one_floor,
            });
        }
    }
    let empty = empty_dispatch_us(exec)?;
    let mut profiles = Vec::new();
    for &prefix in prefixes {
        for &n in profile_nodes {
            profiles.push(profile(&loaded, &c, prefix, n, repeats * 4, empty)?);
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({
                "profiles": profiles,
                "threads": exec.threads(),
                "isa": exec.isa().name(),
                "read_gb_per_s": c.read_bytes_per_s / 1e9,
                "int8_gmacs_per_s": c.int8_macs_per_s / 1e9,
                "f32_gmacs_per_s": c.f32_macs_per_s / 1e9,
                "kernel_gmacs_per_s": WeightFormat::ALL
                    .iter()
                    .map(|&f| (f.name(), c.kernel_rate(f) / 1e9))
                    .collect::<std::collections::BTreeMap<_, _>>(),
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
    let kernels: Vec<String> = WeightFormat::ALL
        .iter()
        .map(|&f| {
            let rate = c.kernel_rate(f);
            format!(
                "{} {:.0} ({:.0}%)",
                f.name(),
                rate / 1e9,
                100.0 * rate / c.int8_macs_per_s
            )
        })
        .collect();
    println!(
        "the matmul kernels on cached weights, G MAC/s (of the int8 peak): {}",
        kernels.join(", ")
    );
    let w1 = model.forward_work(prefixes[0], 1);
    println!(
        "one row reads {:.1} MB and does {:.1} M int8 multiply-adds",
        w1.bytes as f64 / 1e6,
        w1.int8_macs as f64 / 1e6
    );
    println!(
        "{:>6} {:>4} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "prefix",
        "n",
        "ms",
        "floor ms",
        "bound",
        "fraction",
        "kernel",
        "fraction",
        "n/1",
        "floor n/1"
    );
    for r in &rows {
        println!(
            "{:>6} {:>4} {:>9.2} {:>9.2} {:>8} {:>8.0}% {:>9.2} {:>8.0}% {:>8.2} {:>8.2}",
            r.prefix,
            r.n,
            r.ms,
            r.floor_ms,
            r.bound,
            100.0 * r.fraction,
            r.kernel_floor_ms,
            100.0 * r.kernel_fraction,
            r.ratio_to_one,
            r.floor_ratio_to_one
        );
    }
    profiles.iter().for_each(print_profile);
    Ok(())
}
