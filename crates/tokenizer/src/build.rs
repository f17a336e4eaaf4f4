//! Building the HF `tokenizers` encoder a GGUF's metadata describes.

use std::collections::HashMap;

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormSequence, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::meta::{self, Meta, TokenType};
use crate::{Result, TokenizerError};

/// How text is cut into words before BPE, chosen from `tokenizer.ggml.pre` the way llama.cpp
/// chooses its pre-tokenizer regexes (and matching the `tokenizer.json` of those models).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizerKind {
    /// GPT-2's regex (HF `ByteLevel` with `use_regex`): `default`, `gpt2`, `gpt-2`, `mpt`,
    /// `olmo`, `jais`, `phi-2`, and the fallback for names we do not know.
    Gpt2,
    /// Every digit on its own, then GPT-2's regex: `smollm`, `starcoder`, `refact`,
    /// `command-r`, `codeshell`, `exaone`, `minerva-7b`. SmolLM2's tokenizer.json is exactly
    /// `Digits(individual_digits) + ByteLevel`.
    Digits,
    /// Llama 3's regex (digits in groups of up to three), with `ignore_merges` as in Llama 3's
    /// tokenizer.json: `llama3`, `llama-v3`, `llama-bpe`, `falcon3`, `pixtral`, `dbrx`, ...
    Llama3,
    /// Qwen2's regex (single digits) and its NFC normalizer: `qwen2`, `deepseek-r1-qwen`,
    /// `megrez`, `stablelm2`.
    Qwen2,
    /// `tokenizer.ggml.model = "llama"`: no pre-tokenizer; spaces become `▁`.
    SentencePiece,
}

const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl PreTokenizerKind {
    /// The kind for a byte-level (`gpt2`) vocabulary; `None` for a name we do not know.
    pub fn from_pre(pre: &str) -> Option<Self> {
        Some(match pre {
            "default" | "gpt2" | "gpt-2" | "mpt" | "olmo" | "jais" | "phi-2" | "trillion" => {
                PreTokenizerKind::Gpt2
            }
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" => PreTokenizerKind::Digits,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "dbrx" | "smaug-bpe" => PreTokenizerKind::Llama3,
            "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" => PreTokenizerKind::Qwen2,
            _ => return None,
        })
    }

    /// llama.cpp turns BOS on by default for the Llama 3 family; the key overrides it.
    pub(crate) fn default_add_bos(self) -> bool {
        matches!(
            self,
            PreTokenizerKind::Llama3 | PreTokenizerKind::SentencePiece
        )
    }
}

fn build_err(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Build(e.to_string())
}

/// Token text -> id. With duplicate texts the first id wins (the later ones can still be
/// decoded, just never produced by encoding).
fn vocab(meta: &Meta, warnings: &mut Vec<String>) -> Vocab {
    let mut vocab = Vocab::default();
    for (id, tok) in meta.tokens.iter().enumerate() {
        vocab.entry(tok.clone()).or_insert(id as u32);
    }
    let dups = meta.tokens.len() - vocab.len();
    if dups > 0 {
        warnings.push(format!(
            "{dups} tokens repeat an earlier token's text; encoding uses the first id"
        ));
    }
    vocab
}

/// Merges for a SentencePiece vocabulary, which stores scores instead of merges: (a, b) is a
/// merge wherever a, b and a+b are all normal pieces, ranked by the score of a+b (best
/// first). This is how HF converts SentencePiece BPE models, and it reproduces
/// SentencePiece's (and llama.cpp's) "merge the best-scoring adjacent pair" loop. Control,
/// byte and unused pieces never take part, so text can never merge into `<s>` or `<0x41>`.
pub(crate) fn sentencepiece_merges(
    tokens: &[String],
    types: &[TokenType],
    scores: &[f32],
) -> Vec<(String, String)> {
    let mut normal: HashMap<&str, u32> = HashMap::new();
    for (id, (tok, ty)) in tokens.iter().zip(types).enumerate() {
        if *ty == TokenType::Normal {
            normal.entry(tok.as_str()).or_insert(id as u32);
        }
    }
    let mut found: Vec<(f32, u32, usize)> = Vec::new();
    for (&piece, &id) in &normal {
        for (pos, _) in piece.char_indices().skip(1) {
            let (a, b) = piece.split_at(pos);
            if normal.contains_key(a) && normal.contains_key(b) {
                found.push((scores[id as usize], id, pos));
            }
        }
    }
    // Ties (equal scores) go to the earlier piece, as in SentencePiece's own ordering.
    found.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    found
        .into_iter()
        .map(|(_, id, pos)| {
            let (a, b) = tokens[id as usize].split_at(pos);
            (a.to_string(), b.to_string())
        })
        .collect()
}

