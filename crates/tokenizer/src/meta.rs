//! Reading the `tokenizer.ggml.*` metadata, checked, into plain Rust values.
//!
//! Every error names the key. Optional keys that are present with the wrong type are errors
//! too: silently ignoring them would build a tokenizer that quietly differs from llama.cpp's.

use specdec_gguf::{GgufFile, Value};

use crate::{Result, TokenizerError};

pub(crate) const MODEL: &str = "tokenizer.ggml.model";
pub(crate) const PRE: &str = "tokenizer.ggml.pre";
pub(crate) const TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub(crate) const SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const MERGES: &str = "tokenizer.ggml.merges";
pub(crate) const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub(crate) const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
pub(crate) const CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// llama.cpp's token types (`LLAMA_TOKEN_TYPE_*`). Unknown codes are read as `Normal`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_code(code: i64) -> Self {
        match code {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Normal,
        }
    }
}

/// The special token ids a GGUF may name, in the order `Meta::special_ids` lists them.
pub(crate) const SPECIAL_ID_KEYS: [&str; 6] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
];

/// The tokenizer metadata of one GGUF.
#[derive(Debug)]
pub(crate) struct Meta {
    pub model: String,
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// One per token; all `Normal` when the file has no `token_type` array.
    pub types: Vec<TokenType>,
    pub has_types: bool,
    pub scores: Option<Vec<f32>>,
    pub merges: Option<Vec<(String, String)>>,
    /// bos, eos, unknown, padding, eot, eom (see `SPECIAL_ID_KEYS`).
    pub special_ids: [Option<u32>; 6],
    pub add_bos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    pub warnings: Vec<String>,
}

fn invalid(key: &str, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::InvalidMetadata {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn wrong_type(key: &str, expected: &str, v: &Value) -> TokenizerError {
    invalid(
        key,
        format!("has type {}, expected {expected}", v.type_name()),
    )
}

fn opt_str<'a>(file: &'a GgufFile, key: &str) -> Result<Option<&'a str>> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| wrong_type(key, "string", v)),
    }
}

pub(crate) fn opt_string(file: &GgufFile, key: &str) -> Result<Option<String>> {
    Ok(opt_str(file, key)?.map(str::to_string))
}

fn opt_bool(file: &GgufFile, key: &str) -> Result<Option<bool>> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| wrong_type(key, "bool", v)),
    }
}

/// An optional array whose elements all convert with `conv`, exactly `len` long if given.
fn opt_array<T>(
    file: &GgufFile,
    key: &str,
    expected: &str,
    len: Option<usize>,
    conv: impl Fn(&Value) -> Option<T>,
) -> Result<Option<Vec<T>>> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    let items = v.as_array().ok_or_else(|| wrong_type(key, "array", v))?;
    if let Some(len) = len.filter(|&len| len != items.len()) {
        return Err(invalid(
            key,
            format!("has {} entries but there are {len} tokens", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            conv(item).ok_or_else(|| {
                invalid(
                    key,
                    format!(
                        "entry {i} has type {}, expected {expected}",
                        item.type_name()
                    ),
                )
            })
        })
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// A token id key. Negative or out-of-range ids are dropped with a warning, as llama.cpp does
/// ("bad special token"): some converters write -1 or a stale id, and the model still works.
fn token_id(
    file: &GgufFile,
    key: &str,
    n: usize,
    warnings: &mut Vec<String>,
) -> Result<Option<u32>> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    let id = v.as_i64().ok_or_else(|| wrong_type(key, "integer", v))?;
    match u32::try_from(id) {
        Ok(id) if (id as usize) < n => Ok(Some(id)),
        _ => {
            warnings.push(format!(
                "{key} = {id} is not a token id (vocabulary has {n}); ignored"
            ));
            Ok(None)
        }
    }
}

/// Splits a merge rule "a b". The search starts after the first character, as llama.cpp's
/// does, so a left token that is itself a space still parses.
fn split_merge(i: usize, rule: &str) -> Result<(String, String)> {
    let first = rule.chars().next().map_or(0, char::len_utf8);
    match rule[first..].find(' ') {
        Some(pos) => {
            let (a, b) = rule.split_at(first + pos);
            Ok((a.to_string(), b[1..].to_string()))
        }
        None => Err(invalid(
            MERGES,
            format!("entry {i} {rule:?} is not two tokens separated by a space"),
        )),
    }
}

impl Meta {
    /// Which ids are special (control or unknown). Without a token_type array, the ids the
    /// file names as bos/eos/unknown/eot/eom are taken as control tokens.
    pub(crate) fn special_flags(&self) -> Vec<bool> {
        let [bos, eos, unk, _pad, eot, eom] = self.special_ids;
        let named = [bos, eos, unk, eot, eom];
        (0..self.tokens.len())
            .map(|id| match self.types[id] {
                TokenType::Control | TokenType::Unknown => true,
                _ => !self.has_types && named.contains(&Some(id as u32)),
            })
            .collect()
    }

    pub(crate) fn read(file: &GgufFile) -> Result<Meta> {
        let model = opt_string(file, MODEL)?
            .ok_or_else(|| TokenizerError::MissingMetadata(MODEL.to_string()))?;
        let tokens = opt_array(file, TOKENS, "string", None, |v| {
            v.as_str().map(str::to_string)
        })?
        .ok_or_else(|| TokenizerError::MissingMetadata(TOKENS.to_string()))?;
        let n = tokens.len();
        if n == 0 {
            return Err(invalid(TOKENS, "is empty"));
        }
        if u32::try_from(n).is_err() {
            return Err(invalid(
                TOKENS,
                format!("has {n} entries, more than u32 ids"),
            ));
        }
        let codes = opt_array(file, TOKEN_TYPE, "integer", Some(n), Value::as_i64)?;
        let has_types = codes.is_some();
        let types = match codes {
            Some(codes) => codes.into_iter().map(TokenType::from_code).collect(),
            None => vec![TokenType::Normal; n],
        };
        let scores = opt_array(file, SCORES, "number", Some(n), |v| {
            v.as_f64().map(|f| f as f32)
        })?;
        let merges = opt_array(file, MERGES, "string", None, |v| {
            v.as_str().map(str::to_string)
        })?
        .map(|rules| {
            rules
                .iter()
                .enumerate()
                .map(|(i, r)| split_merge(i, r))
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?;
        let mut warnings = Vec::new();
        let mut special_ids = [None; 6];
        for (slot, key) in special_ids.iter_mut().zip(SPECIAL_ID_KEYS) {
            *slot = token_id(file, key, n, &mut warnings)?;
        }
        Ok(Meta {
            model,
            pre: opt_string(file, PRE)?,
            tokens,
            types,
            has_types,
            scores,
            merges,
            special_ids,
            add_bos: opt_bool(file, ADD_BOS)?,
            add_space_prefix: opt_bool(file, ADD_SPACE_PREFIX)?,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_split_at_the_first_space_after_the_first_char() {
        assert_eq!(split_merge(0, "Ġ t").unwrap(), ("Ġ".into(), "t".into()));
        assert_eq!(split_merge(0, "  a").unwrap(), (" ".into(), "a".into()));
        assert_eq!(split_merge(0, "é b c").unwrap(), ("é".into(), "b c".into()));
        assert!(split_merge(3, "ab").is_err());
        assert!(split_merge(3, "").is_err());
    }
}
