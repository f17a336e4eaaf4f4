//! `gemma3` (Gemma 3): the Llama skeleton with embeddings scaled by √hidden, RMS norms on
//! each query and key head, norms after attention and after the feed-forward, GeGLU with
//! tanh-GELU, NeoX RoPE, a tied output head, and two kinds of layer: local ones attend to
//! a sliding window with RoPE base 10000, every sixth (layer i with (i + 1) % 6 == 0) is
//! global with the file's `rope.freq_base`.
//!
//! What the file does not say follows llama.cpp's reading of Gemma 3 GGUFs (the window
//! pattern of 6, the local RoPE base; attention scaled by 1/√head_dim unless the file has
//! `attention.query_pre_attn_scalar`). The norm weights are used as stored: the converter
//! writes Gemma's `1 + w` already added (see the real-model test pinning it).

use specdec_gguf::GgufFile;

use super::{Activation, ArchSpec, Family, LayerSpec, OutputHead, RopeSpec};
use crate::config::{Arch, ModelConfig, RopeStyle};
use crate::RuntimeError;

pub(super) const FAMILY: Family = Family {
    arch: Arch::Gemma3,
    names: &["gemma3"],
    rope_style: RopeStyle::NeoX,
    spec,
};

/// Every `PATTERN`-th layer is global, the others local.
const PATTERN: usize = 6;
const LOCAL_ROPE_BASE: f32 = 10_000.0;

fn spec(cfg: &ModelConfig, file: &GgufFile) -> Result<ArchSpec, RuntimeError> {
    let key = |k: &str| format!("gemma3.{k}");
    let window = file
        .get(&key("attention.sliding_window"))
        .map(|v| {
            v.as_u64()
                .ok_or_else(|| bad(&key("attention.sliding_window")))
        })
        .transpose()?
        .map(|w| w as usize);
    if window == Some(0) {
        return Err(RuntimeError::Unsupported(format!(
            "metadata `{}` is 0",
            key("attention.sliding_window")
        )));
    }
    let scalar = file
        .get(&key("attention.query_pre_attn_scalar"))
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| bad(&key("attention.query_pre_attn_scalar")))
        })
        .transpose()?;
    let attention_scale = match scalar {
        Some(s) if s.is_finite() && s > 0.0 => Some((1.0 / s.sqrt()) as f32),
        Some(s) => {
            return Err(RuntimeError::Unsupported(format!(
                "metadata `{}` is {s}",
                key("attention.query_pre_attn_scalar")
            )))
        }
        None => None,
    };
    Ok(ArchSpec {
        layers: (0..cfg.n_layers).map(|i| layer(i, window)).collect(),
        ropes: vec![rope(cfg, cfg.rope_base), rope(cfg, LOCAL_ROPE_BASE)],
        embedding_scale: Some((cfg.hidden as f32).sqrt()),
        attention_scale,
        output: OutputHead::Tied,
    })
}

fn rope(cfg: &ModelConfig, base: f32) -> RopeSpec {
    RopeSpec {
        style: cfg.rope_style,
        base,
        dims: cfg.rope_dims,
        scaled: false,
    }
}

/// Layer `i`: global (RoPE table 0, no window) or local (table 1, `window`); a file without
/// a window has only global layers.
fn layer(i: usize, window: Option<usize>) -> LayerSpec {
    let local = window.filter(|_| !(i + 1).is_multiple_of(PATTERN));
    LayerSpec {
        qkv_bias: false,
        qk_norm: true,
        post_attn_norm: true,
        post_ffn_norm: true,
        activation: Activation::GeluTanh,
        sliding_window: local,
        rope: usize::from(local.is_some()),
    }
}

fn bad(key: &str) -> RuntimeError {
    RuntimeError::Unsupported(format!("metadata `{key}` has an unexpected type"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global_with_the_file_base() {
        let kinds: Vec<Option<usize>> = (0..18)
            .map(|i| layer(i, Some(512)).sliding_window)
            .collect();
        for (i, w) in kinds.iter().enumerate() {
            assert_eq!(w.is_none(), [5, 11, 17].contains(&i), "layer {i}");
        }
        assert_eq!(layer(0, Some(512)).rope, 1);
        assert_eq!(layer(5, Some(512)).rope, 0);
        assert_eq!(layer(0, None).sliding_window, None);
        assert_eq!(layer(0, None).rope, 0);
    }
}
