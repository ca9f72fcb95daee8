//! The README's two-layer perceptron: `tanh(x·w1 + b1)·w2 + b2`, by axis name.

use fucina::prelude::*;

axis!(pub h1);

/// A two-layer MLP from `in` features to `class` logits through `h1` hidden units.
#[derive(Module)]
pub struct Mlp {
    /// First layer weights.
    pub w1: Tensor<axes![h1, in]>,
    /// First layer bias.
    pub b1: Tensor<axes![h1]>,
    /// Second layer weights.
    pub w2: Tensor<axes![class, h1]>,
    /// Second layer bias.
    pub b2: Tensor<axes![class]>,
}

impl Mlp {
    /// Random init (normal, std `1/sqrt(fan_in)`, zero biases) from the context's RNG.
    pub fn new(ctx: &ExecContext, inputs: usize, hidden: usize, classes: usize) -> Result<Mlp> {
        Ok(Mlp {
            w1: ctx.randn(&[hidden, inputs], 0.0, 1.0 / (inputs as f32).sqrt())?,
            b1: Tensor::zeros(&[hidden])?,
            w2: ctx.randn(&[classes, hidden], 0.0, 1.0 / (hidden as f32).sqrt())?,
            b2: Tensor::zeros(&[classes])?,
        })
    }

    /// Logits for a batch.
    pub fn forward(&self, x: &Tensor<axes![batch, in]>) -> Result<Tensor<axes![batch, class]>> {
        let z1 = einsum!(x, self.w1; in ->)?; // [batch, h1]
        let a1 = z1.add(&self.b1)?.tanh()?;
        let z2 = a1.dot::<h1, _>(&self.w2)?; // [batch, class]
        z2.add(&self.b2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_matches_hand_computation() {
        let ctx = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
        let _g = ctx.enter();
        let m = Mlp {
            w1: Tensor::from_vec(vec![1.0f32, -1.0, 0.5, 0.5], &[2, 2]).unwrap(),
            b1: Tensor::from_vec(vec![0.0f32, 0.1], &[2]).unwrap(),
            w2: Tensor::from_vec(vec![2.0f32, -3.0], &[1, 2]).unwrap(),
            b2: Tensor::from_vec(vec![0.25f32], &[1]).unwrap(),
        };
        let x = Tensor::from_vec(vec![0.3f32, 0.1], &[1, 2]).unwrap();
        let y = m.forward(&x).unwrap().item().unwrap();
        let want = 2.0 * (0.3f32 - 0.1).tanh() - 3.0 * (0.15f32 + 0.05 + 0.1).tanh() + 0.25;
        assert!((y - want).abs() < 1e-6, "{y} vs {want}");
        assert_eq!(m.param_names(), vec!["w1", "b1", "w2", "b2"]);
    }
}
