//! Unit tests on small synthetic GGUF files, written in memory by a minimal GGUF v3 writer.

mod chat;
mod errors;
mod gpt2;
mod llama;
mod spm;

use specdec_gguf::{GgufFile, Value};

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(items) => {
            // GGUF arrays are homogeneous; an empty one is written as a string array.
            let elem = items.first().map_or(8, Value::type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|item| put_value(out, item));
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// A GGUF v3 image with these metadata entries and no tensors, parsed by the real reader.
pub(crate) fn gguf(kvs: &[(&str, Value)]) -> GgufFile {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (key, v) in kvs {
        put_str(&mut out, key);
        out.extend_from_slice(&v.type_id().to_le_bytes());
        put_value(&mut out, v);
    }
    GgufFile::from_bytes(out).expect("synthetic GGUF parses")
}

pub(crate) fn s(x: &str) -> Value {
    Value::String(x.to_string())
}

pub(crate) fn strings<'a>(xs: impl IntoIterator<Item = &'a str>) -> Value {
    Value::Array(xs.into_iter().map(s).collect())
}
