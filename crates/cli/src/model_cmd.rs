//! `specdec model fetch|info`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Subcommand;
use specdec_gguf::GgufFile;
use specdec_runtime::ModelConfig;

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Download, verify and cache a known model: the default (SmolLM2-135M-Instruct Q4_1,
    /// `smollm2-135m`), `gemma-3-270m`, `qwen2.5-coder-1.5b` or `qwen2.5-coder-0.5b`.
    Fetch {
        /// The model's short name.
        #[arg(default_value = "smollm2-135m")]
        name: String,
        /// Download again even if cached.
        #[arg(long)]
        force: bool,
    },
    /// Print a model's architecture, context, vocabulary and tensor types.
    Info {
        #[arg(long)]
        model: Option<PathBuf>,
    },
}

pub fn run(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::Fetch { name, force } => {
            let Some(m) = specdec_model_store::by_name(&name) else {
                let known: Vec<&str> = specdec_model_store::KNOWN_MODELS
                    .iter()
                    .map(|m| m.short_name)
                    .collect();
                anyhow::bail!("unknown model `{name}` (known: {})", known.join(", "));
            };
            let path = if force {
                specdec_model_store::fetch(m, false)?
            } else {
                specdec_model_store::ensure(m, false)?
            };
            println!("{}", path.display());
        }
        ModelCommand::Info { model } => {
            let path = crate::common::model_path(model.as_deref())?;
            let file = GgufFile::open(&path)?;
            let cfg = ModelConfig::from_gguf(&file)?;
            let mut types: BTreeMap<String, usize> = BTreeMap::new();
            for t in &file.tensors {
                *types.entry(format!("{:?}", t.ty)).or_default() += 1;
            }
            println!("file:            {}", path.display());
            println!("name:            {}", cfg.name);
            println!("architecture:    {:?}", cfg.arch);
            println!("context length:  {}", cfg.context_length);
            println!("vocabulary:      {}", cfg.vocab);
            println!(
                "layers:          {} (hidden {}, ffn {}, {} heads / {} kv heads of {})",
                cfg.n_layers, cfg.hidden, cfg.ffn, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
            );
            println!(
                "rope:            base {} ({:?})",
                cfg.rope_base, cfg.rope_style
            );
            let types: Vec<String> = types.iter().map(|(t, n)| format!("{t} x{n}")).collect();
            println!("tensor types:    {}", types.join(", "));
            // Matrices the kernels do not run as stored are converted to Q8_0 at load
            // (more bytes to stream per token than the file holds). The token embedding
            // stays as stored: one row is dequantized per token.
            let mut converted: BTreeMap<String, usize> = BTreeMap::new();
            let matrices = file.tensors.iter().filter(|t| t.dims.len() == 2);
            for t in matrices.filter(|t| t.name != specdec_gguf::names::TOKEN_EMBD) {
                if specdec_runtime::native_format(t.ty).is_none() {
                    *converted.entry(format!("{:?}", t.ty)).or_default() += 1;
                }
            }
            let converted: Vec<String> =
                converted.iter().map(|(t, n)| format!("{t} x{n}")).collect();
            println!(
                "converted:       {}",
                if converted.is_empty() {
                    "none (every quantized matrix runs in its own format)".to_string()
                } else {
                    format!("{} to Q8_0 at load", converted.join(", "))
                }
            );
            println!(
                "tokenizer:       {}",
                file.get("tokenizer.ggml.model")
                    .and_then(|v| v.as_str())
                    .unwrap_or("none")
            );
            println!(
                "chat template:   {}",
                if file.get("tokenizer.chat_template").is_some() {
                    "yes"
                } else {
                    "no"
                }
            );
        }
    }
    Ok(())
}
