//! A minimal GGUF writer for tests: enough to build valid files and precisely broken ones.
#![allow(dead_code)]

use specdec_gguf::Value;

pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    /// `None`: laid out after the previous tensor, aligned. `Some`: written as is.
    pub offset: Option<u64>,
    pub data: Vec<u8>,
}

pub struct Builder {
    pub magic: [u8; 4],
    pub version: u32,
    pub alignment: u64,
    pub kv: Vec<(String, Value)>,
    pub tensors: Vec<Tensor>,
}

/// A built file plus the positions of every u64 count/length field in it, so tests can
/// corrupt exactly those.
pub struct Built {
    pub bytes: Vec<u8>,
    pub length_fields: Vec<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            magic: *b"GGUF",
            version: 3,
            alignment: 32,
            kv: Vec::new(),
            tensors: Vec::new(),
        }
    }
}

impl Builder {
    pub fn kv(mut self, key: &str, v: Value) -> Self {
        self.kv.push((key.to_string(), v));
        self
    }

    pub fn tensor(mut self, name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> Self {
        self.tensors.push(Tensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            type_id,
            offset: None,
            data,
        });
        self
    }

    pub fn f32_tensor(self, name: &str, dims: &[u64], values: &[f32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, 0, data)
    }

    pub fn build(&self) -> Vec<u8> {
        self.build_with_fields().bytes
    }

    pub fn build_with_fields(&self) -> Built {
        let mut w = Writer::default();
        w.buf.extend_from_slice(&self.magic);
        w.u32(self.version);
        w.len(self.tensors.len() as u64);
        w.len(self.kv.len() as u64);
        for (k, v) in &self.kv {
            w.string(k);
            w.u32(v.type_id());
            w.value(v);
        }
        // Offsets relative to the data section, each tensor aligned.
        let mut next = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            let off = t
                .offset
                .unwrap_or_else(|| next.div_ceil(self.alignment) * self.alignment);
            offsets.push(off);
            next = off + t.data.len() as u64;
        }
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            w.string(&t.name);
            w.u32(t.dims.len() as u32);
            for &d in &t.dims {
                w.u64(d);
            }
            w.u32(t.type_id);
            w.u64(off);
        }
        // Without tensors the file ends right after the header, so tests can find the last
        // value at the very end.
        if self.tensors.is_empty() {
            return Built {
                bytes: w.buf,
                length_fields: w.length_fields,
            };
        }
        let data_start = (w.buf.len() as u64).div_ceil(self.alignment) * self.alignment;
        w.buf.resize(data_start as usize, 0);
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            if t.offset.is_some() {
                continue; // deliberately misplaced tensors have no data written
            }
            w.buf.resize((data_start + off) as usize, 0);
            w.buf.extend_from_slice(&t.data);
        }
        Built {
            bytes: w.buf,
            length_fields: w.length_fields,
        }
    }
}

#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
    length_fields: Vec<usize>,
}

impl Writer {
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn len(&mut self, v: u64) {
        self.length_fields.push(self.buf.len());
        self.u64(v);
    }

    fn string(&mut self, s: &str) {
        self.len(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::U8(x) => self.buf.push(*x),
            Value::I8(x) => self.buf.push(*x as u8),
            Value::U16(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => self.u32(*x),
            Value::I32(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => self.buf.push(*x as u8),
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                // Empty arrays still need an element type; u32 is as good as any.
                self.u32(items.first().map_or(4, Value::type_id));
                self.len(items.len() as u64);
                for item in items {
                    self.value(item);
                }
            }
            Value::U64(x) => self.u64(*x),
            Value::I64(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => self.buf.extend_from_slice(&x.to_le_bytes()),
        }
    }
}

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
