//! `MultiHeadAttention`: grouped-query self-attention over one sequence, with full, causal
//! or sliding-window masks, its projections shaped by head so no reshape is needed.

use super::init::Init;
use crate::axis::{group, head_dim, hidden, kv_head, kv_seq, seq};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::ops::{attention, Mask};
use crate::tensor::Tensor;
use crate::Module;

/// Self-attention with `kv_head` key/value heads and `group` query heads per key/value head
/// (multi-head when `group` is 1, multi-query when `kv_head` is 1), over the model axis `hidden`:
/// `q = x Wq`, `k = x Wk`, `v = x Wv` per head, `softmax(q k^T / sqrt(head_dim) + mask) v`,
/// then `Wo`. No biases (as in most current LLMs).
///
/// The weights carry their head axes, `Wq [kv_head, group, head_dim, hidden]`, `Wk`/`Wv
/// [kv_head, head_dim, hidden]`, `Wo [hidden, kv_head, group, head_dim]`: the same numbers as
/// PyTorch's `[heads * head_dim, hidden]` matrices, row `h * head_dim + d`.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::MultiHeadAttention;
/// use fucina::ops::Mask;
/// let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() })?;
/// let mha = MultiHeadAttention::init(&ctx, 16, 2, 2, 4)?; // 2 kv heads x 2 queries each
/// let x: Tensor<axes![seq, hidden]> = ctx.randn(&[5, 16], 0.0, 1.0)?;
/// let y = mha.forward(&x, Mask::Causal(0))?;
/// assert_eq!(y.shape(), &[5, 16]);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct MultiHeadAttention {
    /// Query projection `[kv_head, group, head_dim, hidden]`.
    pub wq: Tensor<(kv_head, group, head_dim, hidden)>,
    /// Key projection `[kv_head, head_dim, hidden]`.
    pub wk: Tensor<(kv_head, head_dim, hidden)>,
    /// Value projection `[kv_head, head_dim, hidden]`.
    pub wv: Tensor<(kv_head, head_dim, hidden)>,
    /// Output projection `[hidden, kv_head, group, head_dim]`.
    pub wo: Tensor<(hidden, kv_head, group, head_dim)>,
}

impl MultiHeadAttention {
    /// A layer from its projections (their head sizes must agree).
    pub fn new(
        wq: Tensor<(kv_head, group, head_dim, hidden)>,
        wk: Tensor<(kv_head, head_dim, hidden)>,
        wv: Tensor<(kv_head, head_dim, hidden)>,
        wo: Tensor<(hidden, kv_head, group, head_dim)>,
    ) -> Result<MultiHeadAttention> {
        let (q, k, v, o) = (wq.shape(), wk.shape(), wv.shape(), wo.shape());
        let pairs = [
            ("kv_head", q[0], k[0]),
            ("kv_head", q[0], v[0]),
            ("kv_head", q[0], o[1]),
            ("group", q[1], o[2]),
            ("head_dim", q[2], k[1]),
            ("head_dim", q[2], v[1]),
            ("head_dim", q[2], o[3]),
            ("hidden", q[3], k[2]),
            ("hidden", q[3], v[2]),
            ("hidden", q[3], o[0]),
        ];
        if let Some((axis, left, right)) = pairs.into_iter().find(|(_, a, b)| a != b) {
            return Err(FucinaError::ShapeMismatch { axis: axis.to_string(), left, right });
        }
        Ok(MultiHeadAttention { wq, wk, wv, wo })
    }

    /// A new layer of model width `dim`, initialized as PyTorch's `nn.MultiheadAttention`
    /// (Xavier-uniform projections over the packed `[3 dim, dim]` input matrix, so the bound is
    /// `sqrt(6 / (4 dim))`; the output projection `±1/sqrt(dim)`).
    pub fn init(
        ctx: &ExecContext,
        dim: usize,
        kv_heads: usize,
        groups: usize,
        head_size: usize,
    ) -> Result<MultiHeadAttention> {
        if dim == 0 || kv_heads == 0 || groups == 0 || head_size == 0 {
            return Err(FucinaError::InvalidArgument { op: "MultiHeadAttention", msg: "a size is zero".into() });
        }
        let bound = (6.0 / (4 * dim) as f32).sqrt();
        let u = Init::Uniform { bound };
        let ob = 1.0 / (dim as f32).sqrt();
        MultiHeadAttention::new(
            u.tensor(ctx, &[kv_heads, groups, head_size, dim])?,
            u.tensor(ctx, &[kv_heads, head_size, dim])?,
            u.tensor(ctx, &[kv_heads, head_size, dim])?,
            Init::Uniform { bound: ob }.tensor(ctx, &[dim, kv_heads, groups, head_size])?,
        )
    }

    /// Attends over the sequence `x [seq, hidden]`; `mask` says which positions each one sees
    /// ([`Mask::Causal`]`(0)` for a decoder, [`Mask::Sliding`] for local layers,
    /// [`Mask::Full`] for an encoder).
    pub fn forward(&self, x: &Tensor<(seq, hidden)>, mask: impl Into<Mask>) -> Result<Tensor<(seq, hidden)>> {
        let q = x.contract::<hidden, _>(&self.wq)?;
        let kv = |w: &Tensor<(kv_head, head_dim, hidden)>| -> Result<Tensor<(kv_head, kv_seq, head_dim)>> {
            x.contract::<hidden, _>(w)?.permute::<(kv_head, seq, head_dim)>()?.rename::<seq, kv_seq>()
        };
        let (k, v) = (kv(&self.wk)?, kv(&self.wv)?);
        let scale = 1.0 / (self.wq.shape()[2] as f32).sqrt();
        let o = attention(&q, &k, &v, scale, mask)?;
        o.contract::<(kv_head, group, head_dim), _>(&self.wo)
    }
}
