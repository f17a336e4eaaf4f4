//! Row-wise steps of the forward, each row computed alone (batch-invariant): norms,
//! projections, the feed-forward's activation, residual adds.

use specdec_kernels::{PackedMatrix, QuantizedRows};

use super::{Model, Phase};
use crate::arch::Activation;
use crate::{ops, RuntimeError};

/// One row's gated activation: `(gate, up, out)`.
type GatedFn<'a> = dyn Fn(&[f32], &[f32], &mut [f32]) + Sync + 'a;

impl Model {
    /// The gated activation of every row: `act(gate) * up`, each row's `gate_up` holding
    /// gate then up.
    pub(super) fn gated_rows(
        &self,
        activation: Activation,
        gate_up: &[f32],
        act: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let ops = self.exec.vec_ops();
        match activation {
            Activation::Silu => self.gated_rows_with(gate_up, act, &|g, u, o| ops.swiglu(g, u, o)),
            Activation::GeluTanh => {
                self.gated_rows_with(gate_up, act, &|g, u, o| ops.geglu(g, u, o))
            }
        }
    }

    /// `x += y` row by row, `y` first RMS-normed with `norm` if the layer has one
    /// (`scratch` holds the normed rows).
    pub(super) fn add_residual(
        &self,
        x: &mut [f32],
        y: &[f32],
        norm: Option<&[f32]>,
        scratch: &mut [f32],
    ) {
        let y = match norm {
            Some(w) => {
                self.norm_rows(y, w, scratch);
                &*scratch
            }
            None => y,
        };
        x.iter_mut().zip(y).for_each(|(x, p)| *x += p);
    }

    /// `gated(gate, up, out)` of every row, rows spread over the kernel threads (a few
    /// rows are not worth a dispatch); each row is computed alone, so alike whatever the
    /// batch or thread count.
    fn gated_rows_with(
        &self,
        gate_up: &[f32],
        act: &mut [f32],
        gated: &GatedFn<'_>,
    ) -> Result<(), RuntimeError> {
        let f = self.config.ffn;
        let row = |r: usize, out: &mut [f32]| {
            let gu = &gate_up[r * 2 * f..(r + 1) * 2 * f];
            gated(&gu[..f], &gu[f..], out);
        };
        let n = act.len() / f;
        if n < 4 {
            act.chunks_exact_mut(f)
                .enumerate()
                .for_each(|(r, out)| row(r, out));
            return Ok(());
        }
        let outs: Vec<std::sync::Mutex<&mut [f32]>> =
            act.chunks_exact_mut(f).map(std::sync::Mutex::new).collect();
        self.exec.for_each(n, &|r| {
            let mut out = outs[r].lock().unwrap_or_else(|e| e.into_inner());
            row(r, &mut out);
        })?;
        Ok(())
    }

    pub(super) fn norm_rows(&self, x: &[f32], w: &[f32], out: &mut [f32]) {
        let h = self.config.hidden;
        for (xr, or) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
            ops::rms_norm(xr, w, self.config.rms_eps, or);
        }
    }

    /// `out = x · wᵀ` over `rows` rows, timed as `phase` (its activations' quantization as
    /// [`Phase::Quantize`]).
    pub(super) fn matmul(
        &self,
        phase: Phase,
        w: &PackedMatrix,
        x: &[f32],
        rows: usize,
        q: &mut QuantizedRows,
        out: &mut [f32],
    ) -> Result<(), RuntimeError> {
        self.quantize(q, &x[..rows * w.k()], rows, w.k());
        let t = self.profiler.start();
        self.exec.matmul(w, q, &mut out[..rows * w.n()])?;
        self.profiler.add(phase, t);
        Ok(())
    }

    /// `rows` rows of `k` activations of `x` into `q` on the pool's threads, timed as
    /// [`Phase::Quantize`]: every matrix's input, the head's in every form included.
    pub(super) fn quantize(&self, q: &mut QuantizedRows, x: &[f32], rows: usize, k: usize) {
        let t = self.profiler.start();
        q.quantize_on(&self.exec, x, rows, k);
        self.profiler.add(Phase::Quantize, t);
    }
}

/// RMS-norms every head (`w.len()` wide) of `x` in place with the weights `w`.
pub(super) fn norm_heads(x: &mut [f32], w: &[f32], eps: f32, tmp: &mut Vec<f32>) {
    tmp.resize(w.len(), 0.0);
    for head in x.chunks_exact_mut(w.len()) {
        ops::rms_norm(head, w, eps, tmp);
        head.copy_from_slice(tmp);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn norm_heads_norms_each_head_alone() {
        let w = [1.0, 2.0];
        let mut x = vec![3.0, 4.0, 0.5, -0.5];
        super::norm_heads(&mut x, &w, 0.0, &mut Vec::new());
        // Head 0: rms 5/√2; head 1: rms 0.5.
        let r = 12.5f32.sqrt();
        let want = [3.0 / r, 2.0 * 4.0 / r, 1.0, -2.0];
        for (got, want) in x.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{x:?}");
        }
    }
}
