//! Speculation options shared by `generate` and `bench`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use clap::Args;
use specdec_drafters::Trie;
use specdec_engine::SpecStats;
use specdec_tokenizer::Tokenizer;

#[derive(Args, Debug, Clone)]
pub struct DraftArgs {
    /// A reference document the output may copy from (repeatable).
    #[arg(long = "reference")]
    pub references: Vec<PathBuf>,
    /// A trie file to start from and to save the learned trie to.
    #[arg(long)]
    pub trie: Option<PathBuf>,
    /// Most draft nodes per step; the engine adapts below it.
    #[arg(long, default_value_t = 32)]
    pub budget: usize,
}

impl DraftArgs {
    pub fn reference_tokens(&self, tok: &Tokenizer) -> anyhow::Result<Vec<Vec<u32>>> {
        self.references
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading reference {}", p.display()))?;
                Ok(tok.encode(&text, false)?)
            })
            .collect()
    }

    /// The trie from `--trie` if the file exists, else an empty one.
    pub fn load_trie(&self) -> anyhow::Result<Arc<Mutex<Trie>>> {
        let path = self.trie.as_deref();
        specdec_engine::load_trie(path)
            .with_context(|| format!("loading trie {}", path.unwrap_or(Path::new("")).display()))
    }

    pub fn save_trie(&self, trie: &Arc<Mutex<Trie>>) -> anyhow::Result<()> {
        if let Some(p) = &self.trie {
            specdec_engine::save_trie(trie, p)
                .with_context(|| format!("saving trie {}", p.display()))?;
        }
        Ok(())
    }
}

/// Speculation statistics as printed in JSON reports.
#[derive(serde::Serialize)]
pub struct SpecReport {
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    pub mean_accepted_length: f64,
    pub accepted_by_position: Vec<usize>,
    pub accepted_by_source: std::collections::BTreeMap<&'static str, usize>,
    pub draft_ms: f64,
}

impl SpecReport {
    pub fn new(s: &SpecStats, completion_tokens: usize) -> Self {
        SpecReport {
            drafted_tokens: s.drafted_tokens,
            accepted_tokens: s.accepted_tokens,
            mean_accepted_length: s.mean_accepted_length(completion_tokens),
            accepted_by_position: s.accepted_by_position.clone(),
            accepted_by_source: s.accepted_by_source.clone(),
            draft_ms: s.draft_time.as_secs_f64() * 1e3,
        }
    }
}
