//! What a forward must do at the least, counted from the loaded weights: the bytes it
//! reads and the multiply-adds it computes. A roofline divides these by the machine's
//! ceilings to get the time no forward of that shape can beat.

use specdec_kernels::WeightFormat;

use super::{Model, Phase};

/// The work of one forward of `rows` nodes, each with logits, after `prefix` cached
/// positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardWork {
    /// Weights (every packed matrix, the head included, and the norm vectors), read once
    /// per forward however many rows share it, plus the cached keys and values each
    /// layer attends to.
    pub bytes: u64,
    /// int8 multiply-adds of the matrices: every row through every matrix.
    pub int8_macs: u64,
    /// `int8_macs` split by the matrices' weight format (indexed by `WeightFormat::index`).
    pub int8_macs_by_format: [u64; WeightFormat::ALL.len()],
    /// f32 multiply-adds of attention: per row, per head, q·k and p·v over the positions
    /// it sees (its prefix, within a sliding window where the layer has one).
    pub f32_macs: u64,
}

impl Model {
    /// The least the matrix phase `phase` (q/k/v, o, gate/up, down or the head) must read
    /// and compute in a forward of `rows` rows: its matrices read once, every row through
    /// them. `None` for the other phases.
    pub fn matrix_work(&self, phase: Phase, rows: usize) -> Option<ForwardWork> {
        let w = &self.weights;
        let matrices: Vec<&specdec_kernels::PackedMatrix> = match phase {
            Phase::Qkv => w.layers.iter().map(|l| &l.qkv).collect(),
            Phase::AttnOut => w.layers.iter().map(|l| &l.o).collect(),
            Phase::GateUp => w.layers.iter().map(|l| &l.gate_up).collect(),
            Phase::Down => w.layers.iter().map(|l| &l.down).collect(),
            Phase::Head => vec![&w.head],
            _ => return None,
        };
        let mut by_format = [0u64; WeightFormat::ALL.len()];
        for m in &matrices {
            for (format, cols) in m.formats() {
                by_format[format.index()] += (cols * m.k() * rows) as u64;
            }
        }
        Some(ForwardWork {
            bytes: matrices.iter().map(|m| m.packed_bytes() as u64).sum(),
            int8_macs: by_format.iter().sum(),
            int8_macs_by_format: by_format,
            f32_macs: 0,
        })
    }

    /// The least a forward of `rows` nodes (all with logits) after `prefix` cached
    /// positions must read and compute.
    pub fn forward_work(&self, prefix: usize, rows: usize) -> ForwardWork {
        let cfg = &self.config;
        let w = &self.weights;
        // Every matrix, the head included: the matrix phases' work added up.
        let mut bytes = 0u64;
        let mut by_format = [0u64; WeightFormat::ALL.len()];
        for m in Phase::ALL.iter().filter_map(|&p| self.matrix_work(p, rows)) {
            bytes += m.bytes;
            by_format
                .iter_mut()
                .zip(m.int8_macs_by_format)
                .for_each(|(a, b)| *a += b);
        }
        let vectors: usize = w
            .layers
            .iter()
            .map(|l| {
                l.attn_norm.len()
                    + l.ffn_norm.len()
                    + l.qkv_bias.as_ref().map_or(0, Vec::len)
                    + l.qk_norm.as_ref().map_or(0, |(q, k)| q.len() + k.len())
                    + l.post_attn_norm.as_ref().map_or(0, Vec::len)
                    + l.post_ffn_norm.as_ref().map_or(0, Vec::len)
            })
            .sum::<usize>()
            + w.out_norm.len();
        bytes += 4 * vectors as u64;
        let mut f32_macs = 0u64;
        for ls in &self.spec.layers {
            let seen = ls.sliding_window.map_or(prefix, |win| prefix.min(win));
            // Keys and values, f32, of every KV head.
            bytes += (2 * 4 * seen * cfg.kv_dim()) as u64;
            // The rows also see each other (at most their own count): a lower bound
            // counts the prefix only.
            f32_macs += (rows * 2 * seen * cfg.n_heads * cfg.head_dim) as u64;
        }
        ForwardWork {
            bytes,
            int8_macs: by_format.iter().sum(),
            int8_macs_by_format: by_format,
            f32_macs,
        }
    }
}
