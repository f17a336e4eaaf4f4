//! The logits head: final norm and output projection of the requested rows only.

use std::ops::Range;

use specdec_kernels::QuantizedRows;

use super::{Logits, Model, SeqInput};
use crate::batch::{keep_columns, split_logits, Batch};
use crate::{ops, RuntimeError};

impl Model {
    /// The requested rows' logits: the final norm, then the output matrix over just those
    /// rows (over just the asked columns' tiles for a `Want::LastColumns` row), split per
    /// input.
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
        // Per picked row, the columns it keeps (`None`: all).
        let mut columns = Vec::new();
        for ((rows, nodes), input) in input_rows.iter().zip(&wanted).zip(inputs) {
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
                columns.push(input.want.columns());
            }
        }
        let picked = columns.len();
        let mut all = vec![0f32; picked * vocab];
        // Column-restricted rows read their tiles once per row; a full matmul reads the
        // matrix once for all rows. Past about two passes' worth of tiles the full rows,
        // masked, are cheaper (many rows asking for many columns). The same bits either way.
        let head = &self.weights.head;
        let sparse_tiles: usize = columns.iter().flatten().map(|c| head.tiles_of(c)).sum();
        let sparse = sparse_tiles <= 2 * head.n_tiles();
        if !sparse || columns.iter().all(Option::is_none) {
            if picked > 0 {
                self.matmul(head, &normed, picked, qrows, &mut all)?;
            }
            for (row, cols) in all.chunks_exact_mut(vocab).zip(&columns) {
                if let Some(cols) = cols {
                    keep_columns(row, cols);
                }
            }
            return Ok(split_logits(wanted, all, vocab));
        }
        // The full rows in one matmul, then each column-restricted row alone (rows are
        // computed alike whatever the batch, so both give a full head's bits).
        let full: Vec<usize> = (0..picked).filter(|&r| columns[r].is_none()).collect();
        if !full.is_empty() {
            let xs: Vec<f32> = full
                .iter()
                .flat_map(|&r| &normed[r * h..(r + 1) * h])
                .copied()
                .collect();
            let mut out = vec![0f32; full.len() * vocab];
            self.matmul(head, &xs, full.len(), qrows, &mut out)?;
            for (i, &r) in full.iter().enumerate() {
                all[r * vocab..(r + 1) * vocab].copy_from_slice(&out[i * vocab..(i + 1) * vocab]);
            }
        }
        for (r, cols) in columns.iter().enumerate() {
            let Some(cols) = cols else { continue };
            let row = &mut all[r * vocab..(r + 1) * vocab];
            qrows.quantize_on(&self.exec, &normed[r * h..(r + 1) * h], 1, h);
            self.exec.matmul_columns(head, qrows, cols, row)?;
            keep_columns(row, cols);
        }
        Ok(split_logits(wanted, all, vocab))
    }
}
