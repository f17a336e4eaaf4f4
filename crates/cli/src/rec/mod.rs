//! `specdec rec`: the recommendation half (RECSYS.md): data, knowledge jobs, their quality
//! and their benchmark.

mod bench;
mod knowledge;
mod prepare;
mod quality;

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
}

pub fn run(cmd: RecCommand) -> anyhow::Result<()> {
    match cmd {
        RecCommand::Prepare(a) => prepare::run(a),
        RecCommand::Knowledge(a) => knowledge::run(a),
        RecCommand::Quality(a) => quality::run(a),
        RecCommand::Bench(a) => bench::run(a),
    }
}
