//! The training objectives (docs/methods/atspeed.md): loss = (1 - alpha) * CE(ground truth)
//! + alpha * L_align, with L_align one of KD, AtSpeed-S or AtSpeed-R.
//!
//! Alignment losses compare, at each scored position, the draft's distribution q and the
//! target's p over the tokens the catalogue trie allows there, both renormalised over that
//! set: constrained beam search only ever chooses among them. Positions are padded to the
//! widest set; `mask` is 1 on real entries, 0 on padding. Every loss is a mean over
//! positions.

use candle_core::{Tensor, D};

use crate::TrainError;

/// What the padding's logits become before the softmax: finite, so 0 * it stays 0.
const PAD_LOGIT: f64 = -1e9;

/// The alignment objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Objective {
    /// Ground-truth cross-entropy only (alpha ignored): the baseline.
    Ce,
    /// Forward KL(p || q) along the teacher's beams.
    Kd,
    /// Reverse KL(q || p) over the draft's top-k tokens plus p_k * H(q_topk).
    AtSpeedS {
        /// How many of the draft's most likely tokens the reverse KL covers.
        k: usize,
    },
    /// Total variation distance 1/2 sum |q - p|.
    AtSpeedR,
}

impl Objective {
    /// The objective's name on the command line and in reports (`ce`, `kd`, `atspeed-s`,
    /// `atspeed-r`).
    pub fn name(&self) -> &'static str {
        match self {
            Objective::Ce => "ce",
            Objective::Kd => "kd",
            Objective::AtSpeedS { .. } => "atspeed-s",
            Objective::AtSpeedR => "atspeed-r",
        }
    }
}

/// The draft's log q over the allowed entries: `logits` (`[P, M]`, gathered at the allowed
/// tokens) log-softmaxed with the padding excluded.
pub fn masked_log_softmax(logits: &Tensor, mask: &Tensor) -> Result<Tensor, TrainError> {
    let pad = ((mask - 1.0)? * -PAD_LOGIT)?;
    let shifted = (logits.broadcast_mul(mask)? + pad)?;
    Ok(candle_nn::ops::log_softmax(&shifted, D::Minus1)?)
}

fn mean_rows(x: &Tensor) -> Result<Tensor, TrainError> {
    Ok(x.sum(D::Minus1)?.mean_all()?)
}

/// KL(p || q): sum p (log p - log q). `log_p` is 0 on padding (where p is 0).
pub fn kd(log_q: &Tensor, log_p: &Tensor, mask: &Tensor) -> Result<Tensor, TrainError> {
    let p = (log_p.exp()? * mask)?;
    mean_rows(&(p * (log_p - log_q)?)?)
}

/// Total variation distance 1/2 sum |q - p|.
pub fn tvd(log_q: &Tensor, log_p: &Tensor, mask: &Tensor) -> Result<Tensor, TrainError> {
    let diff = ((log_q.exp()? - log_p.exp()?)? * mask)?.abs()?;
    Ok((mean_rows(&diff)? * 0.5)?)
}

/// AtSpeed-S: sum over the draft's top-k tokens of q (log q - log p), plus p_k * H(q_topk)
/// with H(q_topk) = -sum over the top-k of q log q (q not renormalised over the top-k) and
/// p_k the target probability of the draft's k-th most likely token (a constant: which
/// token is k-th is a discrete choice). A position with fewer than k allowed tokens uses
/// all of them and its last.
pub fn atspeed_s(
    log_q: &Tensor,
    log_p: &Tensor,
    mask: &Tensor,
    k: usize,
) -> Result<Tensor, TrainError> {
    let (rows, width) = log_q.dims2()?;
    let lq = log_q.to_vec2::<f32>()?;
    let lp = log_p.to_vec2::<f32>()?;
    let m = mask.to_vec2::<f32>()?;
    let mut top = vec![0f32; rows * width];
    let mut p_k = vec![0f32; rows];
    for r in 0..rows {
        let mut order: Vec<usize> = (0..width).filter(|&i| m[r][i] > 0.0).collect();
        // Ties go to the earlier entry (lower token id): deterministic.
        order.sort_by(|&a, &b| lq[r][b].total_cmp(&lq[r][a]).then(a.cmp(&b)));
        order.truncate(k.max(1));
        for &i in &order {
            top[r * width + i] = 1.0;
        }
        if let Some(&last) = order.last() {
            p_k[r] = lp[r][last].exp();
        }
    }
    let top = Tensor::from_vec(top, (rows, width), log_q.device())?;
    let p_k = Tensor::from_vec(p_k, (rows, 1), log_q.device())?;
    let q_top = (log_q.exp()? * &top)?;
    let rkl = (&q_top * (log_q - log_p)?)?;
    let entropy = (&q_top * log_q)?.neg()?;
    mean_rows(&(rkl + entropy.broadcast_mul(&p_k)?)?)
}

/// Cross-entropy of `targets` (`[P]`, u32, column indices) under the log-probabilities
/// `log_q` (`[P, width]`): the ground truth under the draft's catalogue-constrained
/// distribution, which is what its beam search samples and ranks by.
pub fn cross_entropy(log_q: &Tensor, targets: &Tensor) -> Result<Tensor, TrainError> {
    let picked = log_q.gather(&targets.unsqueeze(1)?, 1)?;
    Ok(picked.neg()?.mean_all()?)
}

