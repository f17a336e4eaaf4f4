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

/// Renders `messages` with `src` on a thread, so that a template that never ends fails the
/// test instead of hanging it (the thread is left behind).
fn render_within(src: &str, messages: Vec<ChatMessage>) -> crate::Result<Vec<ChatPart>> {
    let t = template(src);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(t.render_parts(&messages, true));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the render ended")
}

/// A chat template is model-file input: one with nested loops (10^10 steps, 10 GB of
/// text) hung the server's tokenizing for good. Its work is bounded now, by its input's
/// size, and running out is its own error.
#[test]
fn a_chat_template_with_nested_loops_runs_out_of_fuel() {
    let hostile = [
        // Endless text.
        "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
        // Endless work writing nothing.
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        // Few steps, each building a large string.
        "{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for a in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    ];
    for src in hostile {
        let messages = vec![ChatMessage::new("user", "hi")];
        match render_within(src, messages) {
            Err(TokenizerError::TemplateTooCostly {
                fuel,
                messages,
                bytes,
            }) => {
                assert_eq!((messages, bytes), (1, 4 + 2 + "<s></s>".len()), "{src}");
                assert_eq!(fuel, 200_000 + 1_000 + 6, "{src}");
            }
            other => panic!("{src}: {other:?}"),
        }
    }
}

/// The bound grows with the conversation: a long one, and a large one, render through
/// ChatML as they did without a bound.
#[test]
fn long_and_large_conversations_render_within_their_fuel() {
    let t = ChatTemplate::chatml("", "<|im_end|>").unwrap();
    let many: Vec<ChatMessage> = (0..20_000)
        .map(|i| ChatMessage::new(["user", "assistant"][i % 2], format!("turn {i}")))
        .collect();
    let large = vec![
        ChatMessage::new("system", "s".repeat(1 << 20)),
        ChatMessage::new("user", "u".repeat(8 << 20)),
    ];
    let empty: Vec<ChatMessage> = (0..50_000).map(|_| ChatMessage::new("user", "")).collect();
    for messages in [many, large, empty] {
        let want: String = messages
            .iter()
            .map(|m| format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content))
            .chain(["<|im_start|>assistant\n".to_string()])
            .collect();
        assert_eq!(t.render(&messages, true).unwrap(), want);
        assert_eq!(joined(&t.render_parts(&messages, true).unwrap()), want);
    }
}
