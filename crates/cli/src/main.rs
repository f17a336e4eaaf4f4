//! The `specdec` command line.

mod bench;
mod common;
mod data_cmd;
mod draft_args;
mod generate;
mod model_cmd;
mod oracle;
mod serve;
mod workload;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "specdec",
    version,
    about = "Lossless speculative decoding for LLMs on CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (streams to stdout).
    Generate(generate::GenerateArgs),
    /// Fetch or inspect models.
    Model {
        #[command(subcommand)]
        command: model_cmd::ModelCommand,
    },
    /// Benchmarks: forward cost curve, or a workload of prompts.
    Bench(bench::BenchArgs),
    /// Serve the OpenAI API (chat, completions, streaming, Predicted Outputs).
    Serve(serve::ServeArgs),
    /// Build benchmark workloads from real datasets.
    Data {
        #[command(subcommand)]
        command: data_cmd::DataCommand,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Model { command } => model_cmd::run(command),
        Command::Bench(args) => bench::run(args),
        Command::Data { command } => data_cmd::run(command),
        Command::Serve(args) => serve::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
