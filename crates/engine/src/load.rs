//! Opening a model file once for everything a caller needs: the weights for the engine,
//! and the tokenizer, chat template and configuration for the edge.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use specdec_gguf::GgufFile;
use specdec_runtime::{Executor, Model, ModelConfig};
use specdec_tokenizer::{ChatTemplate, Tokenizer};

use crate::beam::{DraftScoring, DRAFT_SCORING_KEY};
use crate::EngineError;

/// What the edge needs of a model, without its weights.
pub struct ModelMeta {
    /// The model's hyper-parameters.
    pub config: ModelConfig,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The file's template, or ChatML when it has none.
    pub template: Arc<ChatTemplate>,
    /// Whether the file has its own template (a base model such as Gemma 3 270M has none:
    /// `template` is then ChatML, which the model never saw).
    pub has_template: bool,
}

fn open(path: &Path) -> Result<GgufFile, EngineError> {
    GgufFile::open(path).map_err(|e| EngineError::ModelFile {
        path: path.to_path_buf(),
        source: e.into(),
    })
}

fn meta(file: &GgufFile, config: ModelConfig, path: &Path) -> Result<ModelMeta, EngineError> {
    let tokenizer = Tokenizer::from_gguf(file).map_err(|source| EngineError::ModelTokenizer {
        path: path.to_path_buf(),
        source,
    })?;
    let own = ChatTemplate::from_gguf(file)?;
    let has_template = own.is_some();
    let template = match own {
        Some(t) => t,
        None => ChatTemplate::from_gguf_or_chatml(file)?,
    };
    Ok(ModelMeta {
        config,
        tokenizer: Arc::new(tokenizer),
        template: Arc::new(template),
        has_template,
    })
}

impl ModelMeta {
    /// Reads the configuration, tokenizer and template of the GGUF at `path`; no weights.
    pub fn open(path: &Path) -> Result<ModelMeta, EngineError> {
        let file = open(path)?;
        let config = ModelConfig::from_gguf(&file).map_err(|source| EngineError::ModelFile {
            path: path.to_path_buf(),
            source,
        })?;
        meta(&file, config, path)
    }
}

/// A model loaded for decoding, with its edge.
pub struct Loaded {
    /// The weights, ready to run.
    pub model: Model,
    /// Its configuration, tokenizer and template.
    pub meta: ModelMeta,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// How the file says its logits are to be read as a draft's
    /// ([`DRAFT_SCORING_KEY`]; a target ignores it).
    pub draft_scoring: DraftScoring,
}

impl Loaded {
    /// Loads the GGUF at `path` on `threads` kernel threads.
    pub fn open(path: &Path, threads: usize) -> Result<Loaded, EngineError> {
        Self::from_file(&open(path)?, path, threads)
    }

    fn from_file(file: &GgufFile, path: &Path, threads: usize) -> Result<Loaded, EngineError> {
        let model = Model::from_gguf(file, Executor::new(threads.max(1))).map_err(|source| {
            EngineError::ModelFile {
                path: path.to_path_buf(),
                source,
            }
        })?;
        let meta = meta(file, model.config().clone(), path)?;
        let declared = file
            .get(DRAFT_SCORING_KEY)
            .map(|v| v.as_str().unwrap_or("(not a string)"));
        let draft_scoring =
            DraftScoring::parse(declared).map_err(|message| EngineError::DraftScoring {
                path: path.to_path_buf(),
                message,
            })?;
        tracing::info!(
            "loaded {} ({} layers, vocabulary {}, context {}) from {} on {} threads",
            meta.config.name,
            meta.config.n_layers,
            meta.config.vocab,
            meta.config.context_length,
            path.display(),
            threads.max(1)
        );
        Ok(Loaded {
            model,
            meta,
            path: path.to_path_buf(),
            draft_scoring,
        })
    }
}

/// Loads the GGUF at `path` as a draft model for `target`: any model whose tokenizer has the
/// target's vocabulary (the same token strings, in order) and whose head scores that many
/// tokens, since a draft's token ids are proposed to the target as they are. Its own
/// configuration (layers, context length) is carried in the result. The vocabulary is
/// checked before the weights are loaded.
pub fn load_draft(path: &Path, target: &ModelMeta, threads: usize) -> Result<Loaded, EngineError> {
    let file = open(path)?;
    let tokenizer = Tokenizer::from_gguf(&file).map_err(|source| EngineError::ModelTokenizer {
        path: path.to_path_buf(),
        source,
    })?;
    let mismatch = |difference: String| EngineError::DraftVocabulary {
        path: path.to_path_buf(),
        difference,
    };
    if let Some(d) = vocabulary_difference(&tokenizer, &target.tokenizer) {
        return Err(mismatch(d));
    }
    let draft = Loaded::from_file(&file, path, threads)?;
    if draft.meta.config.vocab != target.config.vocab {
        return Err(mismatch(format!(
            "its head scores {} tokens, the target's {}",
            draft.meta.config.vocab, target.config.vocab
        )));
    }
    Ok(draft)
}

/// How `draft`'s vocabulary differs from `target`'s, if it does.
fn vocabulary_difference(draft: &Tokenizer, target: &Tokenizer) -> Option<String> {
    let (n, m) = (draft.vocab_size(), target.vocab_size());
    let first = (0..n.min(m) as u32).find(|&id| draft.token_bytes(id) != target.token_bytes(id));
    match first {
        Some(id) => Some(format!(
            "{n} tokens, first difference at id {id}: {:?} where the target has {:?}",
            draft.token_text(id).unwrap_or_default(),
            target.token_text(id).unwrap_or_default()
        )),
        None if n != m => Some(format!(
            "{n} tokens where the target has {m}, the shorter a prefix of the longer"
        )),
        None => None,
    }
}
