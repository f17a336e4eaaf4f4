//! `specdec rec prepare`: fetch MovieLens-100k (cached) and write the knowledge records and
//! their groups (docs/recsys.md).

use std::path::PathBuf;
use std::time::Instant;

use specdec_rec::groups::{WarmupFraction, DEFAULT_USER_CLUSTERS};
use specdec_rec::movielens::Dataset;
use specdec_rec::prepare::{self, PrepareConfig, ITEMS_FILE, USERS_FILE};
use specdec_rec::split::DEFAULT_HISTORY;
use specdec_workloads::DataDirs;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output directory: users.jsonl, items.jsonl and groups.json.
    #[arg(long)]
    out: PathBuf,
    /// Rated movies in a user prompt (the most recent training ones).
    #[arg(long, default_value_t = DEFAULT_HISTORY)]
    history: usize,
    /// k-means clusters of users.
    #[arg(long, default_value_t = DEFAULT_USER_CLUSTERS)]
    user_clusters: usize,
    /// Share of each group's members that are warm-up members (0 to 1).
    #[arg(long, default_value_t = WarmupFraction::default(), value_parser = parse_fraction)]
    warmup_fraction: WarmupFraction,
    /// max_tokens written into every record (omitted: the job's default).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// A small sample: the first N warm-up and first N target members of each group.
    #[arg(long)]
    limit_per_group: Option<usize>,
}

fn parse_fraction(s: &str) -> Result<WarmupFraction, String> {
    let f: f64 = s.parse().map_err(|e| format!("{e}"))?;
    WarmupFraction::new(f).map_err(|e| e.to_string())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let data = Dataset::fetch(&DataDirs::from_env()?)?;
    let config = PrepareConfig {
        history: args.history,
        user_clusters: args.user_clusters,
        warmup: args.warmup_fraction,
        max_tokens: args.max_tokens,
        limit_per_group: args.limit_per_group,
    };
    let prepared = prepare::prepare(&data, &config)?;
    prepare::write(&args.out, &prepared)?;

    eprintln!(
        "{:<16} {:>5} {:>8} {:>7} {:>8}",
        "group", "kind", "members", "warm-up", "target"
    );
    for (name, g) in &prepared.summary.groups {
        let kind = match g.kind {
            specdec_rec::Kind::User => "user",
            specdec_rec::Kind::Item => "item",
        };
        eprintln!(
            "{name:<16} {kind:>5} {:>8} {:>7} {:>8}",
            g.members, g.written_warmup, g.written_target
        );
    }
    eprintln!(
        "{} user and {} item records -> {} and {} in {} ({:.1} s)",
        prepared.users.len(),
        prepared.items.len(),
        USERS_FILE,
        ITEMS_FILE,
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
