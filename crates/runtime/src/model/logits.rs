//! The logits head: final norm and output projection of the requested rows only.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use specdec_kernels::QuantizedRows;

use super::{Logits, Model, Phase, SeqInput, Want};
use crate::batch::{keep_columns, split_logits, Batch};
use crate::{ops, RuntimeError};

/// Up to this many bytes of rows, argmax-only forwards compute whole rows (one pass, no
/// per-block dispatch) and keep them; past it they stream the head in blocks.
const ARGMAX_WHOLE_BYTES: usize = 4 << 20;

/// Tiles of the head per block of a streamed argmax: 8,192 columns, 32 KiB per row, so a
/// block of 64 rows stays in L2 while it is reduced.
const ARGMAX_BLOCK_TILES: usize = 256;

impl Model {
    /// The requested rows' logits: the final norm, then the output matrix over just those
    /// rows (over just the asked columns' tiles for a `Want::LastColumns` row), split per
    /// input; when every input wants argmaxes only and whole rows would be large, the head
    /// streamed in blocks instead.
    pub(super) fn logits_rows(
        &self,
        inputs: &[SeqInput<'_>],
        input_rows: &[Range<usize>],
        x: &[f32],
        qrows: &mut QuantizedRows,
    ) -> Result<Vec<Logits>, RuntimeError> {
        let wanted = Batch::wanted(inputs);
        let rows: usize = wanted.iter().map(|r| r.len()).sum();
        let streamed = rows * self.config.vocab * 4 > ARGMAX_WHOLE_BYTES;
        if streamed && inputs.iter().all(|i| matches!(i.want, Want::Argmax)) {
            return self.argmax_rows(wanted, input_rows, x, qrows);
        }
        // Argmax inputs keep their whole rows: `Logits::argmax` reads the ones asked for.
        self.row_logits(inputs, wanted, input_rows, x, qrows)
    }

    /// The final norm of every requested row (`wanted`: per input, its nodes), in order.
    fn normed_rows(
        &self,
        wanted: &[Range<usize>],
        input_rows: &[Range<usize>],
        x: &[f32],
    ) -> Vec<f32> {
        let h = self.config.hidden;
        let mut normed = Vec::new();
        for (rows, nodes) in input_rows.iter().zip(wanted) {
            for node in nodes.clone() {
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
        normed
    }

    /// Every input's nodes' argmaxes: the head over all rows one block of tiles at a time,
    /// each block reduced into the running best before the next (columns in order, so the
    /// lowest index wins ties as over a whole row; the same bits as a full matmul).
    fn argmax_rows(
        &self,
        wanted: Vec<Range<usize>>,
        input_rows: &[Range<usize>],
        x: &[f32],
        qrows: &mut QuantizedRows,
    ) -> Result<Vec<Logits>, RuntimeError> {
        let (h, vocab) = (self.config.hidden, self.config.vocab);
        let normed = self.normed_rows(&wanted, input_rows, x);
        let rows = normed.len() / h;
        let best: Vec<Mutex<(u32, f32)>> = (0..rows).map(|_| Mutex::new((0, f32::NAN))).collect();
        if rows > 0 {
            let head = &self.weights.head;
            self.quantize(qrows, &normed, rows, h);
            let mut out = Vec::new();
            let mut t0 = 0;
            while t0 < head.n_tiles() {
                let t1 = (t0 + ARGMAX_BLOCK_TILES).min(head.n_tiles());
                let c0 = t0 * 32;
                let width = (t1 * 32).min(vocab) - c0;
                out.resize(rows * width, 0.0);
                let t = self.profiler.start();
                self.exec.matmul_block(head, qrows, t0..t1, &mut out)?;
                self.profiler.add(Phase::Head, t);
                // Rows on the pool's threads; each row's columns in order.
                self.exec.for_each(rows, &|r| {
                    let mut b = best[r].lock().expect("no holder panics");
                    for (c, &v) in out[r * width..(r + 1) * width].iter().enumerate() {
                        // Column 0 opens the scan, as a whole row's argmax starts there.
                        if (c0 == 0 && c == 0) || v > b.1 {
                            *b = ((c0 + c) as u32, v);
                        }
                    }
                })?;
                t0 = t1;
            }
        }
        let ids: Vec<u32> = best
            .into_iter()
            .map(|b| b.into_inner().expect("no holder panics").0)
            .collect();
        let ids = Arc::new(ids);
        let mut first = 0;
        Ok(wanted
            .into_iter()
            .map(|nodes| {
                let l = Logits {
                    vocab,
                    first,
                    data: Arc::new(Vec::new()),
                    argmax: Some(Arc::clone(&ids)),
                    nodes,
                };
                first += l.nodes.len();
                l
            })
            .collect())
    }

    /// Whole rows of every requested node: all but large argmax-only forwards.
    fn row_logits(
        &self,
        inputs: &[SeqInput<'_>],
        wanted: Vec<Range<usize>>,
        input_rows: &[Range<usize>],
        x: &[f32],
        qrows: &mut QuantizedRows,
    ) -> Result<Vec<Logits>, RuntimeError> {
        let (h, vocab) = (self.config.hidden, self.config.vocab);
        let normed = self.normed_rows(&wanted, input_rows, x);
        // Per picked row, the columns it keeps (`None`: all).
        let columns: Vec<Option<&[u32]>> = wanted
            .iter()
            .zip(inputs)
            .flat_map(|(nodes, input)| nodes.clone().map(|_| input.want.columns()))
            .collect();
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
                self.matmul(Phase::Head, head, &normed, picked, qrows, &mut all)?;
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
            self.matmul(Phase::Head, head, &xs, full.len(), qrows, &mut out)?;
            for (i, &r) in full.iter().enumerate() {
                all[r * vocab..(r + 1) * vocab].copy_from_slice(&out[i * vocab..(i + 1) * vocab]);
            }
        }
        for (r, cols) in columns.iter().enumerate() {
            let Some(cols) = cols else { continue };
            let row = &mut all[r * vocab..(r + 1) * vocab];
            self.quantize(qrows, &normed[r * h..(r + 1) * h], 1, h);
            let t = self.profiler.start();
            self.exec.matmul_columns(head, qrows, cols, row)?;
            self.profiler.add(Phase::Head, t);
            keep_columns(row, cols);
        }
        Ok(split_logits(wanted, all, vocab))
    }
}
