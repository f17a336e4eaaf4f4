//! Parsing the GGUF header and giving out tensor bytes.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use crate::{GgmlType, GgufError, Result, Value};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Deeper nesting than this is never produced by real writers; bounding it keeps a hostile
/// file from exhausting the stack.
const MAX_ARRAY_DEPTH: usize = 4;

/// A tensor's name, shape and where its bytes lie in the file.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// GGML order: `dims[0]` is the contiguous (innermost) dimension.
    pub dims: Vec<u64>,
    /// The element type.
    pub ty: GgmlType,
    /// Byte offset inside the file (already absolute).
    pub offset: usize,
    /// Size of the tensor's data in bytes.
    pub size: usize,
}

impl TensorInfo {
    /// Number of elements (the product of `dims`).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file: metadata, tensor infos and the (memory-mapped) data.
pub struct GgufFile {
    /// The GGUF version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, Value>,
    /// Tensor infos, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Each entry's key, type id and encoded value bytes in the file, in file order: a
    /// derived file copies these so values the reader normalises (lossy UTF-8 strings, an
    /// empty array's element type) survive byte for byte.
    raw_metadata: Vec<(String, u32, std::ops::Range<usize>)>,
    storage: Storage,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens and memory-maps `path`, then parses and checks the header.
    // Mapping a file is unsafe in memmap2 (another process may change it under the map);
    // a map is what lets a multi-GB model load without copying it into memory.
    #[allow(unsafe_code)]
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; if another process truncates the file while it is
        // mapped, reads fault, which is the documented limitation of every mmap-based loader.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::parse(Storage::Mmap(map))
    }

