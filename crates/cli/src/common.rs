//! Loading what every command needs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use specdec_engine::{ChatMessage, ChatTemplate, Model, Tokenizer};

#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// A local GGUF file or a known model's short name (`smollm2-135m`, `gemma-3-270m`,
    /// `qwen2.5-coder-1.5b`, `qwen2.5-coder-0.5b`: fetched on first use); default:
    /// $SPECDEC_MODEL, else SmolLM2-135M-Instruct Q4_1.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Kernel threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

pub struct Loaded {
    pub model: Model,
    pub tokenizer: Arc<Tokenizer>,
    /// The file's template, or ChatML when it has none.
    pub template: Arc<ChatTemplate>,
    /// What a draft model is checked against, and the file it came from.
    pub meta: specdec_engine::ModelMeta,
    pub path: PathBuf,
}

pub fn model_path(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(specdec_model_store::resolve(explicit, false)?)
}

pub fn load(args: &ModelArgs) -> anyhow::Result<Loaded> {
    let path = model_path(args.model.as_deref())?;
    let l = specdec_engine::Loaded::open(&path, args.threads)
        .with_context(|| format!("loading {}", path.display()))?;
    Ok(Loaded {
        model: l.model,
        tokenizer: l.meta.tokenizer.clone(),
        template: l.meta.template.clone(),
        meta: l.meta,
        path,
    })
}

impl Loaded {
    /// Prompt tokens for raw text or a one-turn chat (see [`prompt_tokens`]).
    pub fn prompt_tokens(
        &self,
        prompt: &str,
        chat: bool,
        system: Option<&str>,
    ) -> anyhow::Result<Vec<u32>> {
        prompt_tokens(&self.meta, prompt, chat, system)
    }
}

/// Prompt tokens for raw text (special-token text in it is parsed, as the user typed it),
/// or for a one-turn chat through the model's template (the prompt and system message are
/// contents, so special-token text in them stays text). Needs the model's metadata only,
/// not its weights.
pub fn prompt_tokens(
    meta: &specdec_engine::ModelMeta,
    prompt: &str,
    chat: bool,
    system: Option<&str>,
) -> anyhow::Result<Vec<u32>> {
    if !chat {
        return Ok(meta.tokenizer.encode_prompt(prompt)?);
    }
    if !meta.has_template {
        eprintln!(
            "warning: this model has no chat template; --chat wraps the prompt in ChatML, \
             which it was not trained on (without --chat the prompt is completed as text)"
        );
    }
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(ChatMessage::new("system", s));
    }
    messages.push(ChatMessage::new("user", prompt));
    // The prompt is a message: special-token text in it stays text.
    Ok(meta
        .tokenizer
        .encode_chat(&meta.template, &messages, true)?)
}

/// An error unless a prompt of `prompt` tokens and `max_tokens` more fit a context of
/// `context` tokens. The sum is checked: a `--max-tokens` near 2^64 wrapped `prompt +
/// max_tokens` to a small number that passed the engine's context check.
pub fn check_context(prompt: usize, max_tokens: usize, context: usize) -> anyhow::Result<()> {
    match prompt.checked_add(max_tokens) {
        Some(needed) if needed <= context => Ok(()),
        _ => anyhow::bail!(
            "the prompt has {prompt} tokens and --max-tokens is {max_tokens}: together they \
             exceed the model's context of {context} tokens; shorten the prompt or lower \
             --max-tokens"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_near_2_to_the_64_is_refused_not_wrapped() {
        assert!(check_context(10, 100, 110).is_ok());
        assert!(check_context(10, 101, 110).is_err());
        // 5 + (2^64 - 4) wraps to 1, which "fits" any context.
        for max_tokens in [usize::MAX, usize::MAX - 4, usize::MAX - 9] {
            let e = check_context(5, max_tokens, 8192).unwrap_err().to_string();
            assert!(e.contains("context of 8192"), "{e}");
            assert!(e.contains(&max_tokens.to_string()), "{e}");
        }
    }
}
