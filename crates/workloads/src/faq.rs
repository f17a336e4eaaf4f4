//! faq-rag: questions from the Python FAQ with their answer sections as the retrieved
//! documents. The FAQ's reST has a document title, category headings, and one section per
//! question; questions are recognised structurally (leaf sections with a body) rather than by
//! a trailing '?', since a few are phrased as statements ("How do you remove multiple items
//! from a list").

use std::path::Path;

use crate::error::{io, WorkloadError};
use crate::text::{cut_to, PROMPT_BUDGET};
use crate::{fetch, DataDirs, Record};

const INSTRUCTION: &str =
    "Answer the question using the documentation below. Quote it where it helps.";

/// A reST section without subsections: its title, cleaned body, and 1-based title line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Section {
    pub title: String,
    pub body: String,
    pub line: usize,
}

struct Heading {
    start: usize, // first line: the overline if any, else the title
    title: usize,
    level: usize,
}

/// `Some(c)` if `line` is a section adornment: 3+ copies of one punctuation char at column 0.
fn adornment(line: &str) -> Option<char> {
    let line = line.trim_end();
    let c = line.chars().next()?;
    let ok = line.len() >= 3 && c.is_ascii_punctuation() && line.chars().all(|x| x == c);
    ok.then_some(c)
}

/// Headings in order, with levels assigned the reST way: by first appearance of each style
/// (adornment char, with or without overline).
fn headings(lines: &[&str]) -> Vec<Heading> {
    let mut styles: Vec<(char, bool)> = Vec::new();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let title = lines[i];
        let (Some(c), false) = (adornment(lines[i + 1]), title.trim().is_empty()) else {
            i += 1;
            continue;
        };
        let over = i > 0 && adornment(lines[i - 1]) == Some(c);
        let start = if over { i - 1 } else { i };
        let blank_before = start == 0 || lines[start - 1].trim().is_empty();
        // Only an overlined title may be indented; indented text is a block's content.
        let indent_ok = over || !title.starts_with(char::is_whitespace);
        if adornment(title).is_some() || !blank_before || !indent_ok {
            i += 1;
            continue;
        }
        let level = match styles.iter().position(|&s| s == (c, over)) {
            Some(l) => l,
            None => {
                styles.push((c, over));
                styles.len() - 1
            }
        };
        out.push(Heading {
            start,
            title: i,
            level,
        });
        i += 2;
    }
    out
}

/// Leaf sections with a non-empty body, skipping the document title (the first style). In
/// the FAQ these are exactly the questions.
pub(crate) fn leaf_sections(text: &str) -> Vec<Section> {
    let lines: Vec<&str> = text.lines().collect();
    let hs = headings(&lines);
    let mut out = Vec::new();
    for (k, h) in hs.iter().enumerate() {
        let next = hs.get(k + 1);
        let leaf = next.is_none_or(|n| n.level <= h.level);
        if h.level == 0 || !leaf {
            continue;
        }
        let end = next.map_or(lines.len(), |n| n.start);
        let body = clean_body(&lines[h.title + 2..end]);
        if !body.is_empty() {
            out.push(Section {
                title: lines[h.title].trim().to_string(),
                body,
                line: h.title + 1,
            });
        }
    }
    out
}

/// Drops comments and link labels (`.. _name:`, which belong to the next heading), turns
/// roles like :func:`breakpoint` into `breakpoint`, and squeezes blank lines.
fn clean_body(lines: &[&str]) -> String {
    let mut out = String::new();
    let mut blank = true; // suppresses leading blank lines
    for line in lines {
        if line.starts_with(".. ") && !line.contains("::") {
            continue;
        }
        if line.trim().is_empty() {
            if !blank {
                out.push('\n');
            }
            blank = true;
            continue;
        }
        out.push_str(&strip_roles(line.trim_end()));
        out.push('\n');
        blank = false;
    }
    out.trim_end().to_string()
}

