//! Indexing ops: embedding lookup and gather along a named axis.

use super::{contiguous_f32, finish, float_slice_contiguous, pos, unpermute};
use crate::backend::FloatSlice;
use crate::dtype::DType;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, CanJoin, HasAxes};
use crate::tensor::{RawTensor, Tensor};

fn ids_of(ids: &RawTensor) -> Result<Vec<u32>> {
    if ids.dtype() != DType::U32 {
        return Err(FucinaError::DTypeMismatch { op: "index", left: ids.dtype(), right: DType::U32 });
    }
    ids.to_vec::<u32>()
}

impl<V: Axis + Send + Sync, H: Axis + Send + Sync> Tensor<(V, H)> {
    /// Looks up rows of this `[V, H]` table: the result has the axes of `ids` followed by `H`.
    pub fn embedding<I>(&self, ids: &Tensor<I>) -> Result<Tensor<<I as CanJoin<(H,)>>::Out>>
    where
        I: CanJoin<(H,)>,
    {
        let ctx = ExecContext::current();
        let idx = ids_of(ids.raw())?;
        let (rows, cols) = (self.shape()[0], self.shape()[1]);
        if let Some(bad) = idx.iter().find(|i| **i as usize >= rows) {
            return Err(FucinaError::OutOfRange { axis: V::NAME.to_string(), index: *bad as usize, size: rows });
        }
        let table = self.contiguous()?;
        let data = float_slice_contiguous(table.raw(), "embedding")?;
        let mut out = ctx.alloc(idx.len() * cols);
        ctx.run(idx.len() * cols, |k| k.gather_rows(data, cols, &idx, &mut out));
        let mut shape = ids.shape().to_vec();
        shape.push(cols);
        let y = finish(&ctx, out, &shape, self.dtype())?;
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let gc = contiguous_f32(&ctx, g, "embedding backward")?;
                let mut dt = ctx.alloc(rows * cols);
                dt.fill(0.0);
                ctx.run(gc.len(), |k| k.scatter_add_rows(cols, &idx, &gc, &mut dt));
                Ok(vec![Some(ctx.wrap_f32(dt, &[rows, cols])?)])
            })
        }))
    }
}

impl<A: Axes> Tensor<A> {
    /// `out[.., i, ..] = self[.., index[.., i, ..], ..]` along axis `X` (PyTorch `gather`).
    ///
    /// `index` has the axes of `self`, u32 dtype, and the same sizes except along `X`.
    pub fn gather<X: Axis>(&self, index: &Tensor<A>) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let ctx = ExecContext::current();
        let names = A::names();
        let d = pos(&names, X::NAME);
        for (i, n) in names.iter().enumerate() {
            if i != d && index.shape()[i] != self.shape()[i] {
                return Err(FucinaError::ShapeMismatch {
                    axis: n.to_string(),
                    left: self.shape()[i],
                    right: index.shape()[i],
                });
            }
        }
        let mut perm: Vec<usize> = (0..names.len()).filter(|i| *i != d).collect();
        perm.push(d);
        let src_view = self.raw().with_layout(self.raw().layout().permuted(&perm))?;
        let idx_view = index.raw().with_layout(index.raw().layout().permuted(&perm))?;
        let src = contiguous_f32(&ctx, &src_view, "gather")?;
        let ids = ids_of(&idx_view)?;
        let (s, l) = (self.shape()[d], index.shape()[d]);
        if src.len() > u32::MAX as usize {
            return Err(FucinaError::InvalidArgument { op: "gather", msg: "more than 2^32 source elements".into() });
        }
        let mut flat = Vec::with_capacity(ids.len());
        for (j, id) in ids.iter().enumerate() {
            if *id as usize >= s {
                return Err(FucinaError::OutOfRange { axis: X::NAME.to_string(), index: *id as usize, size: s });
            }
            flat.push(((j / l.max(1)) * s + *id as usize) as u32);
        }
        let mut out = ctx.alloc(flat.len());
        ctx.run(flat.len(), |k| k.gather_rows(FloatSlice::F32(&src), 1, &flat, &mut out));
        let res = finish(&ctx, out, idx_view.shape(), self.dtype())?;
        let y = unpermute(res, &perm)?;
        let src_shape = src_view.shape().to_vec();
        let n_src = src.len();
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                // Scatter-add g back along the gathered axis, in the permuted order, then view back.
                let ctx = ExecContext::current();
                let gv = g.with_layout(g.layout().permuted(&perm))?;
                let gc = contiguous_f32(&ctx, &gv, "gather backward")?;
                let mut ds = ctx.alloc(n_src);
                ds.fill(0.0);
                ctx.run(gc.len(), |k| k.scatter_add_rows(1, &flat, &gc, &mut ds));
                Ok(vec![Some(unpermute(ctx.wrap_f32(ds, &src_shape)?, &perm)?)])
            })
        }))
    }
}
