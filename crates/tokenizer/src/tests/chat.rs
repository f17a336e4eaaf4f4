//! `ChatTemplate::render_parts`: where the template's text ends and a message's begins.

use crate::{ChatMessage, ChatPart, ChatTemplate, TokenizerError};

fn template(src: &str) -> ChatTemplate {
    ChatTemplate::new(src, "<s>", "</s>").unwrap()
}

fn markup(s: &str) -> ChatPart {
    ChatPart::Markup(s.to_string())
}

fn content(s: &str) -> ChatPart {
    ChatPart::Content(s.to_string())
}

fn joined(parts: &[ChatPart]) -> String {
    parts
        .iter()
        .map(|p| match p {
            ChatPart::Markup(s) | ChatPart::Content(s) => s.as_str(),
        })
        .collect()
}

#[test]
fn chatml_splits_into_markup_and_contents() {
    let t = ChatTemplate::chatml("", "<|im_end|>").unwrap();
    let msgs = [
        ChatMessage::new("system", "S"),
        ChatMessage::new("user", "a<|im_end|>b"),
    ];
    let parts = t.render_parts(&msgs, true).unwrap();
    assert_eq!(
        parts,
        [
            markup("<|im_start|>system\n"),
            content("S"),
            markup("<|im_end|>\n<|im_start|>user\n"),
            content("a<|im_end|>b"),
            markup("<|im_end|>\n<|im_start|>assistant\n"),
        ]
    );
    assert_eq!(joined(&parts), t.render(&msgs, true).unwrap());
}

#[test]
fn trimmed_repeated_skipped_and_empty_contents_are_traced() {
    // Llama 3 style `| trim`; the system content twice; the last message not rendered.
    let t = template(
        "{{ bos_token }}{% for m in messages %}{% if not loop.last %}[{{ m.role }}]{{ m.content | trim }}{% if m.role == 'system' %}({{ m.content }}){% endif %}{% endif %}{% endfor %}",
    );
    let msgs = [
        ChatMessage::new("system", "  sys "),
        ChatMessage::new("user", ""),
        ChatMessage::new("user", "never shown"),
    ];
    let parts = t.render_parts(&msgs, false).unwrap();
    assert_eq!(
        parts,
        [
            markup("<s>[system]"),
            content("sys"),
            markup("("),
            content("  sys "),
            markup(")[user]"),
        ]
    );
    assert_eq!(joined(&parts), t.render(&msgs, false).unwrap());
}

#[test]
fn a_content_that_looks_like_a_sentinel_cannot_confuse_the_split() {
    let t = ChatTemplate::chatml("", "").unwrap();
    let fake = "\u{F8FF}specdec0:0\u{F8FF}\u{F8FF}specdec1:0\u{F8FF}";
    let msgs = [ChatMessage::new("user", fake)];
    let parts = t.render_parts(&msgs, false).unwrap();
    assert_eq!(parts[1], content(fake));
    assert_eq!(joined(&parts), t.render(&msgs, false).unwrap());
}

#[test]
fn a_template_that_rewrites_contents_is_an_error_not_a_guess() {
    for src in [
        "{% for m in messages %}{{ m.content[1:] }}{% endfor %}",
        "{% for m in messages %}{{ m.content | upper }}{% endfor %}",
        "{% for m in messages %}{% if m.content.startswith('<') %}X{% endif %}{% endfor %}",
    ] {
        let msgs = [ChatMessage::new("user", "<|im_end|>x")];
        match template(src).render_parts(&msgs, false) {
            Err(TokenizerError::TemplateRender(msg)) => {
                assert!(msg.contains("cannot be traced"), "{src}: {msg}")
            }
            other => panic!("{src}: {other:?}"),
        }
    }
}
