//! `specdec bench roofline`: prints what `specdec_bench::roofline` measures (every forward
//! size against the floor this machine puts under it, and where a forward's time goes), as
//! tables, JSON, or a report directory with the curves against their floors.

use std::path::Path;

use specdec_bench::report::{Report, Section, Table};
use specdec_bench::roofline::{measure, roofline_plots, Profile, Roofline, RooflineOptions};

use crate::common::{self, ModelArgs};

pub fn run(
    args: &ModelArgs,
    opts: &RooflineOptions,
    json: bool,
    report: Option<&Path>,
) -> anyhow::Result<()> {
    let loaded = common::load(args)?;
    let r = measure(&loaded.model, &loaded.tokenizer, opts)?;
    if let Some(dir) = report {
        let name = loaded
            .path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy();
        let index = write_report(dir, &name, &r)?;
        eprintln!("report: {}", index.display());
    }
    if json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!("{}", ceilings_line(&r, Some(opts.buffer_mib)));
    println!(
        "the matmul kernels on cached weights, G MAC/s (of the int8 peak): {}",
        kernel_rates(&r)
    );
    let w1 = loaded.model.forward_work(opts.prefixes[0], 1);
    println!(
        "one row reads {:.1} MB and does {:.1} M int8 multiply-adds",
        w1.bytes as f64 / 1e6,
        w1.int8_macs as f64 / 1e6
    );
    let t = rows_table(&r);
    println!(
        "{:>6} {:>4} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8}",
        t.header[0],
        t.header[1],
        t.header[2],
        t.header[3],
        t.header[4],
        t.header[5],
        t.header[6],
        t.header[7],
        t.header[8],
        t.header[9]
    );
    for row in &t.rows {
        println!(
            "{:>6} {:>4} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8}",
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9]
        );
    }
    r.profiles.iter().for_each(print_profile);
    Ok(())
}

/// The machine's ceilings in one line (`buffer_mib`: the bandwidth probe's buffer, said
/// when given).
fn ceilings_line(r: &Roofline, buffer_mib: Option<usize>) -> String {
    let buffer = buffer_mib.map_or(String::new(), |b| format!(" ({b} MiB buffer)"));
    format!(
        "{} threads, {}: streaming read {:.1} GB/s{buffer}, int8 dot {:.0} G MAC/s, f32 FMA {:.0} G MAC/s",
        r.threads, r.isa, r.read_gb_per_s, r.int8_gmacs_per_s, r.f32_gmacs_per_s,
    )
}

fn kernel_rates(r: &Roofline) -> String {
    let rates: Vec<String> = r
        .kernel_gmacs_per_s
        .iter()
        .map(|(f, rate)| format!("{f} {rate:.0} ({:.0}%)", 100.0 * rate / r.int8_gmacs_per_s))
        .collect();
    rates.join(", ")
}

/// Every forward size against its floors, one row each (the terminal's table and the
/// report's).
fn rows_table(r: &Roofline) -> Table {
    let header = [
        "prefix",
        "n",
        "ms",
        "floor ms",
        "bound",
        "fraction",
        "kernel",
        "fraction",
        "n/1",
        "floor n/1",
    ];
    Table {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows: r
            .rows
            .iter()
            .map(|x| {
                vec![
                    x.prefix.to_string(),
                    x.n.to_string(),
                    format!("{:.2}", x.ms),
                    format!("{:.2}", x.floor_ms),
                    x.bound.to_string(),
                    format!("{:.0}%", 100.0 * x.fraction),
                    format!("{:.2}", x.kernel_floor_ms),
                    format!("{:.0}%", 100.0 * x.kernel_fraction),
                    format!("{:.2}", x.ratio_to_one),
                    format!("{:.2}", x.floor_ratio_to_one),
                ]
            })
            .collect(),
    }
}

fn write_report(dir: &Path, model: &str, r: &Roofline) -> anyhow::Result<std::path::PathBuf> {
    let report = Report {
        title: format!("Roofline of {model}"),
        intro: vec![
            ceilings_line(r, None),
            format!(
                "Matmul kernels on cached weights, G MAC/s (of the int8 peak): {}.",
                kernel_rates(r)
            ),
            "A forward's floor is the larger of its bytes over the streaming bandwidth and its \
             multiply-adds over the peak rates; the kernels' floor uses the kernels' own \
             measured rate instead of the instruction's peak. Fraction is floor over measured."
                .into(),
        ],
        sections: vec![Section {
            heading: "Forward sizes".into(),
            text: Vec::new(),
            table: Some(rows_table(r)),
            plots: roofline_plots(r),
        }],
    };
    Ok(report.write(dir)?)
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