/// The encoder and the pre-tokenizer kind it uses.
pub(crate) fn build(
    meta: &Meta,
    warnings: &mut Vec<String>,
) -> Result<(tokenizers::Tokenizer, PreTokenizerKind)> {
    let vocab = vocab(meta, warnings);
    let (bpe, kind) = match meta.model.as_str() {
        "gpt2" => {
            let merges = meta
                .merges
                .clone()
                .ok_or_else(|| TokenizerError::MissingMetadata(meta::MERGES.to_string()))?;
            let kind = match meta.pre.as_deref() {
                None => PreTokenizerKind::Gpt2,
                Some(pre) => PreTokenizerKind::from_pre(pre).unwrap_or_else(|| {
                    warnings.push(format!(
                        "unknown {} `{pre}`; using GPT-2's pre-tokenizer regex",
                        meta::PRE
                    ));
                    PreTokenizerKind::Gpt2
                }),
            };
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .ignore_merges(kind == PreTokenizerKind::Llama3)
                .build()
                .map_err(|e| TokenizerError::InvalidMetadata {
                    key: meta::MERGES.to_string(),
                    reason: e.to_string(),
                })?;
            (bpe, kind)
        }
        "llama" => {
            let scores = meta
                .scores
                .as_deref()
                .ok_or_else(|| TokenizerError::MissingMetadata(meta::SCORES.to_string()))?;
            let merges = sentencepiece_merges(&meta.tokens, &meta.types, scores);
            let mut builder = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .byte_fallback(true)
                .fuse_unk(true);
            if let Some(unk) = meta.special_ids[2] {
                builder = builder.unk_token(meta.tokens[unk as usize].clone());
            }
            (
                builder.build().map_err(build_err)?,
                PreTokenizerKind::SentencePiece,
            )
        }
        other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
    };

    let mut tok = tokenizers::Tokenizer::new(bpe);
    let byte_level = || ByteLevel::new(false, true, false);
    let split = |re: &str| {
        Split::new(
            SplitPattern::Regex(re.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(build_err)
    };
    let pre: Option<PreTokenizerWrapper> = match kind {
        PreTokenizerKind::Gpt2 => Some(ByteLevel::new(false, true, true).into()),
        PreTokenizerKind::Digits => Some(
            PreSequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
        ),
        PreTokenizerKind::Llama3 => {
            Some(PreSequence::new(vec![split(LLAMA3_REGEX)?.into(), byte_level().into()]).into())
        }
        PreTokenizerKind::Qwen2 => {
            Some(PreSequence::new(vec![split(QWEN2_REGEX)?.into(), byte_level().into()]).into())
        }
        PreTokenizerKind::SentencePiece => None,
    };
    tok.with_pre_tokenizer(pre);
    let normalizer: Option<NormalizerWrapper> = match kind {
        PreTokenizerKind::Qwen2 => Some(NFC.into()),
        PreTokenizerKind::SentencePiece => {
            let replace = Replace::new(" ", "▁").map_err(build_err)?;
            // llama.cpp and SentencePiece prefix a space to every piece of raw text that
            // starts the input or follows a special token; the normalizer runs once per such
            // piece, and Prepend leaves an empty piece alone.
            Some(if meta.add_space_prefix.unwrap_or(true) {
                NormSequence::new(vec![Prepend::new("▁".into()).into(), replace.into()]).into()
            } else {
                replace.into()
            })
        }
        _ => None,
    };
    tok.with_normalizer(normalizer).map_err(build_err)?;

    // Special tokens are parsed out of text only on request; user-defined ones always.
    let special = meta.special_flags();
    let mut specials = Vec::new();
    let mut user = Vec::new();
    for (id, (text, ty)) in meta.tokens.iter().zip(&meta.types).enumerate() {
        if text.is_empty() {
            continue;
        }
        if special[id] {
            specials.push(text);
        } else if *ty == TokenType::UserDefined {
            user.push(text);
        }
    }
    let added = |text: &String, special| AddedToken::from(text.clone(), special).normalized(false);
    tok.add_special_tokens(specials.into_iter().map(|t| added(t, true)))
        .map_err(build_err)?;
    tok.add_tokens(user.into_iter().map(|t| added(t, false)))
        .map_err(build_err)?;
    Ok((tok, kind))
}
