//! Draft models derived from a target file: a self-draft (the target's first blocks with its
//! embeddings, final norm and head, so speculative decoding runs before a trained draft
//! exists) and a deliberately bad draft for tests (the same tensors with their blocks
//! shuffled).

use crate::write::{encode_value, Builder, RawKv, Tensor};
use crate::{GgufError, GgufFile, Result, Value};

/// `src` cut to its first `layers` blocks, ready to write: every metadata entry copied byte
/// for byte (the tokenizer included) except `<arch>.block_count`, set to `layers` in the
/// source's integer type; the tensors `blk.N.*` with `N >= layers` dropped; every other
/// tensor (`token_embd`, `output_norm`, `output`, the kept blocks) copied with its type, in
/// file order, at the source's alignment. Per-layer metadata arrays, which the runtime does
/// not read, are copied as they are.
///
/// With `scramble_seed`, each tensor's quantization blocks are shuffled by a permutation drawn
/// from the seed: a draft that agrees with nothing. Whole blocks move, never bytes, so every
/// block stays a valid encoding with a real scale (random bytes would make f16 scales NaN or
/// infinite and the logits NaN, testing a crash rather than a bad draft), and each tensor
/// keeps its value distribution, so activations stay in range.
///
/// The tensors are copied into memory: the file's size is needed twice over while writing.
pub fn truncate_blocks(
    src: &GgufFile,
    layers: usize,
    scramble_seed: Option<u64>,
) -> Result<Builder> {
    let arch = src.get_str("general.architecture")?;
    let count_key = format!("{arch}.block_count");
    let blocks = src.get_u64(&count_key)?;
    if layers == 0 || layers as u64 >= blocks {
        return Err(GgufError::BlockCount { layers, blocks });
    }
    let raw_kv = src
        .raw_metadata()
        .map(|(key, type_id, value)| match src.get(key) {
            Some(v) if key == count_key => {
                let count = same_width(v, layers);
                RawKv {
                    key: key.to_string(),
                    type_id: count.type_id(),
                    value: encode_value(&count),
                }
            }
            _ => RawKv {
                key: key.to_string(),
                type_id,
                value: value.to_vec(),
            },
        })
        .collect();
    let mut rng = scramble_seed.map(SplitMix);
    let tensors = src
        .tensors
        .iter()
        .filter(|t| crate::names::block_index(&t.name).is_none_or(|n| n < layers))
        .map(|t| {
            let data = src.tensor_data(t);
            let data = match rng.as_mut() {
                Some(rng) => shuffle_blocks(data, t.ty.block_geometry().1, rng),
                None => data.to_vec(),
            };
            Tensor {
                name: t.name.clone(),
                dims: t.dims.clone(),
                type_id: t.ty.id(),
                offset: None,
                data,
            }
        })
        .collect();
    Ok(Builder {
        version: src.version,
        alignment: src.alignment(),
        raw_kv,
        tensors,
        ..Builder::default()
    })
}

/// `n` in the integer type of `v` (the block count it replaces, so `n` fits).
fn same_width(v: &Value, n: usize) -> Value {
    match v {
        Value::U8(_) => Value::U8(n as u8),
        Value::I8(_) => Value::I8(n as i8),
        Value::U16(_) => Value::U16(n as u16),
        Value::I16(_) => Value::I16(n as i16),
        Value::U32(_) => Value::U32(n as u32),
        Value::I32(_) => Value::I32(n as i32),
        Value::I64(_) => Value::I64(n as i64),
        _ => Value::U64(n as u64),
    }
}

/// `data`'s `block_bytes`-sized blocks in a random order (Fisher-Yates).
fn shuffle_blocks(data: &[u8], block_bytes: usize, rng: &mut SplitMix) -> Vec<u8> {
    let mut order: Vec<usize> = (0..data.len() / block_bytes).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    order
        .iter()
        .flat_map(|&b| &data[b * block_bytes..][..block_bytes])
        .copied()
        .collect()
}

