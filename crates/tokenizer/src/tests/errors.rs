//! Bad metadata and bad templates are errors that name what is wrong, never panics.

use specdec_gguf::Value;

use super::{gguf, s, strings};
use crate::{ChatMessage, ChatTemplate, Tokenizer, TokenizerError};

fn build(kvs: &[(&str, Value)]) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_gguf(&gguf(kvs))
}

fn base() -> Vec<(&'static str, Value)> {
    vec![
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.tokens", strings(["a", "b", "ab"])),
        ("tokenizer.ggml.merges", strings(["a b"])),
    ]
}

fn with(key: &'static str, v: Value) -> Vec<(&'static str, Value)> {
    let mut kvs: Vec<_> = base().into_iter().filter(|(k, _)| *k != key).collect();
    kvs.push((key, v));
    kvs
}

fn without(key: &str) -> Vec<(&'static str, Value)> {
    base().into_iter().filter(|(k, _)| *k != key).collect()
}

fn invalid_key(r: Result<Tokenizer, TokenizerError>) -> String {
    match r {
        Err(TokenizerError::InvalidMetadata { key, .. }) => key,
        other => panic!("expected InvalidMetadata, got {other:?}"),
    }
}

#[test]
fn the_base_vocabulary_builds() {
    let t = build(&base()).unwrap();
    assert_eq!(t.encode("ab", false).unwrap(), [2]);
    assert_eq!(t.vocab_size(), 3);
}

#[test]
fn missing_keys_are_named() {
    for key in [
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.model",
        "tokenizer.ggml.merges",
    ] {
        match build(&without(key)) {
            Err(TokenizerError::MissingMetadata(k)) => assert_eq!(k, key),
            other => panic!("{key}: {other:?}"),
        }
    }
    let llama = with("tokenizer.ggml.model", s("llama"));
    assert!(
        matches!(build(&llama), Err(TokenizerError::MissingMetadata(k)) if k == "tokenizer.ggml.scores")
    );
}

#[test]
fn wrong_types_are_named() {
    let tokens = "tokenizer.ggml.tokens";
    assert_eq!(invalid_key(build(&with(tokens, s("a b")))), tokens);
    let numbers = Value::Array(vec![Value::U32(1), Value::U32(2)]);
    assert_eq!(invalid_key(build(&with(tokens, numbers))), tokens);
    assert_eq!(
        invalid_key(build(&with(tokens, Value::Array(vec![])))),
        tokens
    );
    let model = "tokenizer.ggml.model";
    assert_eq!(invalid_key(build(&with(model, Value::U32(2)))), model);
    let types = "tokenizer.ggml.token_type";
    let short = Value::Array(vec![Value::I32(1)]);
    assert_eq!(invalid_key(build(&with(types, short))), types);
    let add_bos = "tokenizer.ggml.add_bos_token";
    assert_eq!(invalid_key(build(&with(add_bos, s("yes")))), add_bos);
    let eos = "tokenizer.ggml.eos_token_id";
    assert_eq!(invalid_key(build(&with(eos, s("2")))), eos);
    let merges = "tokenizer.ggml.merges";
    assert_eq!(invalid_key(build(&with(merges, strings(["ab"])))), merges);
    assert_eq!(invalid_key(build(&with(merges, strings(["a zz"])))), merges);
}

#[test]
fn unknown_model_is_named() {
    match build(&with("tokenizer.ggml.model", s("bert"))) {
        Err(e @ TokenizerError::UnsupportedModel(_)) => assert!(e.to_string().contains("bert")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_special_ids_are_ignored_with_a_warning() {
    let t = build(&with("tokenizer.ggml.eos_token_id", Value::I32(-1))).unwrap();
    assert_eq!(t.eos_id(), None);
    let t = build(&with("tokenizer.ggml.bos_token_id", Value::U32(99))).unwrap();
    assert_eq!(t.bos_id(), None);
    assert!(t.warnings()[0].contains("bos_token_id"));
}

#[test]
fn garbage_input_decodes_without_panicking() {
    let t = build(&base()).unwrap();
    assert_eq!(t.decode(&[7, u32::MAX], false), "");
    assert_eq!(t.token_text(3), None);
}

fn template(src: &str) -> Result<ChatTemplate, TokenizerError> {
    ChatTemplate::new(src, "<s>", "</s>")
}

#[test]
fn template_errors_carry_minijinja_messages() {
    let msgs = [ChatMessage::new("user", "hi")];
    match template("{% for m in messages %}") {
        Err(TokenizerError::TemplateSyntax(msg)) => assert!(msg.contains("end of input"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let t = template("{{ raise_exception('only user and assistant roles') }}").unwrap();
    match t.render(&msgs, false) {
        Err(TokenizerError::TemplateRender(msg)) => assert!(msg.contains("only user"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let t = template("{{ messages[0].content.no_such_method() }}").unwrap();
    assert!(matches!(
        t.render(&msgs, false),
        Err(TokenizerError::TemplateRender(_))
    ));
    let bad = gguf(&with("tokenizer.chat_template", Value::U32(1)));
    assert!(matches!(
        ChatTemplate::from_gguf(&bad),
        Err(TokenizerError::InvalidMetadata { .. })
    ));
}

#[test]
fn templates_get_hf_variables_and_python_methods() {
    let src = "{{ bos_token }}{% for m in messages %}{% if m['content'].startswith(' ') %}[{{ m.role.upper() }}:{{ m['content'].strip() }}]{% endif %}\n{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}{{ strftime_now('%Y')|length }}";
    let t = template(src).unwrap();
    let msgs = [
        ChatMessage::new("user", "  hi "),
        ChatMessage::new("bot", "x"),
    ];
    // trim_blocks drops the newline after a block tag, as in transformers' Jinja setup
    // (jinja2 renders "<s>[USER:hi]></s>" too).
    assert_eq!(t.render(&msgs, true).unwrap(), "<s>[USER:hi]></s>4");
}

#[test]
fn no_template_falls_back_to_chatml() {
    let mut kvs = base();
    kvs.push(("tokenizer.ggml.eos_token_id", Value::U32(2)));
    let file = gguf(&kvs);
    assert!(ChatTemplate::from_gguf(&file).unwrap().is_none());
    let t = ChatTemplate::from_gguf_or_chatml(&file).unwrap();
    let msgs = [
        ChatMessage::new("system", "S"),
        ChatMessage::new("user", "U"),
    ];
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    );
}
