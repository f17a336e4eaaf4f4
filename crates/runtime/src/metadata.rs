//! Reading a [`ModelConfig`] from GGUF metadata: the architecture's family (see
//! [`crate::arch`]) is looked up by name, then the hyper-parameters are read and checked.

use specdec_gguf::GgufFile;

use crate::config::ModelConfig;
use crate::RuntimeError;

impl ModelConfig {
    /// Reads and checks the hyper-parameters under `<general.architecture>.*`: an
    /// unsupported architecture, head layout or RoPE scaling, or a size out of bounds, is
    /// an error naming its key.
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
        // Every size is bounded before anything is allocated from it: a corrupt count must be
        // an error naming its key, not a terabyte allocation or an empty model.
        let sized = |k: &str, v: usize| in_bounds(&key(k), v);
        let n_layers = sized("block_count", int("block_count")?)?;
        let hidden = sized("embedding_length", int("embedding_length")?)?;
        let n_heads = sized("attention.head_count", int("attention.head_count")?)?;
        let n_kv_heads = match opt_int("attention.head_count_kv")? {
            Some(v) => sized("attention.head_count_kv", v)?,
            None => n_heads,
        };
        let ffn = sized("feed_forward_length", int("feed_forward_length")?)?;
        let context_length = sized("context_length", int("context_length")?)?;
        if n_heads == 0 || n_kv_heads == 0 || hidden % n_heads != 0 || n_heads % n_kv_heads != 0 {
            return Err(RuntimeError::Unsupported(format!(
                "head layout: hidden {hidden}, {n_heads} heads, {n_kv_heads} kv heads"
            )));
        }
        let head_dim = match opt_int("attention.key_length")? {
            Some(v) => sized("attention.key_length", v)?,
            None => hidden / n_heads,
        };
        let rope_dims = match opt_int("rope.dimension_count")? {
            Some(v) => sized("rope.dimension_count", v)?,
            None => head_dim,
        };
        if head_dim % 2 != 0 || rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(RuntimeError::Unsupported(format!(
                "head dim {head_dim} with rope dims {rope_dims}"
            )));
        }
        let vocab = match opt_int("vocab_size")? {
            Some(v) => sized("vocab_size", v)?,
            None => in_bounds(
                "tokenizer.ggml.tokens",
                f.get_array("tokenizer.ggml.tokens")?.len(),
            )?,
        };
        let rope_base = opt_num("rope.freq_base")?.unwrap_or(10000.0);
        if !(rope_base.is_finite() && rope_base > 0.0) {
            return Err(RuntimeError::Unsupported(format!(
                "metadata `{}` is {rope_base}, expected a finite number > 0",
                key("rope.freq_base")
            )));
        }
        let rms_eps = opt_num("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5);
        if !(rms_eps.is_finite() && rms_eps > 0.0 && rms_eps <= MAX_EPS) {
            return Err(RuntimeError::Unsupported(format!(
                "metadata `{}` is {rms_eps}, expected a finite number in (0, {MAX_EPS}]",
                key("attention.layer_norm_rms_epsilon")
            )));
        }
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

/// The largest RMS-norm epsilon accepted; real models use 1e-6 to 1e-5.
const MAX_EPS: f32 = 1e-2;

/// Upper bounds on model sizes: generous for any small or medium model (a 70B Llama has
/// 80 layers, hidden 8192, ffn 28672, 64 heads of 128; vocabularies reach ~256k).
fn upper_bound(key: &str) -> usize {
    let k = key.rsplit_once('.').map_or(key, |(_, k)| k);
    match k {
        "block_count" => 1 << 10,
        "embedding_length" => 1 << 16,
        "head_count" | "head_count_kv" => 1 << 10,
        "key_length" | "dimension_count" => 1 << 12,
        "feed_forward_length" => 1 << 18,
        "vocab_size" | "tokens" => 1 << 21,
        "context_length" => 1 << 21,
        _ => usize::MAX,
    }
}

/// `v` if it lies in `1..=upper_bound(key)`, else an error naming the key and the bound.
fn in_bounds(key: &str, v: usize) -> Result<usize, RuntimeError> {
    let max = upper_bound(key);
    if v == 0 || v > max {
        return Err(RuntimeError::Unsupported(format!(
            "metadata `{key}` is {v}, expected 1 to {max}"
        )));
    }
    Ok(v)
}

fn bad(key: &str) -> RuntimeError {
    RuntimeError::Unsupported(format!("metadata `{key}` has an unexpected type"))
}