/// The alignment loss of `objective` (zero for CE).
pub fn align(
    objective: Objective,
    log_q: &Tensor,
    log_p: &Tensor,
    mask: &Tensor,
) -> Result<Tensor, TrainError> {
    match objective {
        Objective::Ce => Ok(Tensor::zeros((), log_q.dtype(), log_q.device())?),
        Objective::Kd => kd(log_q, log_p, mask),
        Objective::AtSpeedS { k } => atspeed_s(log_q, log_p, mask, k),
        Objective::AtSpeedR => tvd(log_q, log_p, mask),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(v: &[f32], rows: usize) -> Tensor {
        Tensor::from_slice(v, (rows, v.len() / rows), &Device::Cpu).unwrap()
    }

    fn scalar(x: Tensor) -> f64 {
        x.to_scalar::<f32>().unwrap() as f64
    }

    /// One position, two allowed tokens plus a pad: q = (1/4, 3/4) from logits (0, ln 3).
    fn q_and_mask() -> (Tensor, Tensor) {
        let logits = t(&[0.0, 3f32.ln(), 5.0], 1);
        let mask = t(&[1.0, 1.0, 0.0], 1);
        (masked_log_softmax(&logits, &mask).unwrap(), mask)
    }

    fn log_p(p: [f32; 2]) -> Tensor {
        t(&[p[0].ln(), p[1].ln(), 0.0], 1)
    }

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-5, "got {got}, want {want}");
    }

    #[test]
    fn masked_softmax_ignores_padding() {
        let (lq, _) = q_and_mask();
        let q: Vec<f32> = lq.exp().unwrap().flatten_all().unwrap().to_vec1().unwrap();
        close(q[0] as f64, 0.25);
        close(q[1] as f64, 0.75);
        assert_eq!(q[2], 0.0);
    }

    #[test]
    fn kd_is_forward_kl() {
        let (lq, m) = q_and_mask();
        // 1/2 ln(1/2 / 1/4) + 1/2 ln(1/2 / 3/4) = 1/2 ln(4/3).
        close(
            scalar(kd(&lq, &log_p([0.5, 0.5]), &m).unwrap()),
            0.5 * (4f64 / 3.0).ln(),
        );
    }

    #[test]
    fn tvd_is_half_the_l1_distance() {
        let (lq, m) = q_and_mask();
        close(scalar(tvd(&lq, &log_p([0.5, 0.5]), &m).unwrap()), 0.25);
        close(scalar(tvd(&lq, &log_p([0.25, 0.75]), &m).unwrap()), 0.0);
    }

    #[test]
    fn atspeed_s_top1_and_top2() {
        let (lq, m) = q_and_mask();
        // k = 1: the draft's top token is the second (q 3/4, p 1/2):
        // 3/4 ln(3/4 / 1/2) + p_1 * (-3/4 ln 3/4) with p_1 = 1/2.
        let want1 = 0.75 * 1.5f64.ln() + 0.5 * (-0.75 * 0.75f64.ln());
        close(
            scalar(atspeed_s(&lq, &log_p([0.5, 0.5]), &m, 1).unwrap()),
            want1,
        );
        // k = 2 with p = (0.2, 0.8): the full reverse KL plus p_2 = p(first token) = 0.2
        // times the whole entropy of q.
        let rkl = 0.25 * (0.25f64 / 0.2).ln() + 0.75 * (0.75f64 / 0.8).ln();
        let h = -(0.25 * 0.25f64.ln() + 0.75 * 0.75f64.ln());
        let got = scalar(atspeed_s(&lq, &log_p([0.2, 0.8]), &m, 2).unwrap());
        close(got, rkl + 0.2 * h);
        // k beyond the allowed set is the allowed set.
        close(
            scalar(atspeed_s(&lq, &log_p([0.2, 0.8]), &m, 9).unwrap()),
            got,
        );
    }

    #[test]
    fn cross_entropy_of_the_truth() {
        // Row 1 allows two tokens (q = 1/4, 3/4), row 2 three (q = 1/2, 1/4, 1/4).
        let logits = t(&[0.0, 3f32.ln(), 0.0, 2f32.ln(), 0.0, 0.0], 2);
        let mask = t(&[1.0, 1.0, 0.0, 1.0, 1.0, 1.0], 2);
        let log_q = masked_log_softmax(&logits, &mask).unwrap();
        let targets = Tensor::new(&[1u32, 0], &Device::Cpu).unwrap();
        // Row 1: -ln(3/4); row 2: -ln(1/2); mean.
        let want = (-(0.75f64.ln()) - 0.5f64.ln()) / 2.0;
        close(scalar(cross_entropy(&log_q, &targets).unwrap()), want);
    }

    #[test]
    fn losses_have_gradients() {
        let logits = candle_core::Var::from_tensor(&t(&[0.3, -0.2, 0.9, 0.0], 1)).unwrap();
        let mask = t(&[1.0, 1.0, 1.0, 0.0], 1);
        let lp = t(&[0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln(), 0.0], 1);
        for obj in [
            Objective::Kd,
            Objective::AtSpeedS { k: 2 },
            Objective::AtSpeedR,
        ] {
            let lq = masked_log_softmax(logits.as_tensor(), &mask).unwrap();
            let loss = align(obj, &lq, &lp, &mask).unwrap();
            let grads = loss.backward().unwrap();
            let g: Vec<f32> = grads
                .get(logits.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert!(g.iter().all(|v| v.is_finite()), "{obj:?}: {g:?}");
            assert!(g[..3].iter().any(|v| v.abs() > 1e-4), "{obj:?}: {g:?}");
            assert_eq!(g[3], 0.0, "{obj:?}: padding got a gradient");
        }
    }
}
