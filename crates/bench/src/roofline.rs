//! The roofline: every forward size set against the floor this machine puts under it. The
//! floor of a forward is the larger of the bytes it must read over the measured streaming
//! bandwidth and its multiply-adds over the measured peak rates (int8 for the matrices, f32
//! FMA for attention); the fraction achieved is floor / measured. A second, higher floor
//! replaces the int8 instruction's peak with the matmul kernels' own measured rate on cached
//! weights: what the kernels' fixed arithmetic allows, so the gap to it is the forward's
//! (attention, row-wise steps, memory, synchronisation).

use std::collections::BTreeMap;

use serde::Serialize;
use specdec_runtime::{
    Ceilings, Executor, ForwardWork, Model, Node, RuntimeError, SeqInput, Sequence, Want,
    WeightFormat,
};
use specdec_tokenizer::Tokenizer;

use crate::cost::{cost_curve, median, prefilled};
use crate::report::{Plot, Series};
use crate::BenchError;

/// What to measure.
#[derive(Clone, Debug)]
pub struct RooflineOptions {
    /// Timings per forward size (medians are kept).
    pub repeats: usize,
    /// Committed tokens before the measured forwards (one curve each).
    pub prefixes: Vec<usize>,
    /// The buffer the streaming bandwidth is read over (larger than the caches).
    pub buffer_mib: usize,
    /// Forward sizes profiled phase by phase, at every prefix.
    pub profile_nodes: Vec<usize>,
}

/// One forward size against its floors.
#[derive(Clone, Debug, Serialize)]
pub struct RooflineRow {
    /// Committed tokens before the forward.
    pub prefix: usize,
    /// Nodes in the forward.
    pub n: usize,
    /// Measured milliseconds (median).
    pub ms: f64,
    /// The floor at the instructions' peak.
    pub floor_ms: f64,
    /// What sets the floor: "memory" or "compute".
    pub bound: &'static str,
    /// floor / measured.
    pub fraction: f64,
    /// The floor with the kernels' own rate in place of the instruction's peak.
    pub kernel_floor_ms: f64,
    /// kernel floor / measured.
    pub kernel_fraction: f64,
    /// This size's time over one node's.
    pub ratio_to_one: f64,
    /// This size's floor over one node's.
    pub floor_ratio_to_one: f64,
}

/// One phase of a profiled forward.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseRow {
    /// The phase's name.
    pub phase: &'static str,
    /// Its milliseconds per forward.
    pub ms: f64,
    /// Its share of the forward.
    pub share: f64,
    /// The phase's own floor (matrix phases only).
    pub floor_ms: Option<f64>,
    /// The same with the kernels' own rate.
    pub kernel_floor_ms: Option<f64>,
}

/// Where the time of one forward size goes.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    /// Committed tokens before the forward.
    pub prefix: usize,
    /// Nodes in the forward.
    pub n: usize,
    /// Milliseconds per forward.
    pub forward_ms: f64,
    /// The phases, in order.
    pub phases: Vec<PhaseRow>,
    /// Forward time no phase claims (final norm, splitting logits, the loop itself).
    pub other_ms: f64,
    /// Thread-pool dispatches per forward.
    pub dispatches: f64,
    /// Milliseconds the caller waited at joins per forward.
    pub barrier_wait_ms: f64,
    /// An empty job's fork and join, measured alone.
    pub empty_dispatch_us: f64,
}

/// A roofline run: the machine's ceilings, every forward size against them, the profiles.
#[derive(Clone, Debug, Serialize)]
pub struct Roofline {
    /// Kernel threads.
    pub threads: usize,
    /// The kernels' instruction-set path.
    pub isa: &'static str,
    /// Streaming read bandwidth.
    pub read_gb_per_s: f64,
    /// The int8 dot instruction's peak.
    pub int8_gmacs_per_s: f64,
    /// The f32 FMA peak.
    pub f32_gmacs_per_s: f64,
    /// Each weight format's matmul kernel on cached weights.
    pub kernel_gmacs_per_s: BTreeMap<&'static str, f64>,
    /// Every forward size at every prefix.
    pub rows: Vec<RooflineRow>,
    /// The profiled sizes.
    pub profiles: Vec<Profile>,
}

