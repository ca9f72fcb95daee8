//! `Embedding`: a table of rows looked up by id.

use super::init::Init;
use crate::error::Result;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axis, CanJoin};
use crate::tensor::Tensor;
use crate::Module;

/// A `[V, H]` table: ids index axis `V`, each id gives a row along `H`.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::Embedding;
/// let ctx = ExecContext::new(ExecConfig { seed: 1, ..ExecConfig::default() })?;
/// let emb = Embedding::<vocab, hidden>::init(&ctx, 10, 4)?;
/// let ids = Tensor::<axes![batch, seq]>::from_vec(vec![1u32, 9, 0, 3], &[2, 2])?;
/// let x: Tensor<axes![batch, seq, hidden]> = emb.forward(&ids)?;
/// assert_eq!(x.shape(), &[2, 2, 4]);
/// assert!(emb.forward(&Tensor::<axes![seq]>::from_vec(vec![10u32], &[1])?).is_err(), "id out of range");
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct Embedding<V: Axis + Send + Sync, H: Axis + Send + Sync> {
    /// `[V, H]`.
    pub weight: Tensor<(V, H)>,
}

impl<V: Axis + Send + Sync, H: Axis + Send + Sync> Embedding<V, H> {
    /// A layer from its table.
    pub fn new(weight: Tensor<(V, H)>) -> Embedding<V, H> {
        Embedding { weight }
    }

    /// A new table initialized as PyTorch's `nn.Embedding`: `N(0, 1)`.
    pub fn init(ctx: &ExecContext, num: usize, dim: usize) -> Result<Embedding<V, H>> {
        Ok(Embedding { weight: Init::Normal { mean: 0.0, std: 1.0 }.tensor(ctx, &[num, dim])? })
    }

    /// The rows of `ids` (u32; each checked against the table's size): the axes of `ids`, then `H`.
    pub fn forward<I>(&self, ids: &Tensor<I>) -> Result<Tensor<<I as CanJoin<(H,)>>::Out>>
    where
        I: CanJoin<(H,)>,
    {
        self.weight.embedding(ids)
    }
}
