//! `specdec data build`: benchmark workloads from the real datasets.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;
use specdec_workloads::{build, write_jsonl, DataDirs, WorkloadKind};

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Fetch the datasets (cached) and write one JSONL workload per kind.
    Build {
        /// Kinds to build: faq-rag, humaneval-rewrite, sharegpt-passage, sharegpt-chat,
        /// faq-forced (with `answer`s for `bench --forced`), chat-repeats (first, repeat
        /// and edit classes).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "faq-rag,humaneval-rewrite,sharegpt-passage,sharegpt-chat"
        )]
        kind: Vec<String>,
        /// Output directory (one KIND.jsonl per kind).
        #[arg(long, default_value = "workloads")]
        out: PathBuf,
        /// Records per kind.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// max_tokens written into each record.
        #[arg(long, default_value_t = 128)]
        max_tokens: usize,
    },
}

pub fn run(cmd: DataCommand) -> anyhow::Result<()> {
    let DataCommand::Build {
        kind,
        out,
        limit,
        max_tokens,
    } = cmd;
    let kinds = kind
        .iter()
        .map(|k| {
            WorkloadKind::parse(k).with_context(|| {
                let names: Vec<&str> = WorkloadKind::all().iter().map(|k| k.name()).collect();
                format!("unknown workload kind `{k}` (known: {})", names.join(", "))
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dirs = DataDirs::from_env()?;
    for k in kinds {
        let t = Instant::now();
        let records = build(k, &dirs, limit, max_tokens)?;
        let path = out.join(format!("{}.jsonl", k.name()));
        write_jsonl(&records, &path)?;
        eprintln!(
            "{}: {} records -> {} ({:.1} s)",
            k.name(),
            records.len(),
            path.display(),
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
