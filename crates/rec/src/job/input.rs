//! The job's input: JSONL records, each parsed once into a [`Task`] (its pool name and
//! speculation validated, the latter by the engine's one parser,
//! [`SpeculationSpec::parse`]). A bad line is reported with its number and skipped; the
//! other records still run.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

use specdec_engine::{
    ChatMessage, ChatTemplate, Engine, EngineError, PoolName, RawSpec, SpecError, SpeculationSpec,
};

use crate::error::io;
use crate::records::KnowledgeRecord;
use crate::RecError;

/// A record ready to run.
#[derive(Clone, Debug)]
pub struct Task {
    /// 1-based line of the input.
    pub line: usize,
    /// The record as read.
    pub record: KnowledgeRecord,
    /// The pool named by the record's group.
    pub pool: PoolName,
    /// The job's method with the record's `verify`/`top_k`/`tau`, the job's default
    /// filling in what the record leaves out.
    pub spec: SpeculationSpec,
}

impl Task {
    /// The record's prompt in the chat template, tokenized.
    pub(super) fn chat_prompt(
        &self,
        engine: &Engine<'_>,
        template: &ChatTemplate,
    ) -> Result<Vec<u32>, EngineError> {
        let message = ChatMessage::new("user", self.record.prompt.as_str());
        Ok(engine.tokenizer().encode_chat(template, &[message], true)?)
    }
}

/// An input line that is not a valid record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// 1-based line of the input.
    pub line: usize,
    /// Why it is not a valid record.
    pub message: String,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A parsed input file: the records to run and the lines that were not records.
#[derive(Debug, Default)]
pub struct Input {
    /// In input order.
    pub tasks: Vec<Task>,
    /// The lines that are not valid records, in input order.
    pub malformed: Vec<Malformed>,
}

/// The speculation a record asks for, with the job's `default` filling in what it leaves
/// out (see [`SpeculationSpec::parse`]).
pub fn spec(r: &KnowledgeRecord, default: &SpeculationSpec) -> Result<SpeculationSpec, SpecError> {
    let raw = RawSpec {
        method: None,
        verify: r.verify.map(|v| v.name().to_string()),
        top_k: r.top_k.map(|k| i64::try_from(k).unwrap_or(i64::MAX)),
        tau: r.tau.map(f64::from),
    };
    SpeculationSpec::parse(&raw, default)
}

fn task(line: usize, text: &str, default: &SpeculationSpec) -> Result<Task, String> {
    // The line number is the caller's; serde's position within the line is the column.
    let record: KnowledgeRecord = serde_json::from_str(text)
        .map_err(|e| e.to_string().replace(" at line 1 column ", " at column "))?;
    if record.id.trim().is_empty() {
        return Err("the id is empty".into());
    }
    let pool = PoolName::parse(&record.group).map_err(|e| format!("group: {e}"))?;
    let spec = spec(&record, default).map_err(|e| e.to_string())?;
    Ok(Task {
        line,
        record,
        pool,
        spec,
    })
}

/// Parses every line of `reader`; blank lines are skipped, and a later line with an id
/// seen before is malformed (the first one runs).
pub fn parse_input(reader: impl BufRead, default: &SpeculationSpec) -> std::io::Result<Input> {
    let mut input = Input::default();
    let mut seen = HashSet::new();
    for (i, bytes) in reader.split(b'\n').enumerate() {
        let line = i + 1;
        let bytes = bytes?;
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|text| {
                if text.trim().is_empty() {
                    return Ok(None);
                }
                let t = task(line, text, default)?;
                if !seen.insert(t.record.id.clone()) {
                    return Err(format!("duplicate id `{}`", t.record.id));
                }
                Ok(Some(t))
            });
        match parsed {
            Ok(Some(t)) => input.tasks.push(t),
            Ok(None) => {}
            Err(message) => input.malformed.push(Malformed { line, message }),
        }
    }
    Ok(input)
}

/// [`parse_input`] of the file at `path`.
pub fn read_input(path: &Path, default: &SpeculationSpec) -> Result<Input, RecError> {
    let file = std::fs::File::open(path).map_err(io("reading input", path))?;
    parse_input(std::io::BufReader::new(file), default).map_err(io("reading input", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"id":"user-1","kind":"user","group":"g1","role":"warmup","prompt":"p"}"#;

    fn line(id: &str, extra: &str) -> String {
        format!(r#"{{"id":"{id}","kind":"item","group":"g2","role":"target","prompt":"q"{extra}}}"#)
    }

    #[test]
    fn a_malformed_line_is_reported_with_its_number_and_the_others_go_on() {
        let text = [
            GOOD.to_string(),
            "{not json".into(),
            line("item-1", r#","colour":"red""#),
            String::new(),
            line("", ""),
            line("item-2", ""),
            line("user-1", ""),
            line("item-3", r#","group":"a/b""#).replace(r#""group":"g2","#, ""),
            line("item-4", r#","verify":"relaxed","top_k":0"#),
            line("item-5", r#","verify":"strict","tau":0.2"#),
        ]
        .join("\n");
        let input = parse_input(text.as_bytes(), &SpeculationSpec::default()).unwrap();
        let ids: Vec<&str> = input.tasks.iter().map(|t| t.record.id.as_str()).collect();
        assert_eq!(ids, ["user-1", "item-2"]);
        assert_eq!(input.tasks[1].line, 6);
        let lines: Vec<usize> = input.malformed.iter().map(|m| m.line).collect();
        assert_eq!(lines, [2, 3, 5, 7, 8, 9, 10]);
        let says = |line: usize, what: &str| {
            let m = input.malformed.iter().find(|m| m.line == line).unwrap();
            assert!(m.message.contains(what), "line {line}: {}", m.message);
        };
        says(3, "colour");
        says(2, "at column");
        says(5, "empty");
        says(7, "duplicate id `user-1`");
        says(8, "group");
        says(9, "top_k");
        says(10, "relaxed verification only");
    }

    use specdec_engine::{Acceptance, DraftMethod, Relaxed};

    /// The rule [`spec`] gives a record over a job of rule `default`.
    fn acceptance(r: &KnowledgeRecord, default: &Acceptance) -> Result<Acceptance, SpecError> {
        let job = SpeculationSpec {
            method: DraftMethod::Auto,
            acceptance: default.clone(),
        };
        spec(r, &job).map(|s| s.acceptance)
    }

    #[test]
    fn a_record_s_rule_overrides_the_job_default_and_fills_in_from_it() {
        let rec =
            |extra: &str| -> KnowledgeRecord { serde_json::from_str(&line("x", extra)).unwrap() };
        let job = Acceptance::Relaxed(Relaxed::new(3, 0.2).unwrap());
        assert_eq!(
            acceptance(&rec(""), &Acceptance::Strict),
            Ok(Acceptance::Strict)
        );
        assert_eq!(acceptance(&rec(""), &job), Ok(job.clone()));
        assert_eq!(
            acceptance(&rec(r#","top_k":5"#), &job),
            Ok(Acceptance::Relaxed(Relaxed::new(5, 0.2).unwrap()))
        );
        assert_eq!(
            acceptance(&rec(r#","verify":"strict""#), &job),
            Ok(Acceptance::Strict)
        );
        assert_eq!(
            acceptance(&rec(r#","verify":"relaxed""#), &Acceptance::Strict),
            Ok(Acceptance::Relaxed(Relaxed::DEFAULT))
        );
    }
}
