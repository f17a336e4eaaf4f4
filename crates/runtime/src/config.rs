//! Model hyper-parameters (read from GGUF metadata in `metadata.rs`).

/// The architectures whose forward this runtime implements (each described by its file
/// in `arch/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `llama`: SmolLM2, Llama 2/3, Mistral.
    Llama,
    /// `qwen2`: Llama layout plus q/k/v biases and NeoX-style RoPE.
    Qwen2,
    /// `gemma3`: Gemma 3 (q/k norms, post-norms, GeGLU, sliding-window local layers).
    Gemma3,
}

/// How RoPE pairs dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1): GGUF llama checkpoints are permuted for this.
    Interleaved,
    /// Halves (i, i + d/2).
    NeoX,
}

/// A model's hyper-parameters: what sizes its weights, caches and forward.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The architecture family, from `general.architecture`.
    pub arch: Arch,
    /// The model's name (`general.name`, else the architecture's).
    pub name: String,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Width of the residual stream (embedding length).
    pub hidden: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (fewer than `n_heads` with grouped-query attention).
    pub n_kv_heads: usize,
    /// Width of one attention head.
    pub head_dim: usize,
    /// Width of the feed-forward's hidden layer.
    pub ffn: usize,
    /// Vocabulary size: rows of the embedding, width of the logits.
    pub vocab: usize,
    /// The longest sequence the model was trained for; sequences are capped at it.
    pub context_length: usize,
    /// RoPE frequency base (of the global layers, for models with local ones).
    pub rope_base: f32,
    /// Leading dimensions of each head that RoPE rotates.
    pub rope_dims: usize,
    /// How RoPE pairs dimensions, fixed by the architecture.
    pub rope_style: RopeStyle,
    /// Epsilon of the RMS norms.
    pub rms_eps: f32,
}

impl ModelConfig {
    /// A configuration with a vocabulary and a context but no transformer layers, for
    /// stand-in targets such as [`crate::FakeTarget`]: its sequences hold no keys or
    /// values. The layer fields are zero (one head of size zero) and the architecture
    /// fields take Llama's conventions; nothing reads them without layers.
    pub fn without_layers(name: impl Into<String>, vocab: usize, context_length: usize) -> Self {
        ModelConfig {
            arch: Arch::Llama,
            name: name.into(),
            n_layers: 0,
            hidden: 0,
            n_heads: 1,
            n_kv_heads: 1,
            head_dim: 0,
            ffn: 0,
            vocab,
            context_length,
            rope_base: 10000.0,
            rope_dims: 0,
            rope_style: RopeStyle::Interleaved,
            rms_eps: 1e-5,
        }
    }

    /// Width of the concatenated query heads.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of the concatenated key (or value) heads: one position's cache per layer.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
