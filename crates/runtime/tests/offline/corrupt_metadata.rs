//! Corrupt model metadata: every hyper-parameter is checked against sane bounds before
//! anything is allocated from it, and the error names the key.

use specdec_gguf::write::Builder;
use specdec_gguf::{GgufFile, Value};
use specdec_runtime::ModelConfig;

/// A small, valid llama header (no tensors: the configuration reads metadata only).
fn tiny(overrides: &[(&str, Value)]) -> GgufFile {
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("llama".into())),
        ("llama.block_count".into(), Value::U32(2)),
        ("llama.embedding_length".into(), Value::U32(64)),
        ("llama.attention.head_count".into(), Value::U32(4)),
        ("llama.attention.head_count_kv".into(), Value::U32(2)),
        ("llama.feed_forward_length".into(), Value::U32(128)),
        ("llama.context_length".into(), Value::U32(256)),
        ("llama.vocab_size".into(), Value::U32(100)),
        ("llama.rope.freq_base".into(), Value::F32(10000.0)),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-5),
        ),
    ];
    for (k, v) in overrides {
        match kv.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.clone(),
            None => kv.push((k.to_string(), v.clone())),
        }
    }
    let b = Builder {
        kv,
        ..Builder::default()
    };
    GgufFile::from_bytes(b.build()).unwrap()
}

fn rejected(key: &str, v: Value) {
    let f = tiny(&[(key, v.clone())]);
    let e = ModelConfig::from_gguf(&f).unwrap_err().to_string();
    assert!(
        e.contains(key),
        "{key} = {v:?}: error does not name the key: {e}"
    );
}

#[test]
fn the_tiny_header_is_valid() {
    let c = ModelConfig::from_gguf(&tiny(&[])).unwrap();
    assert_eq!(
        (c.n_layers, c.hidden, c.head_dim, c.vocab),
        (2, 64, 16, 100)
    );
}

#[test]
fn block_count_0xffffffff_is_an_error_not_a_terabyte_allocation() {
    rejected("llama.block_count", Value::U32(0xFFFF_FFFF));
    rejected("llama.block_count", Value::U64(u64::MAX));
}

#[test]
fn block_count_zero_is_rejected() {
    rejected("llama.block_count", Value::U32(0));
}

#[test]
fn absurd_sizes_are_rejected_naming_the_key() {
    for key in [
        "llama.embedding_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.feed_forward_length",
        "llama.context_length",
        "llama.vocab_size",
        "llama.attention.key_length",
        "llama.rope.dimension_count",
    ] {
        rejected(key, Value::U64(u64::MAX));
        rejected(key, Value::U32(0xFFFF_FFFF));
        rejected(key, Value::U32(0));
    }
}

#[test]
fn nan_infinite_zero_or_negative_rope_base_is_rejected() {
    for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -10000.0] {
        rejected("llama.rope.freq_base", Value::F32(v));
    }
}

#[test]
fn nan_negative_zero_or_large_epsilon_is_rejected() {
    for v in [f32::NAN, f32::INFINITY, -1e-5, 0.0, 0.5] {
        rejected("llama.attention.layer_norm_rms_epsilon", Value::F32(v));
    }
    let f = tiny(&[("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-6))]);
    ModelConfig::from_gguf(&f).unwrap();
}
