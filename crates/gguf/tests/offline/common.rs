//! Fixtures built with the library's GGUF writer.
#![allow(dead_code)]

#[allow(unused_imports)] // each test binary uses part of it
pub use specdec_gguf::write::{Builder, Tensor};
use specdec_gguf::Value;

pub fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

/// A small valid file with every metadata type, nested string arrays and three tensors; the
/// last tensor's bytes end the file, so any truncation cuts something that is needed.
pub fn sample() -> Builder {
    let f32_vals: Vec<f32> = (0..64).map(|i| i as f32 * 0.25 - 3.0).collect();
    // One Q8_0 block: d = 1.0 (f16 0x3c00), q = -16..16.
    let mut q8 = vec![0x00, 0x3c];
    q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
    Builder::default()
        .kv("general.architecture", s("llama"))
        .kv("general.name", s("tiny\u{e9}"))
        .kv("t.u8", Value::U8(200))
        .kv("t.i8", Value::I8(-100))
        .kv("t.u16", Value::U16(60000))
        .kv("t.i16", Value::I16(-30000))
        .kv("t.u32", Value::U32(4_000_000_000))
        .kv("t.i32", Value::I32(-2_000_000_000))
        .kv("t.f32", Value::F32(1.5))
        .kv("t.bool", Value::Bool(true))
        .kv("t.u64", Value::U64(u64::MAX))
        .kv("t.i64", Value::I64(i64::MIN))
        .kv("t.f64", Value::F64(-2.25))
        .kv("t.empty", Value::Array(vec![]))
        .kv(
            "tokenizer.ggml.tokens",
            Value::Array(vec![s("<s>"), s(""), s("hello"), s("▁world")]),
        )
        .kv(
            "t.nested",
            Value::Array(vec![
                Value::Array(vec![s("a"), s("bc")]),
                Value::Array(vec![]),
                Value::Array(vec![s("def")]),
            ]),
        )
        .kv("t.i32s", Value::Array(vec![Value::I32(1), Value::I32(-2)]))
        .f32_tensor("a", &[16, 4], &f32_vals)
        .tensor("b.q8", &[32], 8, q8)
        .f32_tensor("c", &[3], &[1.0, 2.0, 3.0])
}
