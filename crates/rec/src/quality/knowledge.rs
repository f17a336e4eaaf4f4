//! Knowledge files (the job's output JSONL) read for the quality checks, and the texts they
//! hold per user and per item id.

use std::collections::HashMap;
use std::path::Path;

use crate::error::io;
use crate::{Kind, KnowledgeOutput, RecError};

/// Reads a knowledge file; a line that is not a [`KnowledgeOutput`] is an error naming its
/// line number (blank lines are skipped).
pub fn read_knowledge(path: &Path) -> Result<Vec<KnowledgeOutput>, RecError> {
    let text = std::fs::read_to_string(path).map_err(io("cannot read", path))?;
    parse_knowledge(&text, path)
}

/// [`read_knowledge`] on text already read; `path` only names the source in errors.
pub fn parse_knowledge(text: &str, path: &Path) -> Result<Vec<KnowledgeOutput>, RecError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| RecError::Record {
                path: path.to_path_buf(),
                line: i + 1,
                message: without_serde_position(&e),
            })
        })
        .collect()
}

/// serde's message less its "at line 1 column N" (a JSONL line is always its line 1),
/// keeping the column.
fn without_serde_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match message.strip_suffix(&suffix) {
        Some(m) => format!("{m} (column {})", e.column()),
        None => message,
    }
}

/// Knowledge texts by MovieLens id, the downstream check's text features.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Knowledge {
    /// User knowledge by user id.
    pub users: HashMap<u32, String>,
    /// Item knowledge by item id.
    pub items: HashMap<u32, String>,
}

impl Knowledge {
    /// Errors on a record without the id of its kind and on an id given twice.
    pub fn from_outputs(outputs: &[KnowledgeOutput]) -> Result<Knowledge, RecError> {
        let mut k = Knowledge::default();
        for o in outputs {
            let (map, id, kind) = match o.kind {
                Kind::User => (&mut k.users, o.user_id, "user"),
                Kind::Item => (&mut k.items, o.item_id, "item"),
            };
            let id =
                id.ok_or_else(|| RecError::Inconsistent(format!("{} has no {kind}_id", o.id)))?;
            if map.insert(id, o.text.clone()).is_some() {
                return Err(RecError::Inconsistent(format!(
                    "{kind} {id} has two knowledge texts (the second is {})",
                    o.id
                )));
            }
        }
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"id":"user-3","kind":"user","group":"u0","role":"target","user_id":3,"text":"likes noir","token_ids":[1,2],"finish_reason":"stop","verify":"strict","relaxed_tokens":0,"completion_tokens":2,"forward_passes":2,"mean_accepted_length":1.0,"elapsed_ms":3.5}"#;

    #[test]
    fn a_knowledge_file_parses_line_by_line_skipping_blank_lines() {
        let text = format!(
            "{LINE}\n\n{}\n",
            LINE.replace("user-3", "user-4").replace(":3,", ":4,")
        );
        let out = parse_knowledge(&text, Path::new("k.jsonl")).unwrap();
        assert_eq!(out.len(), 2);
        let k = Knowledge::from_outputs(&out).unwrap();
        assert_eq!(k.users[&4], "likes noir");
        assert!(k.items.is_empty());
    }

    #[test]
    fn a_bad_line_is_reported_with_its_number() {
        let text = format!("{LINE}\n{{\"id\": \"user-9\"}}\n");
        let err = parse_knowledge(&text, Path::new("k.jsonl")).unwrap_err();
        assert!(matches!(err, RecError::Record { line: 2, .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.starts_with("k.jsonl: line 2: missing field"),
            "{message}"
        );
        assert!(!message.contains("line 1"), "{message}");
    }

    #[test]
    fn a_record_without_its_id_or_an_id_twice_is_refused() {
        let no_id = LINE.replace("\"user_id\":3,", "");
        let out = parse_knowledge(&no_id, Path::new("k")).unwrap();
        let err = Knowledge::from_outputs(&out).unwrap_err();
        assert!(err.to_string().contains("user-3 has no user_id"), "{err}");
        let twice = parse_knowledge(&format!("{LINE}\n{LINE}"), Path::new("k")).unwrap();
        assert!(Knowledge::from_outputs(&twice).is_err());
    }
}
