//! Writing a trained draft as a GGUF `llama` file the runtime loads like any model: F32
//! tensors (the runtime converts them at load), the hyper-parameter keys its loader
//! reads, and the target's tokenizer metadata copied byte for byte, so the draft passes
//! the engine's same-vocabulary check.

use specdec_engine::beam::{DraftScoring, DRAFT_SCORING_KEY};
use specdec_gguf::write::{Builder, RawKv};
use specdec_gguf::{GgufFile, Value};
use specdec_runtime::{Executor, Model, Node, SeqInput, Want};

use crate::model::Draft;
use crate::TrainError;

/// The GGUF of `draft`, named `name`, with `tokenizer_from`'s `tokenizer.*` metadata (the
/// target's) when given.
pub fn to_gguf(
    draft: &Draft,
    name: &str,
    tokenizer_from: Option<&GgufFile>,
) -> Result<Builder, TrainError> {
    let c = &draft.config;
    let u = |v: usize| Value::U32(v as u32);
    let mut b = Builder::default()
        .kv("general.architecture", Value::String("llama".into()))
        .kv("general.name", Value::String(name.into()))
        .kv("llama.block_count", u(c.n_layers))
        .kv("llama.context_length", u(c.context_length))
        .kv("llama.embedding_length", u(c.hidden))
        .kv("llama.feed_forward_length", u(c.ffn))
        .kv("llama.attention.head_count", u(c.n_heads))
        .kv("llama.attention.head_count_kv", u(c.n_kv_heads))
        .kv("llama.rope.dimension_count", u(c.head_dim()))
        .kv("llama.rope.freq_base", Value::F32(c.rope_base))
        .kv(
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(c.rms_eps),
        )
        .kv("llama.vocab_size", u(c.vocab))
        // Trained on the catalogue-renormalised distribution over trie children: the
        // engine scores this draft that way and computes only those columns of its head.
        .kv(
            DRAFT_SCORING_KEY,
            Value::String(DraftScoring::Catalogue.name().into()),
        );
    if let Some(src) = tokenizer_from {
        b.raw_kv = src
            .raw_metadata()
            .filter(|(k, ..)| k.starts_with("tokenizer."))
            .map(|(key, type_id, value)| RawKv {
                key: key.to_string(),
                type_id,
                value: value.to_vec(),
            })
            .collect();
    }
    for (pname, shape) in c.parameters() {
        let values: Vec<f32> = draft.param(&pname)?.flatten_all()?.to_vec1()?;
        // GGUF lists dimensions innermost first: `[out, in]` is written `[in, out]`.
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        b = b.f32_tensor(&pname, &dims, &values);
    }
    Ok(b)
}

/// Every row's logits of `tokens` through specdec's runtime loading `file`: what an export
/// is checked against.
pub fn runtime_logits(file: &GgufFile, tokens: &[u32]) -> Result<Vec<Vec<f32>>, TrainError> {
    let model = Model::from_gguf(file, Executor::new(1))?;
    let mut seq = model.new_sequence();
    let nodes = Node::chain(tokens);
    let out = model.forward(&mut [SeqInput {
        seq: &mut seq,
        nodes: &nodes,
        want: Want::All,
    }])?;
    Ok((0..tokens.len())
        .map(|i| out[0].get(i).expect("every row wanted").to_vec())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DraftConfig;

    #[test]
    fn export_loads_and_matches_the_candle_forward() {
        let cfg = DraftConfig {
            n_layers: 2,
            hidden: 64,
            n_heads: 4,
            n_kv_heads: 2,
            ffn: 96,
            vocab: 96,
            context_length: 64,
            rope_base: 10000.0,
            rms_eps: 1e-5,
        };
        let draft = Draft::new(cfg, 11, None).unwrap();
        let file = GgufFile::from_bytes(to_gguf(&draft, "t", None).unwrap().build()).unwrap();
        let tokens = [5u32, 17, 3, 90, 42, 8];
        let got = runtime_logits(&file, &tokens).unwrap();
        let want = draft.logits(&tokens).unwrap().to_vec2::<f32>().unwrap();
        let e = crate::logits_relative_error(&got, &want);
        assert!(
            e < crate::EXPORT_TOLERANCE,
            "runtime vs candle: relative error {e}"
        );
    }
}
