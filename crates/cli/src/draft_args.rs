//! Speculation options shared by `generate` and `bench`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use specdec_engine::{DraftMethod, DraftModel, PoolName, Pools, SpecStats, Tokenizer};

#[derive(Args, Debug, Clone)]
pub struct DraftArgs {
    /// A reference document the output may copy from (repeatable).
    #[arg(long = "reference")]
    pub references: Vec<PathBuf>,
    /// A trie file to start from and to save the learned trie to (the history index of
    /// past requests goes beside it, with the extension `history`).
    #[arg(long)]
    pub trie: Option<PathBuf>,
    /// Most draft nodes per step; the engine adapts below it.
    #[arg(long, default_value_t = 32)]
    pub budget: usize,
    /// Draft from (and feed) this named pool's trie instead of the global one.
    #[arg(long, value_parser = parse_pool)]
    pub pool: Option<PoolName>,
    /// Folder of the named pools (`NAME.trie` and `NAME.history` each), loaded when used
    /// and saved back.
    #[arg(long)]
    pub pools: Option<PathBuf>,
    /// The most tokens each pool's history index holds (oldest requests evicted first).
    #[arg(long, default_value_t = 1 << 20)]
    pub history_tokens: usize,
    /// The draft model of `--draft model` (and one more part of `auto`): a GGUF file or a
    /// known model's short name with the target's vocabulary (`qwen2.5-coder-0.5b` for
    /// `qwen2.5-coder-1.5b`).
    #[arg(long)]
    pub draft_model: Option<PathBuf>,
}

fn parse_pool(s: &str) -> Result<PoolName, String> {
    PoolName::parse(s).map_err(|e| e.to_string())
}

impl DraftArgs {
    /// Checks, before any model loads, that `--draft model` has its model.
    pub fn check(&self, method: DraftMethod) -> anyhow::Result<()> {
        if method == DraftMethod::Model && self.draft_model.is_none() {
            anyhow::bail!("--draft model needs --draft-model NAME|FILE (a model of the target's vocabulary, e.g. qwen2.5-coder-0.5b for qwen2.5-coder-1.5b)");
        }
        Ok(())
    }

    /// The draft model of `--draft-model`, loaded for `target`, if given.
    pub fn draft_model(
        &self,
        target: &crate::common::Loaded,
        threads: usize,
    ) -> anyhow::Result<Option<DraftModel>> {
        let Some(p) = &self.draft_model else {
            return Ok(None);
        };
        let path = crate::common::model_path(Some(p))?;
        let d = DraftModel::load(&path, &target.meta, &target.path, threads)
            .with_context(|| format!("loading the draft model {}", path.display()))?;
        Ok(Some(d))
    }

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

    /// The global pool from `--trie` (each file if it exists, else empty) and the pools of
    /// `--pools`; saved back to the same files. Files are checked against a vocabulary of
    /// `vocab` ids (the model's).
    pub fn pools(&self, vocab: usize) -> anyhow::Result<Pools> {
        let history = specdec_engine::HistoryConfig {
            max_tokens: self.history_tokens,
            ..specdec_engine::HistoryConfig::default()
        };
        Ok(Pools::open(
            self.trie.as_deref(),
            self.pools.clone(),
            vocab,
            history,
        )?)
    }
}

/// Saves what the engine's pools learned; a failed save is an error.
pub fn save_pools(engine: &mut specdec_engine::Engine<'_>) -> anyhow::Result<()> {
    for (path, result) in engine.save_drafting_state() {
        result.with_context(|| format!("saving {}", path.display()))?;
    }
    Ok(())
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
