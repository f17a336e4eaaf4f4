//! chat-repeats: real prompts seen once, again verbatim, and again with one small edit, so
//! a benchmark can tell what drafting gains from a repeat (a cache, a warm trie) from what
//! it gains on a first sight, and how a near-repeat fares.

use crate::error::WorkloadError;
use crate::{faq, sharegpt, DataDirs, Record, RecordClass};

/// Common words and what an edit puts in their place (the first found, in text order).
const SWAPS: &[(&str, &str)] = &[
    ("the", "a"),
    ("a", "the"),
    ("is", "was"),
    ("are", "were"),
    ("and", "or"),
    ("in", "on"),
    ("of", "for"),
    ("to", "into"),
    ("you", "we"),
    ("what", "which"),
    ("how", "why"),
];

/// About `limit / 3` originals (two chat turns for each FAQ question), then each again
/// verbatim (`#repeat`), then each with one edit (`#edit`).
pub(crate) fn build(
    dirs: &DataDirs,
    limit: usize,
    max_tokens: usize,
) -> Result<Vec<Record>, WorkloadError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let n = (limit / 3).max(1);
    let faq_n = (n + 1) / 3;
    let faq = faq::records(&faq::load_questions(dirs)?, faq_n, max_tokens);
    let (chat, _) = sharegpt::build(dirs, false, n - faq_n, max_tokens)?;
    Ok(with_repeats(mix(chat, faq)))
}

/// Interleaves the two lists, every third record from `every_third` while it lasts.
fn mix(first: Vec<Record>, every_third: Vec<Record>) -> Vec<Record> {
    let (mut a, mut b) = (first.into_iter(), every_third.into_iter());
    let mut out = Vec::new();
    loop {
        let next = if out.len() % 3 == 2 {
            b.next().or_else(|| a.next())
        } else {
            a.next().or_else(|| b.next())
        };
        match next {
            Some(r) => out.push(r),
            None => return out,
        }
    }
}

/// The originals (class first), then their verbatim copies, then their edited copies.
fn with_repeats(originals: Vec<Record>) -> Vec<Record> {
    let first: Vec<Record> = originals
        .into_iter()
        .map(|r| Record {
            class: Some(RecordClass::First),
            ..r
        })
        .collect();
    let copy = |r: &Record, class: RecordClass, prompt: String| Record {
        id: format!("{}#{}", r.id, class.name()),
        prompt,
        class: Some(class),
        ..r.clone()
    };
    let repeats: Vec<Record> = first
        .iter()
        .map(|r| copy(r, RecordClass::Repeat, r.prompt.clone()))
        .collect();
    let edits: Vec<Record> = first
        .iter()
        .map(|r| copy(r, RecordClass::Edit, edit_record(r)))
        .collect();
    [first, repeats, edits].concat()
}

/// `r`'s prompt with one edit in the user's own text: after the last reference it
/// carries (the documents stay as retrieved, so they still occur in the prompt).
fn edit_record(r: &Record) -> String {
    let from = r
        .references
        .iter()
        .filter_map(|d| r.prompt.find(d.as_str()).map(|i| i + d.len()))
        .max()
        .unwrap_or(0);
    format!("{}{}", &r.prompt[..from], edit_prompt(&r.prompt[from..]))
}

