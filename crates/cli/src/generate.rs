//! `specdec generate`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use specdec_engine::{DraftMethod, Engine, GenerateRequest, Speculation};

use crate::common::{self, ModelArgs};
use crate::draft_args::{save_pools, DraftArgs, SpecReport};
use crate::sampling_args::SamplingArgs;
use crate::verify_args::VerifyArgs;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The prompt text.
    #[arg(
        long,
        conflicts_with = "prompt_file",
        required_unless_present = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Wrap the prompt as a user turn in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// System message (with --chat).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop when this text appears (repeatable); it is not included in the output.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Draft method: none, reference, prompt, trie, suffix, history, model (with
    /// --draft-model) or auto.
    #[arg(long, default_value = "auto", value_parser = DraftMethod::parse)]
    pub draft: DraftMethod,
    #[command(flatten)]
    pub drafting: DraftArgs,
    #[command(flatten)]
    pub verify: VerifyArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON object with the text and statistics instead of streaming.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    text: String,
    token_ids: Vec<u32>,
    prompt_tokens: usize,
    completion_tokens: usize,
    forward_passes: usize,
    finish_reason: &'static str,
    prefill_ms: f64,
    elapsed_ms: f64,
    /// Completion tokens per second of decoding (prefill excluded).
    tokens_per_second: f64,
    draft_method: &'static str,
    /// Whether a relaxed acceptance rule verified the drafts (else the output is plain
    /// decoding's).
    relaxed: bool,
    /// The rule that verified the drafts: `strict` or `relaxed`.
    verify: &'static str,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    relaxed_tokens: usize,
    #[serde(flatten)]
    spec: SpecReport,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let prompt = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading prompt file {}", f.display()))?,
        (None, None) => anyhow::bail!("give --prompt or --prompt-file"),
    };
    let sampling = args.sampling.params();
    // Before the model loads: a bad rule is the command line's problem.
    let spec = args.verify.spec(args.draft, &sampling)?;
    args.drafting.check(args.draft)?;
    let verify = spec.acceptance.name();
    let loaded = common::load(&args.model)?;
    let draft_model = args.drafting.draft_model(&loaded, args.model.threads)?;
    let tokens = loaded.prompt_tokens(&prompt, args.chat, args.system.as_deref())?;
    common::check_context(
        tokens.len(),
        args.max_tokens,
        loaded.model.config().context_length,
    )?;
    let req = GenerateRequest {
        sampling,
        stop: args.stop.clone(),
        speculation: Speculation {
            max_draft: args.drafting.budget,
            references: args.drafting.reference_tokens(&loaded.tokenizer)?,
            pool: args.drafting.pool.clone(),
            ..spec.into()
        },
        ..GenerateRequest::new(tokens, args.max_tokens)
    };
    let mut engine = Engine::new(&loaded.model, &loaded.tokenizer)
        .with_pools(args.drafting.pools(loaded.model.config().vocab)?);
    if let Some(d) = draft_model {
        engine = engine.with_draft_model(d);
    }
    let stdout = std::io::stdout();
    let out = if args.json {
        engine.generate(&req, &mut |_| true)?
    } else {
        let mut lock = stdout.lock();
        let out = engine.generate(&req, &mut |t| {
            // A closed pipe (e.g. `| head`) ends generation instead of failing it.
            lock.write_all(t.as_bytes())
                .and_then(|_| lock.flush())
                .is_ok()
        })?;
        let _ = writeln!(lock);
        out
    };
    save_pools(&mut engine)?;
    if args.json {
        let decode = (out.elapsed - out.prefill_time).as_secs_f64();
        let report = Report {
            text: out.text,
            token_ids: out.token_ids,
            prompt_tokens: out.prompt_tokens,
            completion_tokens: out.completion_tokens,
            forward_passes: out.forward_passes,
            finish_reason: out.finish_reason.as_str(),
            prefill_ms: out.prefill_time.as_secs_f64() * 1e3,
            elapsed_ms: out.elapsed.as_secs_f64() * 1e3,
            tokens_per_second: if decode > 0.0 {
                out.completion_tokens as f64 / decode
            } else {
                0.0
            },
            draft_method: args.draft.name(),
            relaxed: out.relaxed,
            verify,
            relaxed_tokens: out.spec.relaxed_tokens,
            spec: SpecReport::new(&out.spec, out.completion_tokens),
        };
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}
