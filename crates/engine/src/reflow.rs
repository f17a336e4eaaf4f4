//! Hard-wrapped prose as a model quotes it: the copy sources' second spelling.
//!
//! Documentation, mail and man pages wrap prose at a fixed width and often put two spaces
//! after a full stop; a model quoting such text writes it as running prose, with one space
//! where the document had a line break. The tokens differ across every break (`"\n"`,
//! `"inc"`, `"orpor"`, `"ates"` against `" incorporates"`), so a copy from the document
//! stops at each wrapped line: on the Python FAQ, answers of the 1.5B that quote a section
//! word for word were drafted three tokens at a time. A copying drafter therefore also
//! indexes each wrapped paragraph unwrapped, tokenized on its own (see
//! [`unwrapped_paragraphs`]). The original text stays indexed: code and lists are never
//! rewritten, and a model that keeps the breaks still finds them.

use specdec_tokenizer::Tokenizer;

/// Lines shorter than this end where the author ended them (a heading, a short line of
/// code), not where a fixed width wrapped them.
const MIN_WRAPPED_LINE: usize = 30;

/// The most tokens of a request's text that are unwrapped (its prompt and references
/// together): re-tokenizing runs when the request starts, on the engine's thread.
const MAX_REFLOWED_TOKENS: usize = 1 << 16;

