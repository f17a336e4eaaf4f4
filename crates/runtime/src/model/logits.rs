//! The logits head: final norm and output projection of the requested rows only.

use std::ops::Range;

use specdec_kernels::QuantizedRows;

use super::{Logits, Model, SeqInput};
use crate::batch::{split_logits, Batch};
use crate::{ops, RuntimeError};

impl Model {
    /// The requested rows' logits: the final norm, then the output matrix over just those
    /// rows, split per input.
    pub(super) fn logits_rows(
        &self,
        inputs: &[SeqInput<'_>],
        input_rows: &[Range<usize>],
        x: &[f32],
        qrows: &mut QuantizedRows,
    ) -> Result<Vec<Logits>, RuntimeError> {
        let (h, vocab) = (self.config.hidden, self.config.vocab);
        let wanted = Batch::wanted(inputs);
        let mut normed = Vec::new();
        for (rows, nodes) in input_rows.iter().zip(&wanted) {
            for node in nodes.clone() {
                // `Want` only names nodes of the input, so the row exists.
                let r = rows.start + node;
                normed.resize(normed.len() + h, 0.0);
                let len = normed.len();
                ops::rms_norm(
                    &x[r * h..(r + 1) * h],
                    &self.weights.out_norm,
                    self.config.rms_eps,
                    &mut normed[len - h..],
                );
            }
        }
        let picked = normed.len() / h;
        let mut all = vec![0f32; picked * vocab];
        if picked > 0 {
            self.matmul(&self.weights.head, &normed, picked, qrows, &mut all)?;
        }
        Ok(split_logits(wanted, all, vocab))
    }
}
