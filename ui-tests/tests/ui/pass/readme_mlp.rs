// The README's two-layer MLP, as a pass case.
use fucina::prelude::*;

axis!(pub h1);

#[derive(Module)]
struct Mlp {
    w1: Tensor<axes![h1, in]>,
    b1: Tensor<axes![h1]>,
    w2: Tensor<axes![class, h1]>,
    b2: Tensor<axes![class]>,
}

impl Mlp {
    fn forward(&self, x: &Tensor<axes![batch, in]>) -> Result<Tensor<axes![batch, class]>> {
        let z1 = einsum!(x, self.w1; in ->)?; // [batch, h1]
        let a1 = z1.add(&self.b1)?.tanh()?;
        let z2 = a1.dot::<h1, _>(&self.w2)?; // [batch, class]
        z2.add(&self.b2)
    }
}

fn main() -> Result<()> {
    let ctx = ExecContext::new(ExecConfig { seed: 1, ..ExecConfig::default() })?;
    let m = Mlp {
        w1: ctx.randn(&[8, 2], 0.0, 0.5)?,
        b1: Tensor::zeros(&[8])?,
        w2: ctx.randn(&[3, 8], 0.0, 0.5)?,
        b2: Tensor::zeros(&[3])?,
    };
    let x = ctx.randn::<axes![batch, in]>(&[4, 2], 0.0, 1.0)?;
    let y = ctx.scope(|| m.forward(&x))?;
    assert_eq!(y.shape(), &[4, 3]);
    assert_eq!(m.num_params(), 8 * 2 + 8 + 3 * 8 + 3);
    Ok(())
}
