//! The `specdec` command line.

mod bench;
mod common;
mod data_cmd;
mod draft_args;
mod draft_cmd;
mod generate;
mod model_cmd;
mod rec;
mod replay_cmd;
mod roofline;
mod sampling_args;
mod serve;
mod verify_args;
mod workload;
mod workload_report;

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
    /// Draft models for speculative decoding (a self-draft of the target's first layers).
    Draft {
        #[command(subcommand)]
        command: draft_cmd::DraftCommand,
    },
    /// Benchmarks: forward cost curve, or a workload of prompts.
    // Boxed: its flags make it many times larger than the other commands.
    Bench(Box<bench::BenchArgs>),
    /// Serve the OpenAI API (chat, completions, streaming, Predicted Outputs).
    Serve(serve::ServeArgs),
    /// Build benchmark workloads from real datasets.
    Data {
        #[command(subcommand)]
        command: data_cmd::DataCommand,
    },
    /// Recommendation: MovieLens records, knowledge generation (LASER), its quality and
    /// benchmark.
    Rec {
        #[command(subcommand)]
        command: rec::RecCommand,
    },
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: `info` for the server, `warn`
/// otherwise, so generated text on stdout stays clean and failures are still heard).
fn init_logging(command: &Command) {
    let default = match command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn main() {
    let cli = Cli::parse();
    init_logging(&cli.command);
    let result = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Model { command } => model_cmd::run(command),
        Command::Draft { command } => draft_cmd::run(command),
        Command::Bench(args) => bench::run(*args),
        Command::Data { command } => data_cmd::run(command),
        Command::Serve(args) => serve::run(args),
        Command::Rec { command } => rec::run(command),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
