//! Writes every workload to OUT_DIR/<kind>.jsonl and prints counts and timings.
//! Usage: write_workloads OUT_DIR [LIMIT|all] [MAX_TOKENS]

use std::time::Instant;

use specdec_workloads::{build, write_jsonl, DataDirs, WorkloadKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = std::path::PathBuf::from(
        args.first()
            .ok_or("usage: OUT_DIR [LIMIT|all] [MAX_TOKENS]")?,
    );
    let limit = match args.get(1).map(String::as_str) {
        None => 30,
        Some("all") => usize::MAX,
        Some(n) => n.parse()?,
    };
    let max_tokens = args.get(2).map_or(Ok(256), |s| s.parse())?;
    let dirs = DataDirs::from_env()?;
    for &kind in WorkloadKind::all() {
        let started = Instant::now();
        let records = build(kind, &dirs, limit, max_tokens)?;
        let path = out.join(format!("{kind}.jsonl"));
        write_jsonl(&records, &path)?;
        let bytes: usize = records.iter().map(|r| r.prompt.len()).sum();
        println!(
            "{kind}: {} records, mean prompt {} bytes, {:.2?} -> {}",
            records.len(),
            bytes / records.len().max(1),
            started.elapsed(),
            path.display()
        );
    }
    Ok(())
}