/// The paragraphs of `text` that change when their wrapped lines are joined (one space
/// for a line break, one space for a run of spaces), each unwrapped, separated by blank
/// lines; `None` when no paragraph changes. A line is joined to the next when both read
/// as prose at the same indentation (see `prose_indent`) and the first is long enough to
/// have been wrapped and does not open a literal block (`::`).
pub(crate) fn unwrapped_paragraphs(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = String::new();
    let mut para = String::new();
    let mut changed = false;
    for (i, line) in lines.iter().enumerate() {
        let indent = prose_indent(line);
        let joins = indent.is_some()
            && wraps(line)
            && lines
                .get(i + 1)
                .is_some_and(|next| prose_indent(next) == indent);
        if !joins && !changed {
            // A paragraph of one line is the document's own spelling but for its spaces,
            // which a model rarely keeps doubled either.
            if indent.is_some() && line.trim().contains("  ") {
                push_paragraph(&mut out, &collapse_spaces(line.trim()));
            }
            continue;
        }
        para.push_str(&collapse_spaces(line.trim()));
        if joins {
            para.push(' ');
            changed = true;
        } else {
            push_paragraph(&mut out, &para);
            para.clear();
            changed = false;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The tokens of `text`'s unwrapped paragraphs, as a copy source beside `text`'s own
/// tokens; `None` when nothing is wrapped. (Its caller bounds what it re-tokenizes.)
fn reflowed(tok: &Tokenizer, tokens: &[u32]) -> Option<Vec<u32>> {
    let text = tok.decode(tokens, true);
    let unwrapped = unwrapped_paragraphs(&text)?;
    match tok.encode(&unwrapped, false) {
        Ok(ids) if !ids.is_empty() => Some(ids),
        Ok(_) => None,
        Err(e) => {
            // Decoded text always encodes; if it ever does not, drafting goes on without
            // the second spelling.
            tracing::warn!("unwrapped prose did not tokenize: {e}");
            None
        }
    }
}

/// The unwrapped spelling of a request's references and prompt where they hold wrapped
/// prose, as copy sources beside its references (at most [`MAX_REFLOWED_TOKENS`] of them
/// re-tokenized in all).
pub(crate) fn reflowed_documents(
    tok: &Tokenizer,
    prompt: &[u32],
    references: &[Vec<u32>],
) -> Vec<Vec<u32>> {
    let mut docs = Vec::new();
    let mut left = MAX_REFLOWED_TOKENS;
    for text in references.iter().map(Vec::as_slice).chain([prompt]) {
        if text.len() > left {
            break;
        }
        left -= text.len();
        docs.extend(reflowed(tok, text));
    }
    docs
}

fn push_paragraph(out: &mut String, para: &str) {
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(para.trim_end());
}

/// `line`'s indentation if it reads as running prose (see [`unwrapped_paragraphs`]):
/// not blank, not a list item, quote, heading, table or code fence; an indented line (a
/// block quote) only if it holds nothing but words and prose punctuation, so indented
/// code is never joined.
fn prose_indent(line: &str) -> Option<usize> {
    let body = line.trim_start_matches(' ');
    let indent = line.len() - body.len();
    let first = body.chars().next()?;
    if first.is_whitespace() || body.trim().is_empty() {
        return None;
    }
    if matches!(
        first,
        '-' | '*' | '+' | '#' | '>' | '|' | '`' | '=' | '.' | '~'
    ) {
        return None;
    }
    // A numbered item: `1.`, `12)`.
    let digits = body.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits <= 3 && matches!(body[digits..].chars().next(), Some('.' | ')')) {
        return None;
    }
    let worded = |c: char| {
        c.is_alphanumeric()
            || matches!(
                c,
                ' ' | ',' | '.' | ';' | ':' | '\'' | '"' | '!' | '?' | '-'
            )
    };
    (indent == 0 || body.chars().all(worded)).then_some(indent)
}

/// Whether prose `line` was wrapped at a width rather than ended by its author.
fn wraps(line: &str) -> bool {
    let line = line.trim_end();
    line.chars().count() >= MIN_WRAPPED_LINE && !line.ends_with("::")
}

fn collapse_spaces(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_prose_is_joined_and_its_double_spaces_collapsed() {
        let text = "What is Python?\n\nPython is an interpreted, interactive language.  It\n\
                    incorporates modules, exceptions, dynamic typing, very high level\n\
                    data types.\n\nShort line.";
        assert_eq!(
            unwrapped_paragraphs(text).as_deref(),
            Some(
                "Python is an interpreted, interactive language. It incorporates modules, \
                 exceptions, dynamic typing, very high level data types."
            )
        );
    }

    #[test]
    fn code_lists_and_short_lines_are_left_alone() {
        let code = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\nprint(add(3, 4))";
        assert_eq!(unwrapped_paragraphs(code), None);
        let list = "The options, in the order they are looked up, are these:\n\
                    - the first option of the command line\n\
                    - the second option of the command line";
        assert_eq!(unwrapped_paragraphs(list), None);
        let literal = "Run the following command in a terminal window::\n\
                       python -m pip install --upgrade pip setuptools wheel";
        assert_eq!(unwrapped_paragraphs(literal), None);
        assert_eq!(unwrapped_paragraphs("one line, nothing wrapped"), None);
    }

    #[test]
    fn an_indented_quote_is_joined_but_indented_code_is_not() {
        let quote = "  I had extensive experience with implementing an interpreted\n  \
                     language in the ABC group at CWI, and from working with this";
        assert_eq!(
            unwrapped_paragraphs(quote).as_deref(),
            Some(
                "I had extensive experience with implementing an interpreted language in \
                 the ABC group at CWI, and from working with this"
            )
        );
        let code = "    result = some_function(argument_one, argument_two)\n    print(result)";
        assert_eq!(unwrapped_paragraphs(code), None);
        // Different indentation: not one paragraph.
        let mixed = "This line of prose is long enough to be a wrapped line\n  indented";
        assert_eq!(unwrapped_paragraphs(mixed), None);
    }

    #[test]
    fn a_paragraph_ends_at_a_list_or_a_blank_line() {
        let text = "Python runs on many Unix variants, on the Mac, and on\n\
                    Windows 2000 and later.\n\
                    1. first item of a list that is long enough to wrap\n\
                    second line of that item";
        assert_eq!(
            unwrapped_paragraphs(text).as_deref(),
            Some("Python runs on many Unix variants, on the Mac, and on Windows 2000 and later.")
        );
    }
}
