//! A stack of weight matrices of one shape and format, one per index of an axis `G` (ggml's
//! three-dimensional weights, such as the per-head maps of DeepSeek's absorbed multi-head
//! latent attention): `y[b, g, :] = x[b, g, :] W_g^T`, the `G` products run as one group
//! ([`crate::backend::Kernels::weight_matmul_group`]), each on the weight's own bytes (no
//! decoding to f32 first, so a Q8_0 stack streams a quarter of the bytes an f32 copy would).

use super::matmul::QWeight;
use super::GgmlType;
use crate::backend::WeightJob;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::Axis;
use crate::tensor::Tensor;
use std::marker::PhantomData;

/// `G` weight matrices `[O, I]` of one format and shape: the matrix of index `g` meets the
/// `g`-th slice of the input (a batched product with a weight per batch index, as ggml's
/// `mul_mat` with a three-dimensional weight).
///
/// ```
/// use fucina::prelude::*;
/// use fucina::quant::{GgmlType, QWeight, QWeightStack};
/// axis!(seq, head, latent, nope);
/// let mats = (0..4)
///     .map(|h| {
///         let w: Vec<f32> = (0..64 * 32).map(|i| (((i + 7 * h) % 13) as f32 - 6.0) / 8.0).collect();
///         QWeight::<latent, nope>::quantize(&Tensor::from_vec(w, &[64, 32])?, GgmlType::Q8_0)
///     })
///     .collect::<Result<Vec<_>>>()?;
/// let stack = QWeightStack::<head, latent, nope>::new(mats)?;
/// let x = Tensor::<axes![seq, head, nope]>::randn(&[3, 4, 32])?;
/// let y: Tensor<axes![seq, head, latent]> = stack.forward(&x)?;
/// assert_eq!(y.shape(), &[3, 4, 64]);
/// // Head 2 of row 1 is that head's matrix times that slice of the input.
/// let x21 = x.narrow::<seq>(1, 1)?.narrow::<head>(2, 1)?.contiguous()?.to_f32_vec();
/// let one = stack.get(2).unwrap().forward(&Tensor::<axes![seq, nope]>::from_vec(x21, &[1, 32])?)?;
/// let y21 = y.narrow::<seq>(1, 1)?.narrow::<head>(2, 1)?.contiguous()?.to_f32_vec();
/// assert_eq!(y21, one.to_f32_vec());
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Clone)]
pub struct QWeightStack<G: Axis, O: Axis, I: Axis> {
    mats: Vec<QWeight<O, I>>,
    _axes: PhantomData<fn() -> G>,
}

impl<G: Axis, O: Axis, I: Axis> std::fmt::Debug for QWeightStack<G, O, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mats.first() {
            Some(w) => write!(f, "QWeightStack<{}>({} x {w:?})", G::NAME, self.mats.len()),
            None => write!(f, "QWeightStack<{}>(empty)", G::NAME),
        }
    }
}

impl<G: Axis, O: Axis, I: Axis> QWeightStack<G, O, I> {
    /// The stack of `mats` (at least one, all of one format and shape), in `G` order.
    pub fn new(mats: Vec<QWeight<O, I>>) -> Result<QWeightStack<G, O, I>> {
        let bad = |msg: String| FucinaError::InvalidArgument { op: "QWeightStack::new", msg };
        let first = mats.first().ok_or_else(|| bad(format!("no matrices along `{}`", G::NAME)))?;
        let (ty, rows, cols) = (first.ggml_type(), first.rows(), first.cols());
        if let Some((g, w)) =
            mats.iter().enumerate().find(|(_, w)| (w.ggml_type(), w.rows(), w.cols()) != (ty, rows, cols))
        {
            return Err(bad(format!(
                "matrix {g} is {}x{} {:?}, matrix 0 {rows}x{cols} {ty:?}",
                w.rows(),
                w.cols(),
                w.ggml_type()
            )));
        }
        Ok(QWeightStack { mats, _axes: PhantomData })
    }

