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

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub arch: Arch,
    pub name: String,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub context_length: usize,
    pub rope_base: f32,
    pub rope_dims: usize,
    pub rope_style: RopeStyle,
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

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
