//! A GGUF writer: what a model export (a trained draft model) writes, and what tests use to
//! build valid files and precisely broken ones (every length field's position is kept).

use crate::Value;

/// One tensor to write.
pub struct Tensor {
    /// The tensor's name.
    pub name: String,
    /// Its shape in GGML order (`dims[0]` innermost).
    pub dims: Vec<u64>,
    /// Its GGML type id (see [`crate::GgmlType::id`]).
    pub type_id: u32,
    /// `None`: laid out after the previous tensor, aligned. `Some`: written as is.
    pub offset: Option<u64>,
    /// Its encoded bytes.
    pub data: Vec<u8>,
}

/// A file to write: header fields, metadata and tensors, in order.
pub struct Builder {
    /// The first four bytes, `GGUF` unless a test wants a broken file.
    pub magic: [u8; 4],
    /// The GGUF version written (3 by default).
    pub version: u32,
    /// Alignment of the data section and of tensors placed automatically. Not written as
    /// metadata: add `general.alignment` to `kv` when it is not the default 32.
    pub alignment: u64,
    /// Metadata entries, written first and in order.
    pub kv: Vec<(String, Value)>,
    /// Entries already encoded, written after `kv`: what a file derived from another copies.
    pub raw_kv: Vec<RawKv>,
    /// Tensors, in order.
    pub tensors: Vec<Tensor>,
}

/// A metadata entry as its on-disk bytes: the value's type id and its encoding.
pub struct RawKv {
    /// The metadata key.
    pub key: String,
    /// The GGUF value type id written before the value.
    pub type_id: u32,
    /// The value's encoding, copied as is.
    pub value: Vec<u8>,
}

/// The on-disk encoding of `v` (without its type id), as [`Builder`] writes it.
pub fn encode_value(v: &Value) -> Vec<u8> {
    let mut w = Writer::default();
    w.value(v);
    w.buf
}

/// A built file plus the positions of every u64 count/length field in it, so tests can
/// corrupt exactly those.
pub struct Built {
    /// The file.
    pub bytes: Vec<u8>,
    /// Byte offsets of every u64 count or length field in `bytes`.
    pub length_fields: Vec<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            magic: *b"GGUF",
            version: 3,
            alignment: 32,
            kv: Vec::new(),
            raw_kv: Vec::new(),
            tensors: Vec::new(),
        }
    }
}

impl Builder {
    /// Adds a metadata entry.
    pub fn kv(mut self, key: &str, v: Value) -> Self {
        self.kv.push((key.to_string(), v));
        self
    }

    /// Adds a tensor of GGML type `type_id` whose bytes are `data`, placed after the
    /// previous one (aligned).
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

    /// Adds an F32 tensor holding `values`, placed after the previous one (aligned).
    pub fn f32_tensor(self, name: &str, dims: &[u64], values: &[f32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, 0, data)
    }

    /// The file's bytes.
    pub fn build(&self) -> Vec<u8> {
        self.build_with_fields().bytes
    }

    /// The file's bytes and where its length fields are.
    pub fn build_with_fields(&self) -> Built {
        let mut w = Writer::default();
        w.buf.extend_from_slice(&self.magic);
        w.u32(self.version);
        w.len(self.tensors.len() as u64);
        w.len((self.kv.len() + self.raw_kv.len()) as u64);
        for (k, v) in &self.kv {
            w.string(k);
            w.u32(v.type_id());
            w.value(v);
        }
        // Length fields inside raw values are not tracked: they are copies, not test fixtures.
        for r in &self.raw_kv {
            w.string(&r.key);
            w.u32(r.type_id);
            w.buf.extend_from_slice(&r.value);
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

impl Builder {
    /// Writes the file to `path` atomically and durably ([`specdec_fs::write_atomic`]), so
    /// a reader never sees half a model. Returns the number of bytes written.
    pub fn write_to(&self, path: &std::path::Path) -> std::io::Result<u64> {
        let bytes = self.build();
        specdec_fs::write_atomic(path, &bytes)?;
        Ok(bytes.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufFile;

    #[test]
    fn a_written_file_reads_back() {
        let path = std::env::temp_dir().join(format!("specdec-write-{}.gguf", std::process::id()));
        Builder::default()
            .kv("general.architecture", Value::String("llama".into()))
            .f32_tensor("t", &[2, 2], &[1.0, 2.0, 3.0, 4.0])
            .write_to(&path)
            .unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        assert!(f.tensor("t").is_some());
        std::fs::remove_file(&path).unwrap();
    }
}