/// One small deterministic edit: the first number (a run of ASCII digits) plus one, else
/// the first common word of [`SWAPS`] swapped, else the last word replaced by "it".
pub(crate) fn edit_prompt(prompt: &str) -> String {
    let splice = |range: std::ops::Range<usize>, with: &str| {
        format!("{}{with}{}", &prompt[..range.start], &prompt[range.end..])
    };
    if let Some(start) = prompt.find(|c: char| c.is_ascii_digit()) {
        let len = prompt[start..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(prompt.len() - start);
        let range = start..start + len;
        return splice(range.clone(), &increment(&prompt[range]));
    }
    let words = words(prompt);
    for w in &words {
        let word = &prompt[w.clone()];
        if let Some((_, to)) = SWAPS
            .iter()
            .find(|(from, _)| word.eq_ignore_ascii_case(from))
        {
            return splice(w.clone(), &same_case(word, to));
        }
    }
    match words.last() {
        Some(w) if &prompt[w.clone()] != "it" => splice(w.clone(), "it"),
        Some(w) => splice(w.clone(), "this"),
        None => format!("{prompt} again"),
    }
}

/// Byte ranges of the words of `s`: maximal runs of ASCII letters.
fn words(s: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices().chain([(s.len(), ' ')]) {
        match (c.is_ascii_alphabetic(), start) {
            (true, None) => start = Some(i),
            (false, Some(st)) => {
                out.push(st..i);
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// `to`, capitalised like `like`'s first letter.
fn same_case(like: &str, to: &str) -> String {
    if like.starts_with(|c: char| c.is_ascii_uppercase()) {
        let mut c = to.chars();
        c.next()
            .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
            .unwrap_or_default()
    } else {
        to.to_string()
    }
}

/// A run of decimal digits plus one, as text of any length ("199" -> "200", "9" -> "10").
fn increment(digits: &str) -> String {
    let mut out: Vec<u8> = digits.bytes().collect();
    for d in out.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return String::from_utf8(out).expect("ASCII digits");
        }
    }
    format!("1{}", String::from_utf8(out).expect("ASCII digits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one spot where `a` and `b` differ: (a's part, b's part) between their common
    /// prefix and suffix.
    fn diff<'s>(a: &'s str, b: &'s str) -> (&'s str, &'s str) {
        let pre = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        let suf = a[pre..]
            .bytes()
            .rev()
            .zip(b[pre..].bytes().rev())
            .take_while(|(x, y)| x == y)
            .count();
        (&a[pre..a.len() - suf], &b[pre..b.len() - suf])
    }

    #[test]
    fn the_first_number_goes_up_by_one() {
        let p = "Give me 3 ideas for a 10 minute talk";
        assert_eq!(edit_prompt(p), "Give me 4 ideas for a 10 minute talk");
        assert_eq!(edit_prompt("in 1999, or 2000"), "in 2000, or 2000");
        assert_eq!(edit_prompt("x9"), "x10");
        assert_eq!(increment("0099"), "0100");
    }

    #[test]
    fn else_one_common_word_is_swapped() {
        let p = "Explain how the compiler works, and why.";
        assert_eq!(edit_prompt(p), "Explain why the compiler works, and why.");
        assert_eq!(edit_prompt("The cat sat"), "A cat sat");
        // Inside other words nothing changes: "theory" is not "the".
        assert_eq!(edit_prompt("theory matters"), "theory it");
        assert_eq!(edit_prompt("say it"), "say this");
    }

    #[test]
    fn an_edit_changes_exactly_one_spot_and_is_deterministic() {
        for p in [
            "What are the main causes of inflation in 2023?",
            "Write a poem about the sea",
            "Summarize: zebras graze quietly",
            "Answer the question using the documentation below.\n\nDocumentation:\nPython 3.11",
        ] {
            let e = edit_prompt(p);
            assert_eq!(e, edit_prompt(p));
            assert_ne!(e, p);
            let (old, new) = diff(p, &e);
            // One number or one word (or part of one), nothing across a space.
            for part in [old, new] {
                assert!(!part.contains(char::is_whitespace), "{p:?} -> {e:?}");
                assert!(part.len() <= 10, "{p:?}: {old:?} -> {new:?}");
            }
        }
    }

    fn rec(id: &str) -> Record {
        Record {
            id: id.into(),
            prompt: format!("tell me about the {id}"),
            references: Vec::new(),
            max_tokens: 8,
            chat: true,
            answer: None,
            class: None,
        }
    }

    #[test]
    fn repeats_follow_the_originals_in_classes() {
        let mixed = mix(
            vec![rec("c1"), rec("c2"), rec("c3"), rec("c4")],
            vec![rec("f1")],
        );
        let ids: Vec<&str> = mixed.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["c1", "c2", "f1", "c3", "c4"]);
        let all = with_repeats(vec![rec("a"), rec("b")]);
        let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "a#repeat", "b#repeat", "a#edit", "b#edit"]);
        assert_eq!(all[2].prompt, all[0].prompt);
        assert_eq!(all[4].prompt, "tell me about a a");
        let classes: Vec<_> = all.iter().map(|r| r.class.unwrap()).collect();
        let mut with_doc = rec("d");
        with_doc.prompt = "Doc: version 3 of the tool\n\nQuestion: is 2 the answer?".into();
        with_doc.references = vec!["version 3 of the tool".into()];
        assert_eq!(
            edit_record(&with_doc),
            "Doc: version 3 of the tool\n\nQuestion: is 3 the answer?"
        );
        use RecordClass::*;
        assert_eq!(classes, [First, First, Repeat, Repeat, Edit, Edit]);
    }
}
