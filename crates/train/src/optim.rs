//! AdamW whose state can be saved: candle's `AdamW` keeps its moments private, so a run
//! resumed from a checkpoint would restart them and train differently from one that was
//! never interrupted. This one does candle's arithmetic in candle's order (a test holds
//! the two to identical bits) and exposes its moments and step count.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
pub use candle_nn::ParamsAdamW;

use crate::TrainError;

struct Slot {
    name: String,
    var: Var,
    m: Var,
    v: Var,
}

/// AdamW over named candle variables, with moments and step count a checkpoint can save
/// and restore.
pub struct AdamW {
    slots: Vec<Slot>,
    steps: usize,
    params: ParamsAdamW,
}

impl AdamW {
    /// An optimiser of the named variables, its moments zero.
    pub fn new(vars: Vec<(String, Var)>, params: ParamsAdamW) -> Result<Self, TrainError> {
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                let zeros = || Var::zeros(var.shape(), var.dtype(), var.device());
                Ok(Slot {
                    m: zeros()?,
                    v: zeros()?,
                    name,
                    var,
                })
            })
            .collect::<Result<_, TrainError>>()?;
        Ok(AdamW {
            slots,
            steps: 0,
            params,
        })
    }

    /// Backpropagates `loss` and takes one step with its gradients.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<(), TrainError> {
        let grads = loss.backward()?;
        self.step(&grads)
    }

    /// One AdamW step with `grads`, as candle's `AdamW::step` computes it; variables without a
    /// gradient are left as they are.
    pub fn step(&mut self, grads: &GradStore) -> Result<(), TrainError> {
        self.steps += 1;
        let p = &self.params;
        let (b1, b2) = (p.beta1, p.beta2);
        let scale_m = 1f64 / (1f64 - b1.powi(self.steps as i32));
        let scale_v = 1f64 / (1f64 - b2.powi(self.steps as i32));
        for s in &self.slots {
            let Some(g) = grads.get(&s.var) else { continue };
            let next_m = ((s.m.as_tensor() * b1)? + (g * (1.0 - b1))?)?;
            let next_v = ((s.v.as_tensor() * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let m_hat = (&next_m * scale_m)?;
            let v_hat = (&next_v * scale_v)?;
            let decayed = (s.var.as_tensor() * (1f64 - p.lr * p.weight_decay))?;
            let adjusted = (m_hat / (v_hat.sqrt()? + p.eps)?)?;
            let next = (decayed - (adjusted * p.lr)?)?;
            s.m.set(&next_m)?;
            s.v.set(&next_v)?;
            s.var.set(&next)?;
        }
        Ok(())
    }

    /// Steps taken so far.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The moments by name (`m.NAME`, `v.NAME`), to save beside the step count.
    pub fn moments(&self) -> HashMap<String, Tensor> {
        self.slots
            .iter()
            .flat_map(|s| {
                [
                    (format!("m.{}", s.name), s.m.as_tensor().clone()),
                    (format!("v.{}", s.name), s.v.as_tensor().clone()),
                ]
            })
            .collect()
    }

    /// Continues from saved moments after `steps` steps.
    pub fn restore(
        &mut self,
        steps: usize,
        moments: &HashMap<String, Tensor>,
    ) -> Result<(), TrainError> {
        for s in &self.slots {
            for (key, var) in [("m", &s.m), ("v", &s.v)] {
                let name = format!("{key}.{}", s.name);
                let t = moments
                    .get(&name)
                    .ok_or_else(|| TrainError::Config(format!("no optimiser state `{name}`")))?;
                if t.shape() != var.shape() {
                    return Err(TrainError::Config(format!(
                        "optimiser state `{name}` has shape {:?}, expected {:?}",
                        t.shape(),
                        var.shape()
                    )));
                }
                var.set(t)?;
            }
        }
        self.steps = steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};
    use candle_nn::Optimizer;

    fn problem() -> (Var, Tensor) {
        let dev = &Device::Cpu;
        let w =
            Var::from_tensor(&Tensor::new(&[[0.3f32, -1.2, 0.7], [2.0, 0.1, -0.4]], dev).unwrap())
                .unwrap();
        let x = Tensor::new(&[[1.0f32, 0.5], [-0.3, 2.0], [0.8, -1.1]], dev).unwrap();
        (w, x)
    }

    fn loss(w: &Var, x: &Tensor) -> Tensor {
        let y = x.matmul(w.as_tensor()).unwrap();
        candle_nn::ops::log_softmax(&y, D::Minus1)
            .unwrap()
            .narrow(1, 0, 1)
            .unwrap()
            .neg()
            .unwrap()
            .mean_all()
            .unwrap()
    }

    fn values(w: &Var) -> Vec<f32> {
        w.as_tensor().flatten_all().unwrap().to_vec1().unwrap()
    }

    fn params() -> ParamsAdamW {
        ParamsAdamW {
            lr: 0.05,
            weight_decay: 0.01,
            ..ParamsAdamW::default()
        }
    }

    #[test]
    fn equals_candles_adamw_bit_for_bit() {
        let (a, x) = problem();
        let (b, _) = problem();
        let mut ours = AdamW::new(vec![("w".into(), a.clone())], params()).unwrap();
        let mut theirs = candle_nn::AdamW::new(vec![b.clone()], params()).unwrap();
        for _ in 0..5 {
            ours.backward_step(&loss(&a, &x)).unwrap();
            theirs.backward_step(&loss(&b, &x)).unwrap();
        }
        assert_eq!(values(&a), values(&b));
    }

    #[test]
    fn restored_state_continues_as_if_never_stopped() {
        let (a, x) = problem();
        let mut straight = AdamW::new(vec![("w".into(), a.clone())], params()).unwrap();
        for _ in 0..6 {
            straight.backward_step(&loss(&a, &x)).unwrap();
        }
        let (b, _) = problem();
        let mut first = AdamW::new(vec![("w".into(), b.clone())], params()).unwrap();
        for _ in 0..3 {
            first.backward_step(&loss(&b, &x)).unwrap();
        }
        let (steps, moments) = (first.steps(), first.moments());
        let c = Var::from_tensor(b.as_tensor()).unwrap();
        let mut resumed = AdamW::new(vec![("w".into(), c.clone())], params()).unwrap();
        resumed.restore(steps, &moments).unwrap();
        for _ in 0..3 {
            resumed.backward_step(&loss(&c, &x)).unwrap();
        }
        assert_eq!(values(&a), values(&c));
        assert!(resumed.restore(1, &HashMap::new()).is_err());
    }
}
