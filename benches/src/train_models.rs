//! The models the training benchmark times: an MLP and a pre-norm transformer block,
//! the same shapes as `benches/torch_train_step.py`.

use fucina::nn::mse_loss;
use fucina::optim::{AdamW, Optimizer};
use fucina::prelude::*;

axis!(pub h1, pub h2, pub d_in, pub d_out, pub qk);

/// zero_grad, a recorded forward + loss, backward, optimizer step; returns the loss.
fn train_step<M: Module>(
    m: &mut M,
    ctx: &ExecContext,
    opt: &mut AdamW,
    loss: impl FnOnce(&M) -> Result<Tensor<()>>,
) -> Result<f32> {
    m.zero_grad();
    let l = {
        let _s = ctx.open_exec_scope();
        let l = loss(m)?;
        l.backward(ctx)?;
        l.item()?
    };
    opt.step(m)?;
    Ok(l)
}

/// MLP `d_in -> h1 -> h2 -> d_out` with GELU.
#[derive(Module)]
pub struct BenchMlp {
    w1: Tensor<axes![h1, d_in]>,
    b1: Tensor<axes![h1]>,
    w2: Tensor<axes![h2, h1]>,
    b2: Tensor<axes![h2]>,
    w3: Tensor<axes![d_out, h2]>,
    b3: Tensor<axes![d_out]>,
}

impl BenchMlp {
    /// Random init: `d_in`, hidden width `h`, `d_out`.
    pub fn new(ctx: &ExecContext, d: usize, h: usize, o: usize) -> Result<BenchMlp> {
        let mut m = BenchMlp {
            w1: ctx.randn(&[h, d], 0.0, 0.05)?,
            b1: Tensor::zeros(&[h])?,
            w2: ctx.randn(&[h, h], 0.0, 0.05)?,
            b2: Tensor::zeros(&[h])?,
            w3: ctx.randn(&[o, h], 0.0, 0.05)?,
            b3: Tensor::zeros(&[o])?,
        };
        m.track_params();
        Ok(m)
    }

    fn forward(&self, x: &Tensor<axes![batch, d_in]>) -> Result<Tensor<axes![batch, d_out]>> {
        let a = einsum!(x, self.w1; d_in ->)?.add(&self.b1)?.gelu()?;
        let a = a.dot::<h1, _>(&self.w2)?.add(&self.b2)?.gelu()?;
        a.dot::<h2, _>(&self.w3)?.add(&self.b3)
    }

    /// One training step (forward, MSE, backward, AdamW); returns the loss.
    pub fn step(
        &mut self,
        ctx: &ExecContext,
        opt: &mut AdamW,
        x: &Tensor<axes![batch, d_in]>,
        y: &Tensor<axes![batch, d_out]>,
    ) -> Result<f32> {
        train_step(self, ctx, opt, |m| mse_loss(&m.forward(x)?, y))
    }
}

/// A pre-norm transformer block: causal multi-head attention and a GELU MLP, residuals.
#[derive(Module)]
pub struct BenchBlock {
    ln1_w: Tensor<axes![hidden]>,
    ln1_b: Tensor<axes![hidden]>,
    wq: Tensor<axes![head, head_dim, hidden]>,
    wk: Tensor<axes![head, head_dim, hidden]>,
    wv: Tensor<axes![head, head_dim, hidden]>,
    wo: Tensor<axes![out, head, head_dim]>,
    ln2_w: Tensor<axes![hidden]>,
    ln2_b: Tensor<axes![hidden]>,
    w1: Tensor<axes![ffn, hidden]>,
    w2: Tensor<axes![out, ffn]>,
    #[module(skip)]
    mask: Tensor<axes![seq, kv_seq]>,
}

impl BenchBlock {
    /// Random init: width `d`, `heads` heads, MLP width `f`, sequence length `t`.
    pub fn new(ctx: &ExecContext, d: usize, heads: usize, f: usize, t: usize) -> Result<BenchBlock> {
        let hd = d / heads;
        let mask: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { 1.0 } else { 0.0 }).collect();
        let mut m = BenchBlock {
            ln1_w: Tensor::ones(&[d])?,
            ln1_b: Tensor::zeros(&[d])?,
            wq: ctx.randn(&[heads, hd, d], 0.0, 0.05)?,
            wk: ctx.randn(&[heads, hd, d], 0.0, 0.05)?,
            wv: ctx.randn(&[heads, hd, d], 0.0, 0.05)?,
            wo: ctx.randn(&[d, heads, hd], 0.0, 0.05)?,
            ln2_w: Tensor::ones(&[d])?,
            ln2_b: Tensor::zeros(&[d])?,
            w1: ctx.randn(&[f, d], 0.0, 0.05)?,
            w2: ctx.randn(&[d, f], 0.0, 0.05)?,
            mask: Tensor::from_vec(mask, &[t, t])?,
        };
        m.track_params();
        Ok(m)
    }

    fn forward(&self, x: &Tensor<axes![batch, seq, hidden]>) -> Result<Tensor<axes![batch, seq, hidden]>> {
        let hd = self.wq.size::<head_dim>() as f32;
        let h = x.layer_norm::<hidden>(Some(&self.ln1_w), Some(&self.ln1_b), 1e-5)?;
        let q = einsum!(h, self.wq; hidden ->)?; // [batch, seq, head, head_dim]
        let hk = h.rename::<seq, kv_seq>()?;
        let k = einsum!(hk, self.wk; hidden ->)?; // [batch, kv_seq, head, head_dim]
        let v = einsum!(hk, self.wv; hidden ->)?;
        let s = einsum!(q, k; head_dim ->)?.scale(1.0 / hd.sqrt())?; // [batch, seq, head, kv_seq]
        let p = s.masked_fill(&self.mask, f32::NEG_INFINITY)?.softmax::<kv_seq>()?;
        let o = einsum!(p, v; kv_seq ->)?; // [batch, seq, head, head_dim]
        let a = o.contract::<(head, head_dim), _>(&self.wo)?.rename::<out, hidden>()?;
        let x1 = x.add(&a)?;
        let h2 = x1.layer_norm::<hidden>(Some(&self.ln2_w), Some(&self.ln2_b), 1e-5)?;
        let f = einsum!(h2, self.w1; hidden ->)?.gelu()?;
        let m = f.dot::<ffn, _>(&self.w2)?.rename::<out, hidden>()?;
        x1.add(&m)
    }

    /// One training step (forward, MSE against `y`, backward, AdamW); returns the loss.
    pub fn step(
        &mut self,
        ctx: &ExecContext,
        opt: &mut AdamW,
        x: &Tensor<axes![batch, seq, hidden]>,
        y: &Tensor<axes![batch, seq, hidden]>,
    ) -> Result<f32> {
        train_step(self, ctx, opt, |m| mse_loss(&m.forward(x)?, y))
    }
}
