//! Reading a [`ModelConfig`] from GGUF metadata: the architecture's family (see
//! [`crate::arch`]) is looked up by name, then the hyper-parameters are read and checked.

use specdec_gguf::GgufFile;

use crate::config::ModelConfig;
use crate::RuntimeError;

impl ModelConfig {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, RuntimeError> {
        let arch_name = f.get_str("general.architecture")?.to_string();
        let Some(family) = crate::arch::by_name(&arch_name) else {
            return Err(RuntimeError::Unsupported(format!(
                "architecture `{arch_name}` (supported: {})",
                crate::arch::supported_names()
            )));
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let int = |k: &str| -> Result<usize, RuntimeError> { Ok(f.get_u64(&key(k))? as usize) };
        // Optional keys: absent is `None`, present with the wrong type is an error naming it.
        let opt_int = |k: &str| -> Result<Option<usize>, RuntimeError> {
            f.get(&key(k))
                .map(|v| v.as_u64().map(|x| x as usize).ok_or_else(|| bad(k)))
                .transpose()
        };
        let opt_num = |k: &str| -> Result<Option<f32>, RuntimeError> {
            f.get(&key(k))
                .map(|v| v.as_f64().map(|x| x as f32).ok_or_else(|| bad(k)))
                .transpose()
        };
        let n_layers = int("block_count")?;
        let hidden = int("embedding_length")?;
        let n_heads = int("attention.head_count")?;
        let n_kv_heads = opt_int("attention.head_count_kv")?.unwrap_or(n_heads);
        let ffn = int("feed_forward_length")?;
        let context_length = int("context_length")?;
        if n_heads == 0 || n_kv_heads == 0 || hidden % n_heads != 0 || n_heads % n_kv_heads != 0 {
            return Err(RuntimeError::Unsupported(format!(
                "head layout: hidden {hidden}, {n_heads} heads, {n_kv_heads} kv heads"
            )));
        }
        let head_dim = opt_int("attention.key_length")?.unwrap_or(hidden / n_heads);
        let rope_dims = opt_int("rope.dimension_count")?.unwrap_or(head_dim);
        if head_dim % 2 != 0 || rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(RuntimeError::Unsupported(format!(
                "head dim {head_dim} with rope dims {rope_dims}"
            )));
        }
        let vocab = match opt_int("vocab_size")? {
            Some(v) => v,
            None => f.get_array("tokenizer.ggml.tokens")?.len(),
        };
        let rope_base = opt_num("rope.freq_base")?.unwrap_or(10000.0);
        let rms_eps = opt_num("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5);
        if let Some(t) = f.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
            if t != "none" {
                return Err(RuntimeError::Unsupported(format!("RoPE scaling `{t}`")));
            }
        }
        let name = f
            .get("general.name")
            .and_then(|v| v.as_str())
            .unwrap_or(&arch_name)
            .to_string();
        Ok(ModelConfig {
            arch: family.arch,
            name,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn,
            vocab,
            context_length,
            rope_base,
            rope_dims,
            rope_style: family.rope_style,
            rms_eps,
        })
    }
}

fn bad(key: &str) -> RuntimeError {
    RuntimeError::Unsupported(format!("metadata `{key}` has an unexpected type"))
}
