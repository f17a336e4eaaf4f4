//! `specdec rec`: the recommendation half (docs/recsys.md): data, knowledge jobs, their quality
//! and their benchmark.

pub(crate) mod beam_args;
mod bench;
mod eval;
mod eval_draft;
mod knowledge;
mod prepare;
mod quality;
pub mod recommend;
mod replay;
mod train_draft;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum RecCommand {
    /// Fetch MovieLens-100k and write the knowledge records (users and items, with groups
    /// and warm-up/target roles).
    Prepare(prepare::Args),
    /// Generate knowledge for every record of a JSONL file (resumable, shardable).
    Knowledge(knowledge::Args),
    /// Compare relaxed with strict knowledge, and run the downstream CTR check.
    Quality(quality::Args),
    /// Plain vs strict and relaxed speculation with and without pools, interleaved.
    Bench(bench::Args),
    /// The knowledge job's drafting replayed over a strict job's outputs (no target
    /// forward): acceptance and modeled speedup of each method with per-group pools.
    Replay(replay::Args),
    /// Generative recommendation over the evaluation users: plain constrained beam search
    /// against jump-forward and speculative beam search, interleaved (AtSpeed).
    Eval(eval::Args),
    /// Drafts side by side on held-out users: accepted steps per round and end-to-end
    /// speedup of strict and relaxed speculative beam search for each.
    EvalDraft(eval_draft::Args),
    /// The K items a history leads the model to (catalogue-constrained beam search).
    Recommend(recommend::Args),
    /// Train a draft for speculative beam search on the target's own top-K beams
    /// (AtSpeed-S, AtSpeed-R, KD or CE) and write it as a GGUF.
    TrainDraft(train_draft::Args),
}

pub fn run(cmd: RecCommand) -> anyhow::Result<()> {
    match cmd {
        RecCommand::Prepare(a) => prepare::run(a),
        RecCommand::Knowledge(a) => knowledge::run(a),
        RecCommand::Quality(a) => quality::run(a),
        RecCommand::Bench(a) => bench::run(a),
        RecCommand::Replay(a) => replay::run(a),
        RecCommand::Eval(a) => eval::run(a),
        RecCommand::EvalDraft(a) => eval_draft::run(a),
        RecCommand::Recommend(a) => recommend::run(a),
        RecCommand::TrainDraft(a) => train_draft::run(a),
    }
}

/// What the recommendation commands start from: MovieLens (fetched and cached), its split,
/// the model and the catalogue in its tokenization (cached).
pub(crate) struct MovieLensSetup {
    pub dirs: specdec_workloads::DataDirs,
    pub data: specdec_rec::movielens::Dataset,
    pub split: specdec_rec::split::Split,
    pub path: std::path::PathBuf,
    pub loaded: specdec_engine::Loaded,
    pub catalogue: specdec_rec::recommend::ItemCatalogue,
}

pub(crate) fn movielens_setup(model: &crate::common::ModelArgs) -> anyhow::Result<MovieLensSetup> {
    use anyhow::Context;
    let dirs = specdec_workloads::DataDirs::from_env()?;
    let data = specdec_rec::movielens::Dataset::fetch(&dirs).context("fetching MovieLens-100k")?;
    let split = specdec_rec::split::Split::leave_last_out(&data);
    let path = crate::common::model_path(model.model.as_deref())?;
    let loaded = specdec_engine::Loaded::open(&path, model.threads)?;
    let cache = dirs
        .cache
        .join(specdec_rec::recommend::catalogue::CACHE_SUBDIR);
    let catalogue = specdec_rec::recommend::ItemCatalogue::from_dataset_cached(
        &data,
        &loaded.meta.tokenizer,
        &cache,
    )?;
    Ok(MovieLensSetup {
        dirs,
        data,
        split,
        path,
        loaded,
        catalogue,
    })
}

/// The CPU's model name (benchmarks say which machine their figures come from).
pub(crate) fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