/// `:role:`text <target>`` becomes `` `text` ``; other text is unchanged.
fn strip_roles(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(i) = rest.find(':') {
        let after = &rest[i + 1..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || "-_+:".contains(c)))
            .unwrap_or(after.len());
        // The name ends at the last ':' before the backtick (roles may be `py:func`).
        let is_role =
            name_len > 1 && after[..name_len].ends_with(':') && after[name_len..].starts_with('`');
        let closing = after[name_len + usize::from(is_role)..].find('`');
        match (is_role, closing) {
            (true, Some(len)) => {
                let content = &after[name_len + 1..name_len + 1 + len];
                let shown = match content.rfind(" <") {
                    Some(j) if content.ends_with('>') => &content[..j],
                    _ => content,
                };
                out.push_str(&rest[..i]);
                out.push('`');
                out.push_str(shown.trim_start_matches(['~', '!']));
                out.push('`');
                rest = &after[name_len + 2 + len..];
            }
            _ => {
                out.push_str(&rest[..=i]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// FAQ files in the order of the FAQ index's toctree (general first), else by name.
fn file_order(faq: &Path) -> Result<Vec<String>, WorkloadError> {
    let index = faq.join("index.rst.txt");
    let text = std::fs::read_to_string(&index).map_err(io("cannot read", &index))?;
    let mut names: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with(".. toctree::"))
        .skip(1)
        .map(str::trim)
        .filter(|l| l.ends_with(".rst") && !l.starts_with(':'))
        .map(|l| l.trim_end_matches(".rst").to_string())
        .collect();
    if names.is_empty() {
        let mut listed: Vec<String> = std::fs::read_dir(faq)
            .map_err(io("cannot list", faq))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".rst.txt").map(str::to_string))
            .filter(|n| n != "index")
            .collect();
        listed.sort();
        names = listed;
    }
    Ok(names)
}

/// All FAQ questions, as (file stem, section), in reading order.
pub(crate) fn load_questions(dirs: &DataDirs) -> Result<Vec<(String, Section)>, WorkloadError> {
    let faq = fetch::ensure_python_docs(dirs)?.join("faq");
    let mut all = Vec::new();
    for stem in file_order(&faq)? {
        let path = faq.join(format!("{stem}.rst.txt"));
        let text = std::fs::read_to_string(&path).map_err(io("cannot read", &path))?;
        all.extend(leaf_sections(&text).into_iter().map(|s| (stem.clone(), s)));
    }
    Ok(all)
}

/// One record per question; the documentation is its own section plus, when it fits, the next
/// question's section from the same file (retrieval rarely returns exactly one chunk).
pub(crate) fn records(qs: &[(String, Section)], limit: usize, max_tokens: usize) -> Vec<Record> {
    let mut per_file = std::collections::HashMap::<&str, usize>::new();
    let mut out = Vec::new();
    for (i, (stem, s)) in qs.iter().enumerate().take(limit) {
        let n = per_file.entry(stem).or_default();
        *n += 1;
        let question = format!("Question: {}", s.title);
        let room = PROMPT_BUDGET.saturating_sub(INSTRUCTION.len() + question.len() + 40);
        let own = format!("{}\n\n{}", s.title, s.body);
        let mut references = vec![cut_to(&own, room).to_string()];
        if let Some((next_stem, next)) = qs.get(i + 1).filter(|(st, _)| st == stem) {
            debug_assert_eq!(next_stem, stem);
            let doc = format!("{}\n\n{}", next.title, next.body);
            if references[0].len() + 2 + doc.len() <= room {
                references.push(doc);
            }
        }
        let prompt = format!(
            "{INSTRUCTION}\n\nDocumentation:\n{}\n\n{question}",
            references.join("\n\n")
        );
        out.push(Record {
            id: format!("faq/{stem}/{n}"),
            prompt,
            references,
            max_tokens,
            chat: true,
            answer: None,
            class: None,
        });
    }
    out
}

/// faq-rag's records, each with its question's answer section body as `answer`.
pub(crate) fn forced_records(
    qs: &[(String, Section)],
    limit: usize,
    max_tokens: usize,
) -> Vec<Record> {
    // `records` makes one record per question, in order, so they pair up.
    records(qs, limit, max_tokens)
        .into_iter()
        .zip(qs)
        .map(|(r, (_, s))| Record {
            answer: Some(s.body.clone()),
            ..r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
:tocdepth: 2

===========
Sample FAQ
===========

.. contents::

General Questions
=================

Is there a debugger?
--------------------

Yes. See :func:`breakpoint` and :mod:`the manual <pdb>`.

.. _faq-label:

How do you remove items from a list
-----------------------------------

Use a comprehension::

   mylist[:] = [x for x in mylist if keep(x)]
   ----

Empty Category
==============

Other Questions
===============

Why?
----
Because.
";

    #[test]
    fn finds_leaf_sections_with_cleaned_bodies() {
        let qs = leaf_sections(SAMPLE);
        let titles: Vec<&str> = qs.iter().map(|s| s.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "Is there a debugger?",
                "How do you remove items from a list",
                "Why?"
            ]
        );
        assert_eq!(qs[0].body, "Yes. See `breakpoint` and `the manual`.");
        assert_eq!(qs[0].line, 12);
        assert!(qs[1]
            .body
            .starts_with("Use a comprehension::\n\n   mylist[:]"));
        assert!(qs[1].body.ends_with("   ----"), "{:?}", qs[1].body);
        assert!(!qs[0].body.contains("faq-label"));
        assert_eq!(qs[2].body, "Because.");
    }

    #[test]
    fn roles_and_plain_colons() {
        assert_eq!(strip_roles("a :py:class:`~x.Y` b"), "a `x.Y` b");
        assert_eq!(strip_roles("time: 10:30 `lit`"), "time: 10:30 `lit`");
        assert_eq!(strip_roles(":ref:`tk <Tk>`:"), "`tk`:");
    }

    #[test]
    fn records_carry_the_document_in_prompt_and_references() {
        let qs: Vec<(String, Section)> = leaf_sections(SAMPLE)
            .into_iter()
            .map(|s| ("sample".to_string(), s))
            .collect();
        let recs = records(&qs, 2, 64);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].id, "faq/sample/1");
        assert_eq!(recs[0].references.len(), 2, "neighbour section fits");
        assert!(recs[0].prompt.ends_with("Question: Is there a debugger?"));
        assert!(recs[0].prompt.contains(&recs[0].references[0]));
        assert!(recs.iter().all(|r| r.chat && r.max_tokens == 64));
        assert!(recs.iter().all(|r| r.answer.is_none() && r.class.is_none()));
    }

    #[test]
    fn forced_records_answer_with_the_question_section() {
        let qs: Vec<(String, Section)> = leaf_sections(SAMPLE)
            .into_iter()
            .map(|s| ("sample".to_string(), s))
            .collect();
        let plain = records(&qs, 3, 64);
        let forced = forced_records(&qs, 3, 64);
        assert_eq!(forced.len(), 3);
        for ((f, p), (_, s)) in forced.iter().zip(&plain).zip(&qs) {
            assert_eq!((&f.prompt, &f.references), (&p.prompt, &p.references));
            assert_eq!(f.answer.as_deref(), Some(s.body.as_str()));
        }
        assert_eq!(forced[2].answer.as_deref(), Some("Because."));
    }
}