    /// Parses a GGUF image held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::parse(Storage::Owned(bytes))
    }

    fn parse(storage: Storage) -> Result<Self> {
        let mut r = Reader {
            buf: storage.bytes(),
            pos: 0,
        };
        let magic: [u8; 4] = r.take(4)?.try_into().expect("4 bytes");
        if &magic != MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        // A tensor info is at least a name length, dimension count, type and offset.
        let n_tensors = r.count("tensor count", 24)?;
        let n_kv = r.count("metadata count", 12)?;
        let mut metadata = BTreeMap::new();
        let mut raw_metadata = Vec::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key = r.string()?;
            let ty = r.u32()?;
            let start = r.pos;
            let value = r.value(ty, 0)?;
            raw_metadata.push((key.clone(), ty, start..r.pos));
            // llama.cpp rejects duplicates too; silently keeping one would hide a broken file.
            match metadata.entry(key) {
                Entry::Occupied(e) => {
                    return Err(corrupt(format!("duplicate metadata key `{}`", e.key())))
                }
                Entry::Vacant(e) => {
                    e.insert(value);
                }
            }
        }
        let mut raw = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = r.string()?;
            let n_dims = r.u32()?;
            if n_dims > 8 {
                return Err(corrupt(format!("tensor `{name}` has {n_dims} dimensions")));
            }
            let dims = (0..n_dims).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
            let type_id = r.u32()?;
            let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownType {
                tensor: name.clone(),
                type_id,
            })?;
            let offset = r.u64()?;
            raw.push((name, dims, ty, offset));
        }
        // `tensor()` looks names up, so a second tensor of the same name would be unreachable.
        let mut seen = HashSet::with_capacity(raw.len());
        if let Some((name, ..)) = raw.iter().find(|(name, ..)| !seen.insert(name.as_str())) {
            return Err(corrupt(format!("duplicate tensor name `{name}`")));
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= 1 << 20 => a,
                // Name only the type: the value may be a huge array.
                _ => {
                    return Err(corrupt(match v.as_u64() {
                        Some(a) => format!("general.alignment {a} is not a power of two <= 1 MiB"),
                        None => format!("general.alignment has type {}", v.type_name()),
                    }))
                }
            },
        };
        let data_start = (r.pos as u64).div_ceil(alignment) * alignment;
        let file_len = r.buf.len() as u64;
        let mut tensors = Vec::with_capacity(raw.len());
        for (name, dims, ty, offset) in raw {
            let elements = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| corrupt(format!("tensor `{name}` shape {dims:?} overflows")))?;
            let size = ty.bytes_for(elements).ok_or_else(|| {
                corrupt(format!(
                    "tensor `{name}` of {ty:?} has {elements} elements, not whole blocks"
                ))
            })?;
            let start = data_start
                .checked_add(offset)
                .filter(|s| s.checked_add(size).is_some_and(|end| end <= file_len))
                .ok_or_else(|| {
                    corrupt(format!(
                        "tensor `{name}` ({size} bytes at offset {offset}) lies beyond the end of the file ({file_len} bytes)"
                    ))
                })?;
            tensors.push(TensorInfo {
                name,
                dims,
                ty,
                offset: start as usize,
                size: size as usize,
            });
        }
        // Two tensors sharing bytes are a corrupt file (a wrong declared type or offset);
        // zero-sized tensors own no bytes and cannot overlap anything.
        let mut ranges: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
        ranges.sort_by_key(|t| t.offset);
        if let Some(w) = ranges
            .windows(2)
            .find(|w| w[0].offset + w[0].size > w[1].offset)
        {
            return Err(corrupt(format!(
                "tensor `{}` (bytes {}..{}) overlaps tensor `{}` (bytes {}..{})",
                w[0].name,
                w[0].offset,
                w[0].offset + w[0].size,
                w[1].name,
                w[1].offset,
                w[1].offset + w[1].size
            )));
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
            raw_metadata,
            storage,
        })
    }

    /// Every metadata entry as (key, type id, encoded value bytes), in file order.
    pub fn raw_metadata(&self) -> impl Iterator<Item = (&str, u32, &[u8])> {
        self.raw_metadata
            .iter()
            .map(|(k, ty, range)| (k.as_str(), *ty, &self.storage.bytes()[range.clone()]))
    }

    /// The alignment of the tensor data (`general.alignment`, 32 when absent; checked at
    /// parse time).
    pub fn alignment(&self) -> u64 {
        self.get("general.alignment")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of a tensor (bounds were checked at parse time).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        &self.storage.bytes()[info.offset..info.offset + info.size]
    }

    /// Tells the OS that a tensor's mapped pages are no longer needed, so a loader that has
    /// repacked it does not keep a second copy of the weights resident. The data stays
    /// readable (pages fault in again from the file); a file read into memory is left as
    /// it is. Only a hint: errors are ignored.
    // `madvise(DONTNEED)` is unsafe in memmap2 (it would discard writes to a private map);
    // this map is read-only, see the SAFETY comment below.
    #[allow(unsafe_code)]
    pub fn release(&self, info: &TensorInfo) {
        #[cfg(unix)]
        if let Storage::Mmap(m) = &self.storage {
            // SAFETY: the map is read-only and file-backed, so dropping its pages discards
            // nothing: any later read faults the same bytes in from the file. No slice
            // into it is written through.
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, info.offset, info.size)
            };
        }
    }

    /// The metadata value under `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_string()))
    }

    fn wrong(key: &str, expected: &'static str, v: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_name(),
        }
    }

    /// The string under `key`; an error if it is missing or not a string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "string", v))
    }

    /// The non-negative integer under `key`, whatever its stored width; an error if it is
    /// missing or not one.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "unsigned integer", v))
    }

    /// The number (float or integer) under `key` as f64; an error if it is missing or not a
    /// number.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "number", v))
    }

    /// The bool under `key`; an error if it is missing or not a bool.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong(key, "bool", v))
    }

    /// The array under `key`; an error if it is missing or not an array.
    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, "array", v))
    }
}

fn corrupt(msg: String) -> GgufError {
    GgufError::Corrupt(msg)
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                corrupt(format!(
                    "needed {n} bytes at offset {}, file has {}",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("exact length"))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }

    /// A count of items each needing at least `min_item_bytes`: bounded by what is left, so a
    /// corrupt count cannot trigger a huge allocation.
    fn count(&mut self, what: &str, min_item_bytes: usize) -> Result<usize> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item_bytes as u64) > left {
            return Err(corrupt(format!(
                "{what} {n} cannot fit in the {left} bytes left"
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String> {
        let len = self.count("string length", 1)?;
        let bytes = self.take(len)?;
        // Some converters write invalid UTF-8 in token pieces; keep them readable.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.arr::<1>()?[0]),
            1 => Value::I8(self.arr::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.arr()?)),
            3 => Value::I16(i16::from_le_bytes(self.arr()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.arr()?)),
            6 => Value::F32(f32::from_le_bytes(self.arr()?)),
            7 => match self.arr::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(corrupt(format!("bool value {b}"))),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(corrupt("arrays nested too deeply".into()));
                }
                let elem_ty = self.u32()?;
                let min = match elem_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    _ => 8,
                };
                let n = self.count("array length", min)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem_ty, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.arr()?)),
            12 => Value::F64(f64::from_le_bytes(self.arr()?)),
            t => return Err(corrupt(format!("unknown metadata value type {t}"))),
        })
    }
}
