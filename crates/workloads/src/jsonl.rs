//! Reading and writing workload files: one JSON record per line.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use crate::error::{io, WorkloadError};
use crate::Record;

/// Writes `records` to `path` atomically and durably ([`specdec_fs`]; missing directories
/// are created), so a reader never sees a half-written workload.
pub fn write_jsonl(records: &[Record], path: &Path) -> Result<(), WorkloadError> {
    specdec_fs::write_atomic_with(path, |w| {
        for r in records {
            serde_json::to_writer(&mut *w, r)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
    .map_err(|e| io(e.step.what(), &e.path)(e.source))
}

/// Reads a workload, rejecting unknown fields, missing fields and duplicate ids; errors name
/// the 1-based line. Blank lines are allowed.
pub fn read_jsonl(path: &Path) -> Result<Vec<Record>, WorkloadError> {
    let file = std::fs::File::open(path).map_err(io("cannot open", path))?;
    let mut out = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let bad = |message: String| WorkloadError::Jsonl {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(&line).map_err(|e| {
            // serde_json says "at line 1"; the line that matters is ours.
            let s = e.to_string();
            let msg = s.rsplit_once(" at line ").map_or(s.as_str(), |(m, _)| m);
            bad(format!("{msg} (column {})", e.column()))
        })?;
        if let Some(first) = ids.insert(record.id.clone(), i + 1) {
            return Err(bad(format!(
                "duplicate id {:?} (first on line {first})",
                record.id
            )));
        }
        out.push(record);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("specdec-workloads-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    fn rec(id: &str, refs: &[&str]) -> Record {
        Record {
            id: id.into(),
            prompt: format!("prompt for {id}\nwith \"quotes\" and ünïcode"),
            references: refs.iter().map(|s| s.to_string()).collect(),
            max_tokens: 64,
            chat: !refs.is_empty(),
            answer: None,
            class: None,
        }
    }

    #[test]
    fn round_trip() {
        let path = scratch("round.jsonl");
        let recs = vec![rec("a", &["doc one", "doc two"]), rec("b", &[])];
        write_jsonl(&recs, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(
            !text.lines().nth(1).unwrap().contains("references"),
            "empty refs omitted"
        );
        assert_eq!(read_jsonl(&path).unwrap(), recs);
        let leftovers = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".tmp-")
            })
            .count();
        assert_eq!(leftovers, 0);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let good = r#"{"id":"a","prompt":"p","max_tokens":8,"chat":true}"#;
        let cases = [
            (
                format!("{good}\n\n{{\"id\":\"b\",\"prompt\":\"p\",\"max_tokens\":8}}\n"),
                3,
                "missing field `chat`",
            ),
            (
                format!(
                    "{good}\n{}\n",
                    good.replace("\"chat\"", "\"extra\":1,\"chat\"")
                ),
                2,
                "unknown field `extra`",
            ),
            (format!("{good}\n{{not json\n"), 2, "key must be a string"),
            (
                format!("{good}\n{good}\n"),
                2,
                "duplicate id \"a\" (first on line 1)",
            ),
        ];
        for (text, line, what) in cases {
            let path = scratch("bad.jsonl");
            std::fs::write(&path, &text).unwrap();
            match read_jsonl(&path).unwrap_err() {
                WorkloadError::Jsonl {
                    line: l, message, ..
                } => {
                    assert_eq!(l, line, "{message}");
                    assert!(message.contains(what), "{message}");
                }
                e => panic!("unexpected {e}"),
            }
            std::fs::remove_file(&path).unwrap();
        }
    }
}