/// SplitMix64: a few lines, and the same permutation for a seed on every platform and
/// version, which a dependency's generator does not promise.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for a test permutation (the modulo bias is below 2^-40).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    /// Three blocks of two tensors each, a norm and a head, at alignment 64, with a token
    /// piece that is not UTF-8 and an empty array of u8 (both of which only a raw copy keeps).
    fn tiny() -> Vec<u8> {
        let mut b = Builder {
            alignment: 64,
            ..Builder::default()
        }
        .kv("general.architecture", s("llama"))
        .kv("general.alignment", Value::U32(64))
        .kv("llama.block_count", Value::U32(3))
        .kv(
            "tokenizer.ggml.tokens",
            Value::Array(vec![s("a"), s("b"), s("c")]),
        );
        b.raw_kv.push(RawKv {
            key: "tokenizer.odd".into(),
            type_id: 9,
            // An array of 1 string of 2 bytes, 0xff 0xfe.
            value: [
                8u32.to_le_bytes().as_slice(),
                &1u64.to_le_bytes(),
                &2u64.to_le_bytes(),
                &[0xff, 0xfe],
            ]
            .concat(),
        });
        b.raw_kv.push(RawKv {
            key: "t.empty_u8".into(),
            type_id: 9,
            value: [0u32.to_le_bytes().as_slice(), &0u64.to_le_bytes()].concat(),
        });
        let q8: Vec<u8> = (0..4 * 34).map(|i| i as u8).collect();
        b = b.f32_tensor("token_embd.weight", &[2, 3], &[1., 2., 3., 4., 5., 6.]);
        for i in 0..3 {
            b = b
                .f32_tensor(&format!("blk.{i}.attn_norm.weight"), &[3], &[i as f32; 3])
                .tensor(&format!("blk.{i}.ffn_up.weight"), &[32, 4], 8, q8.clone());
        }
        b.f32_tensor("output_norm.weight", &[2], &[7., 8.])
            .tensor("output.weight", &[64, 2], 8, q8)
            .build()
    }

    fn truncated(layers: usize, seed: Option<u64>) -> GgufFile {
        let src = GgufFile::from_bytes(tiny()).unwrap();
        GgufFile::from_bytes(truncate_blocks(&src, layers, seed).unwrap().build()).unwrap()
    }

    #[test]
    fn keeps_the_first_blocks_and_everything_else_byte_for_byte() {
        let src = GgufFile::from_bytes(tiny()).unwrap();
        let out = truncated(2, None);
        assert_eq!(out.get("llama.block_count"), Some(&Value::U32(2)));
        let names: Vec<&str> = out.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "token_embd.weight",
                "blk.0.attn_norm.weight",
                "blk.0.ffn_up.weight",
                "blk.1.attn_norm.weight",
                "blk.1.ffn_up.weight",
                "output_norm.weight",
                "output.weight"
            ]
        );
        for t in &out.tensors {
            let s = src.tensor(&t.name).unwrap();
            assert_eq!((t.ty, &t.dims), (s.ty, &s.dims));
            assert_eq!(out.tensor_data(t), src.tensor_data(s), "{}", t.name);
            assert_eq!(t.offset % 64, 0, "{} is not aligned", t.name);
        }
        let raw = |f: &GgufFile| -> Vec<(String, u32, Vec<u8>)> {
            f.raw_metadata()
                .filter(|(k, ..)| *k != "llama.block_count")
                .map(|(k, t, v)| (k.to_string(), t, v.to_vec()))
                .collect()
        };
        assert_eq!(raw(&out), raw(&src));
        assert_eq!(out.raw_metadata().count(), src.raw_metadata().count());
    }

    #[test]
    fn scrambling_permutes_whole_blocks() {
        let src = GgufFile::from_bytes(tiny()).unwrap();
        let a = truncated(2, Some(7));
        assert_eq!(a.tensors.len(), 7);
        let mut moved = false;
        for t in &a.tensors {
            let s = src.tensor(&t.name).unwrap();
            assert_eq!((t.ty, &t.dims), (s.ty, &s.dims));
            let bs = t.ty.block_geometry().1;
            let mut got: Vec<&[u8]> = a.tensor_data(t).chunks(bs).collect();
            let mut want: Vec<&[u8]> = src.tensor_data(s).chunks(bs).collect();
            moved |= got != want;
            got.sort();
            want.sort();
            assert_eq!(got, want, "{}: not a permutation of its blocks", t.name);
        }
        assert!(moved);
        // The same seed gives the same file.
        let b = truncated(2, Some(7));
        for (x, y) in a.tensors.iter().zip(&b.tensors) {
            assert_eq!(a.tensor_data(x), b.tensor_data(y));
        }
    }

    #[test]
    fn refuses_no_blocks_or_all_of_them() {
        let src = GgufFile::from_bytes(tiny()).unwrap();
        for layers in [0, 3, 4] {
            let e = truncate_blocks(&src, layers, None).err().unwrap();
            assert!(matches!(e, GgufError::BlockCount { blocks: 3, .. }), "{e}");
            assert!(e.to_string().contains("1 to 2"), "{e}");
        }
    }
}
