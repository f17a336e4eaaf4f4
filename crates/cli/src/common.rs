//! Loading what every command needs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use specdec_gguf::GgufFile;
use specdec_runtime::{Executor, Model};
use specdec_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// A local GGUF file (default: $SPECDEC_MODEL, else SmolLM2-135M-Instruct Q4_1, fetched
    /// on first use).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Kernel threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// The file's template, or ChatML when it has none.
    pub template: ChatTemplate,
}

pub fn model_path(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(specdec_model_store::resolve(explicit, false)?)
}

pub fn load(args: &ModelArgs) -> anyhow::Result<Loaded> {
    let path = model_path(args.model.as_deref())?;
    let file = GgufFile::open(&path).with_context(|| format!("loading {}", path.display()))?;
    let tokenizer =
        Tokenizer::from_gguf(&file).with_context(|| format!("tokenizer of {}", path.display()))?;
    let template = ChatTemplate::from_gguf_or_chatml(&file)?;
    let model = Model::from_gguf(&file, Executor::new(args.threads.max(1)))
        .with_context(|| format!("model {}", path.display()))?;
    Ok(Loaded {
        model,
        tokenizer,
        template,
    })
}

impl Loaded {
    /// Prompt tokens for raw text, or for a one-turn chat through the model's template.
    pub fn prompt_tokens(
        &self,
        prompt: &str,
        chat: bool,
        system: Option<&str>,
    ) -> anyhow::Result<Vec<u32>> {
        if !chat {
            return Ok(self.tokenizer.encode_prompt(prompt)?);
        }
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.push(ChatMessage::new("user", prompt));
        let text = self.template.render(&messages, true)?;
        Ok(self.tokenizer.encode_prompt(&text)?)
    }
}
