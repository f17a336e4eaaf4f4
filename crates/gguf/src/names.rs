//! Tensor names of GGUF's llama-family layout, shared by everything that reads or writes
//! them (the runtime's loader, the self-draft writer, the trainer's export), so a file one
//! writes is a file the other reads.

pub const TOKEN_EMBD: &str = "token_embd.weight";
pub const OUTPUT_NORM: &str = "output_norm.weight";
pub const OUTPUT: &str = "output.weight";
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// Per-block tensors: [`block`] names them for block `i`.
pub const ATTN_NORM: &str = "attn_norm.weight";
pub const ATTN_Q: &str = "attn_q.weight";
pub const ATTN_K: &str = "attn_k.weight";
pub const ATTN_V: &str = "attn_v.weight";
pub const ATTN_Q_BIAS: &str = "attn_q.bias";
pub const ATTN_K_BIAS: &str = "attn_k.bias";
pub const ATTN_V_BIAS: &str = "attn_v.bias";
pub const ATTN_Q_NORM: &str = "attn_q_norm.weight";
pub const ATTN_K_NORM: &str = "attn_k_norm.weight";
pub const ATTN_OUTPUT: &str = "attn_output.weight";
pub const POST_ATTN_NORM: &str = "post_attention_norm.weight";
pub const FFN_NORM: &str = "ffn_norm.weight";
pub const FFN_GATE: &str = "ffn_gate.weight";
pub const FFN_UP: &str = "ffn_up.weight";
pub const FFN_DOWN: &str = "ffn_down.weight";
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
