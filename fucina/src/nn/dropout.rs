//! `Dropout`: random zeroing while training, from the context's counter-based RNG.

use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::BroadcastFrom;
use crate::tensor::Tensor;

/// Whether a layer runs as in training or as in evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Training: dropout is active.
    Train,
    /// Evaluation: dropout is the identity.
    Eval,
}

/// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)` in
/// [`Mode::Train`]; the identity in [`Mode::Eval`]. The mask comes from the context's
/// Philox stream, so a seeded context drops the same elements on any backend and thread
/// count, and a restored RNG counter replays it.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Dropout, Mode};
/// let ctx = ExecContext::new(ExecConfig { seed: 5, ..ExecConfig::default() })?;
/// let x = Tensor::<axes![batch, hidden]>::ones(&[4, 256])?;
/// let y = ctx.scope(|| Dropout::new(0.25)?.forward(&x, Mode::Train))?.to_f32_vec();
/// assert!(y.iter().all(|v| *v == 0.0 || (*v - 4.0 / 3.0).abs() < 1e-6));
/// let kept = y.iter().filter(|v| **v != 0.0).count() as f32 / y.len() as f32;
/// assert!((kept - 0.75).abs() < 0.05);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dropout {
    p: f32,
}

impl Dropout {
    /// A layer dropping with probability `p` in `[0, 1)`.
    pub fn new(p: f32) -> Result<Dropout> {
        if !(0.0..1.0).contains(&p) {
            return Err(FucinaError::InvalidArgument { op: "dropout", msg: format!("p must be in [0, 1), got {p}") });
        }
        Ok(Dropout { p })
    }

    /// The drop probability.
    pub fn p(&self) -> f32 {
        self.p
    }

    /// Applies the layer; gradients pass through the kept elements, scaled.
    pub fn forward<A: BroadcastFrom<A>>(&self, x: &Tensor<A>, mode: Mode) -> Result<Tensor<A>> {
        if mode == Mode::Eval || self.p == 0.0 {
            return Ok(x.clone());
        }
        let u: Tensor<A> = ExecContext::current().rand_uniform(x.shape(), 0.0, 1.0)?;
        let keep = u.ge_scalar(self.p)?.scale(1.0 / (1.0 - self.p))?;
        x.mul(&keep)
    }
}