    /// `G` matrices `[O, I]` from f32 values `[G, O, I]`, stored as `ty` (F32 keeps them).
    pub fn from_f32(values: &[f32], g: usize, rows: usize, cols: usize, ty: GgmlType) -> Result<QWeightStack<G, O, I>> {
        let per = rows.checked_mul(cols).filter(|&p| g.checked_mul(p) == Some(values.len())).ok_or_else(|| {
            FucinaError::InvalidArgument {
                op: "QWeightStack::from_f32",
                msg: format!("{} values for {g} x {rows} x {cols}", values.len()),
            }
        })?;
        let mats = (0..g)
            .map(|i| {
                let w = Tensor::<(O, I)>::from_vec(values[i * per..(i + 1) * per].to_vec(), &[rows, cols])?;
                QWeight::quantize(&w, ty)
            })
            .collect::<Result<Vec<_>>>()?;
        QWeightStack::new(mats)
    }

    /// Each matrix in the layout the backend wants for this CPU ([`QWeight::prepared`]).
    pub fn prepared(self) -> Result<QWeightStack<G, O, I>> {
        let mats = self.mats.into_iter().map(QWeight::prepared).collect::<Result<Vec<_>>>()?;
        Ok(QWeightStack { mats, _axes: PhantomData })
    }

    /// Each matrix through `f` (a model loader's own preparation), in `G` order.
    pub fn map(self, f: impl FnMut(QWeight<O, I>) -> Result<QWeight<O, I>>) -> Result<QWeightStack<G, O, I>> {
        QWeightStack::new(self.mats.into_iter().map(f).collect::<Result<Vec<_>>>()?)
    }

    /// Size of the `G` axis (at least 1).
    pub fn len(&self) -> usize {
        self.mats.len()
    }

    /// Always false: a stack holds at least one matrix.
    pub fn is_empty(&self) -> bool {
        self.mats.is_empty()
    }

    /// The matrix of index `g`.
    pub fn get(&self, g: usize) -> Option<&QWeight<O, I>> {
        self.mats.get(g)
    }

    /// The storage format.
    pub fn ggml_type(&self) -> GgmlType {
        self.mats[0].ggml_type()
    }

    /// Size of the `O` axis.
    pub fn rows(&self) -> usize {
        self.mats[0].rows()
    }

    /// Size of the `I` axis.
    pub fn cols(&self) -> usize {
        self.mats[0].cols()
    }

    /// Bytes the stack holds in memory of its own ([`QWeight::resident_bytes`], summed).
    pub fn resident_bytes(&self) -> usize {
        self.mats.iter().map(QWeight::resident_bytes).sum()
    }

    /// `y[b, g, :] = x[b, g, :] W_g^T` for `x [B, G, I]`: each slice of `G` through its own
    /// matrix, with the same values as that matrix's [`QWeight::forward`], all `G` products
    /// as one group.
    pub fn forward<B: Axis>(&self, x: &Tensor<(B, G, I)>) -> Result<Tensor<(B, G, O)>> {
        let (m, g, k) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        if g != self.len() {
            return Err(FucinaError::ShapeMismatch { axis: G::NAME.to_string(), left: g, right: self.len() });
        }
        if k != self.cols() {
            return Err(FucinaError::ShapeMismatch { axis: I::NAME.to_string(), left: k, right: self.cols() });
        }
        let o = self.rows();
        let overflow = || FucinaError::InvalidArgument {
            op: "QWeightStack::forward",
            msg: format!("a [{m}, {g}, {o}] product overflows"),
        };
        let per = m.checked_mul(o).ok_or_else(overflow)?;
        let total = per.checked_mul(g).ok_or_else(overflow)?;
        if total == 0 {
            return Tensor::zeros(&[m, g, o]);
        }
        // The input as `[G, B, I]` rows (a copy only when `B` is not 1 or `x` not dense).
        let xv = x.raw().with_layout(x.raw().layout().permuted(&[1, 0, 2]))?.to_f32_vec();
        let ctx = ExecContext::current();
        // Every element is written by the products, so a pooled buffer's stale values never show.
        let mut ys = ctx.try_alloc("a stacked product", total)?;
        {
            let rows = m * k;
            let mut jobs: Vec<WeightJob<'_>> = ys
                .chunks_mut(per)
                .zip(&self.mats)
                .enumerate()
                .map(|(i, (y, w))| WeightJob { w: w.mat(), x: &xv[i * rows..(i + 1) * rows], m, y })
                .collect();
            let work = total.saturating_mul(k);
            ctx.run(work, |kern| kern.weight_matmul_group(&mut jobs));
        }
        // `[G, B, O]` in memory, seen as `[B, G, O]`.
        let y = ctx.wrap_f32(ys, &[g, m, o])?;
        Tensor::from_raw(y.with_layout(y.layout().permuted(&[1, 0, 2]))?)
    }
}