/// Measures the ceilings, then every forward size and the profiles, on `model`.
pub fn measure(
    model: &Model,
    tokenizer: &Tokenizer,
    opts: &RooflineOptions,
) -> Result<Roofline, BenchError> {
    let exec = model.executor();
    let c = exec
        .ceilings(opts.buffer_mib << 20)
        .map_err(RuntimeError::from)?;
    let mut rows = Vec::new();
    for &prefix in &opts.prefixes {
        let curve = cost_curve(model, tokenizer, opts.repeats, prefix)?;
        let one = curve.ms(1);
        let one_floor = floor_ms(model.forward_work(prefix, 1), &c).0;
        for &(n, ms) in curve.points() {
            let work = model.forward_work(prefix, n);
            let (floor, bound) = floor_ms(work, &c);
            let kernel_floor = kernel_floor_ms(work, &c);
            rows.push(RooflineRow {
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
    for &prefix in &opts.prefixes {
        for &n in &opts.profile_nodes {
            let p = profile(model, tokenizer, &c, prefix, n, opts.repeats * 4, empty)?;
            profiles.push(p);
        }
    }
    Ok(Roofline {
        threads: exec.threads(),
        isa: exec.isa().name(),
        read_gb_per_s: c.read_bytes_per_s / 1e9,
        int8_gmacs_per_s: c.int8_macs_per_s / 1e9,
        f32_gmacs_per_s: c.f32_macs_per_s / 1e9,
        kernel_gmacs_per_s: WeightFormat::ALL
            .iter()
            .map(|&f| (f.name(), c.kernel_rate(f) / 1e9))
            .collect(),
        rows,
        profiles,
    })
}

/// Per prefix, the measured forward time by size against both floors (a log-log plot
/// would hide how flat the first sizes are: linear axes).
pub fn roofline_plots(r: &Roofline) -> Vec<Plot> {
    let mut prefixes: Vec<usize> = r.rows.iter().map(|row| row.prefix).collect();
    prefixes.dedup();
    prefixes
        .into_iter()
        .map(|prefix| {
            let rows: Vec<&RooflineRow> = r.rows.iter().filter(|x| x.prefix == prefix).collect();
            let line = |f: fn(&RooflineRow) -> f64| -> Vec<(f64, f64)> {
                rows.iter().map(|x| (x.n as f64, f(x))).collect()
            };
            Plot {
                file: format!("roofline-prefix-{prefix}.svg"),
                title: format!("Forward time against its floors, prefix {prefix}"),
                x_label: "nodes in the forward".into(),
                y_label: "ms per forward".into(),
                series: vec![
                    Series::new("measured", line(|x| x.ms)),
                    Series::reference("floor (kernels' own rate)", line(|x| x.kernel_floor_ms)),
                    Series::reference("floor (instruction peak)", line(|x| x.floor_ms)),
                ],
            }
        })
        .collect()
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

/// Runs `repeats` forwards of `n` chained nodes after `prefix` with profiling on.
fn profile(
    model: &Model,
    tokenizer: &Tokenizer,
    c: &Ceilings,
    prefix: usize,
    n: usize,
    repeats: usize,
    empty_dispatch_us: f64,
) -> Result<Profile, BenchError> {
    let (mut seq, tokens) = prefilled(model, tokenizer, prefix, n)?;
    let nodes = Node::chain(&tokens[prefix..prefix + n]);
    let forward = |seq: &mut Sequence| {
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
fn empty_dispatch_us(exec: &Executor) -> Result<f64, BenchError> {
    let mut per = Vec::new();
    for _ in 0..9 {
        let t = std::time::Instant::now();
        for _ in 0..2000 {
            exec.for_each(exec.threads(), &|_| {})
                .map_err(RuntimeError::from)?;
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / 2000.0);
    }
    Ok(median(per))
}
