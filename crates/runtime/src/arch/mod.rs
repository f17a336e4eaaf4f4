//! Per-architecture descriptions of the forward: what each layer has and does.
//!
//! A family is one small file producing an [`ArchSpec`] from the model's configuration;
//! the loader and the forward read the description instead of asking which architecture
//! they run, so a new family is a new file here plus its entry in [`FAMILIES`]. A
//! description may ask for a feature this forward does not implement yet (see
//! [`ArchSpec::check_supported`]); loading such a model is an `Unsupported` error rather
//! than a wrong forward. The description is public to read ([`crate::Model::arch_spec`]),
//! not to build.

mod gemma3;
mod llama;
mod qwen2;

use specdec_gguf::GgufFile;

use crate::config::{Arch, ModelConfig, RopeStyle};
use crate::RuntimeError;

/// The gated feed-forward's activation: `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Activation {
    /// SiLU (SwiGLU).
    Silu,
    /// GELU, tanh approximation (GeGLU).
    GeluTanh,
}

/// One RoPE table: the layers of one kind share it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RopeSpec {
    /// How the table pairs dimensions.
    pub style: RopeStyle,
    /// The frequency base.
    pub base: f32,
    /// Leading dimensions of each head that are rotated.
    pub dims: usize,
    /// Whether the file's `rope_freqs` factors (Llama 3) divide this table's frequencies.
    pub scaled: bool,
}

/// What one layer has and does, beyond the Llama skeleton every layer shares (pre-norm
/// attention and gated feed-forward, each added to the residual stream).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LayerSpec {
    /// Biases on the q, k and v projections.
    pub qkv_bias: bool,
    /// RMS norms of each query and key head after projection, before RoPE.
    pub qk_norm: bool,
    /// An RMS norm of the attention output before it joins the residual stream.
    pub post_attn_norm: bool,
    /// An RMS norm of the feed-forward output before it joins the residual stream.
    pub post_ffn_norm: bool,
    /// The feed-forward's gate activation.
    pub activation: Activation,
    /// Attention sees only this many latest positions (a local layer); `None`: all.
    pub sliding_window: Option<usize>,
    /// Index of this layer's table in [`ArchSpec::ropes`].
    pub rope: usize,
}

/// Where the logits head's weights come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputHead {
    /// `output.weight`, or the token embedding when the file has none.
    OwnOrTied,
    /// Always the token embedding.
    Tied,
}

/// A model's forward, described.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ArchSpec {
    /// One per layer, in order.
    pub layers: Vec<LayerSpec>,
    /// The RoPE tables the layers index, one per layer kind.
    pub ropes: Vec<RopeSpec>,
    /// Embedding rows are multiplied by this (Gemma: √hidden); `None`: left as read.
    pub embedding_scale: Option<f32>,
    /// Attention scores are multiplied by this; `None`: 1/√head_dim.
    pub attention_scale: Option<f32>,
    /// Where the logits head's weights come from.
    pub output: OutputHead,
}

impl ArchSpec {
    /// The description of `cfg`'s model, read from its family's file.
    pub(crate) fn of(cfg: &ModelConfig, file: &GgufFile) -> Result<ArchSpec, RuntimeError> {
        let spec = (family(cfg.arch).spec)(cfg, file)?;
        debug_assert_eq!(spec.layers.len(), cfg.n_layers);
        debug_assert!(spec.layers.iter().all(|l| l.rope < spec.ropes.len()));
        Ok(spec)
    }

    /// Every layer alike: the Llama skeleton plus `qkv_bias`, one RoPE table from the
    /// configuration.
    pub(crate) fn uniform(cfg: &ModelConfig, qkv_bias: bool) -> ArchSpec {
        let layer = LayerSpec {
            qkv_bias,
            qk_norm: false,
            post_attn_norm: false,
            post_ffn_norm: false,
            activation: Activation::Silu,
            sliding_window: None,
            rope: 0,
        };
        ArchSpec {
            layers: vec![layer; cfg.n_layers],
            ropes: vec![RopeSpec {
                style: cfg.rope_style,
                base: cfg.rope_base,
                dims: cfg.rope_dims,
                scaled: true,
            }],
            embedding_scale: None,
            attention_scale: None,
            output: OutputHead::OwnOrTied,
        }
    }

    /// Errors if the description needs what this forward does not implement yet (today
    /// it implements every feature a description can name; a window of no positions is
    /// refused as nonsense).
    pub(crate) fn check_supported(&self) -> Result<(), RuntimeError> {
        for (i, l) in self.layers.iter().enumerate() {
            if l.sliding_window == Some(0) {
                return Err(RuntimeError::Unsupported(format!(
                    "layer {i}: a sliding window of 0 positions"
                )));
            }
        }
        Ok(())
    }
}

/// One architecture family: the GGUF names it answers to and how to describe its models.
pub(crate) struct Family {
    pub arch: Arch,
    /// `general.architecture` values this family loads.
    pub names: &'static [&'static str],
    /// How its checkpoints pair RoPE dimensions.
    pub rope_style: RopeStyle,
    pub spec: fn(&ModelConfig, &GgufFile) -> Result<ArchSpec, RuntimeError>,
}

/// Every family this runtime loads.
pub(crate) const FAMILIES: &[Family] = &[llama::FAMILY, qwen2::FAMILY, gemma3::FAMILY];

/// The family of `arch`.
pub(crate) fn family(arch: Arch) -> &'static Family {
    FAMILIES
        .iter()
        .find(|f| f.arch == arch)
        .expect("every Arch has a family")
}

/// The family whose GGUF architecture name is `name`.
pub(crate) fn by_name(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.names.contains(&name))
}

/// The GGUF names of every family, for error messages.
pub(crate) fn supported_names() -> String {
    let names: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|f| f.names.iter().copied())
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arch_has_one_family_and_names_are_distinct() {
        for arch in [Arch::Llama, Arch::Qwen2, Arch::Gemma3] {
            assert_eq!(FAMILIES.iter().filter(|f| f.arch == arch).count(), 1);
        }
        let mut names: Vec<&str> = FAMILIES.iter().flat_map(|f| f.names.to_vec()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
        assert_eq!(by_name("mistral").map(|f| f.arch), Some(Arch::Llama));
        assert_eq!(
            by_name("qwen2").map(|f| f.rope_style),
            Some(RopeStyle::NeoX)
        );
        assert_eq!(by_name("gemma3").map(|f| f.arch), Some(Arch::Gemma3));
    }

    #[test]
    fn every_feature_is_supported_but_an_empty_window() {
        let cfg = ModelConfig::without_layers("t", 4, 8);
        let mut spec = ArchSpec::uniform(&cfg, false);
        spec.layers.push(LayerSpec {
            qkv_bias: false,
            qk_norm: true,
            post_attn_norm: true,
            post_ffn_norm: true,
            activation: Activation::GeluTanh,
            sliding_window: Some(512),
            rope: 0,
        });
        spec.check_supported().unwrap();
        spec.layers[0].sliding_window = Some(0);
        assert!(spec.check_supported().is_err());
    }
}
