//! Tensor names of GGUF's llama-family layout, shared by everything that reads or writes
//! them (the runtime's loader, the self-draft writer, the trainer's export), so a file one
//! writes is a file the other reads.

/// The token embedding matrix (one row per vocabulary entry).
pub const TOKEN_EMBD: &str = "token_embd.weight";
/// The final norm's weight, applied before the output projection.
pub const OUTPUT_NORM: &str = "output_norm.weight";
/// The output projection to logits; absent when tied to [`TOKEN_EMBD`].
pub const OUTPUT: &str = "output.weight";
/// Per-dimension RoPE frequency factors, for models that scale them (Llama 3.1 style).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// Norm before attention. This and the names below are per-block tensors: [`block`] names
/// them for block `i`.
pub const ATTN_NORM: &str = "attn_norm.weight";
/// Attention query projection.
pub const ATTN_Q: &str = "attn_q.weight";
/// Attention key projection.
pub const ATTN_K: &str = "attn_k.weight";
/// Attention value projection.
pub const ATTN_V: &str = "attn_v.weight";
/// Query projection bias (Qwen2).
pub const ATTN_Q_BIAS: &str = "attn_q.bias";
/// Key projection bias (Qwen2).
pub const ATTN_K_BIAS: &str = "attn_k.bias";
/// Value projection bias (Qwen2).
pub const ATTN_V_BIAS: &str = "attn_v.bias";
/// Per-head RMS norm of the queries (Gemma 3).
pub const ATTN_Q_NORM: &str = "attn_q_norm.weight";
/// Per-head RMS norm of the keys (Gemma 3).
pub const ATTN_K_NORM: &str = "attn_k_norm.weight";
/// Attention output projection.
pub const ATTN_OUTPUT: &str = "attn_output.weight";
/// Norm of the attention output before the residual add (Gemma 3).
pub const POST_ATTN_NORM: &str = "post_attention_norm.weight";
/// Norm before the feed-forward block.
pub const FFN_NORM: &str = "ffn_norm.weight";
/// Feed-forward gate projection (SwiGLU).
pub const FFN_GATE: &str = "ffn_gate.weight";
/// Feed-forward up projection.
pub const FFN_UP: &str = "ffn_up.weight";
/// Feed-forward down projection.
pub const FFN_DOWN: &str = "ffn_down.weight";
/// Norm of the feed-forward output before the residual add (Gemma 3).
pub const POST_FFN_NORM: &str = "post_ffw_norm.weight";

/// Block `i`'s tensor `part` (`blk.i.part`).
pub fn block(i: usize, part: &str) -> String {
    format!("blk.{i}.{part}")
}

/// `i` of a tensor named `blk.i.*`.
pub fn block_index(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_names_round_trip() {
        assert_eq!(block(3, FFN_UP), "blk.3.ffn_up.weight");
        assert_eq!(block_index(&block(12, ATTN_Q)), Some(12));
        assert_eq!(block_index(TOKEN_EMBD), None);
        assert_eq!(block_index("blk.x.attn_q.weight"), None);
    }
}
