//! Weights kept in their file's format and their matrix products: `y = x W^T` with
//! `W [out, in]` stored as f32/f16/bf16 rows (dotted against f32 activations) or in a ggml
//! block format, with each activation row quantized on the fly: to Q8_0 for the 32-value
//! formats (Q8_0, Q4_0), to Q8_K for the 256-value K-quants (Q2_K..Q6_K). The bytes may be
//! a memory-mapped file's ([`SharedBytes`]), so loading a model copies no weights.

use super::{quantize, GgmlType};
use crate::backend::fdot::FloatRow;
use crate::backend::qdot_k::KFormat;
use crate::backend::{WeightFormat, WeightJob, WeightMat};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::nn::Projected;
use crate::storage::SharedBytes;
use crate::tensor::axes::{Axis, BroadcastFrom, CanContract};
use crate::tensor::Tensor;
use std::marker::PhantomData;

pub use crate::backend::weights::BF16_BATCH;

/// A weight matrix `[O, I]` stored in a format with a dot kernel: F32, F16, BF16, Q8_0,
/// Q4_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K.
#[derive(Clone)]
pub struct QWeight<O: Axis, I: Axis> {
    ty: GgmlType,
    /// How the bytes are laid out: the type's rows, or a layout the backend repacked them into.
    layout: WeightFormat,
    rows: usize,
    cols: usize,
    data: SharedBytes,
    _axes: PhantomData<fn() -> (O, I)>,
}

impl<O: Axis, I: Axis> std::fmt::Debug for QWeight<O, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QWeight<{}, {}>({:?}, {}x{})", O::NAME, I::NAME, self.ty, self.rows, self.cols)
    }
}

impl<O: Axis, I: Axis> QWeight<O, I> {
    /// Wraps encoded rows (`rows` x `cols` values of `ty`, row-major).
    pub fn from_bytes(ty: GgmlType, rows: usize, cols: usize, data: Vec<u8>) -> Result<QWeight<O, I>> {
        QWeight::from_shared(ty, rows, cols, SharedBytes::from_vec(data))
    }

    /// Wraps encoded rows held elsewhere (e.g. a memory-mapped model file) without copying.
    pub fn from_shared(ty: GgmlType, rows: usize, cols: usize, data: SharedBytes) -> Result<QWeight<O, I>> {
        let layout = validate(ty, rows, cols, data.len())?;
        Ok(QWeight { ty, layout, rows, cols, data, _axes: PhantomData })
    }

    /// The weight in the layout the current backend wants for this CPU
    /// ([`Kernels::weight_layout`](crate::backend::Kernels::weight_layout)): repacked into a
    /// new buffer as large as the stored bytes (e.g. Q4_K with sixteen rows interleaved where
    /// the AVX-512 VNNI kernels run), or `self` unchanged. The values and every product stay
    /// those of the stored rows. A model loader calls it once per weight, at load.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// use fucina::quant::{GgmlType, QWeight};
    /// let w: Vec<f32> = (0..32 * 256).map(|i| ((i * 7) % 17) as f32 - 8.0).collect();
    /// let w = Tensor::<axes![out, in]>::from_vec(w, &[32, 256])?;
    /// let x: Vec<f32> = (0..2 * 256).map(|i| (i % 5) as f32 - 2.0).collect();
    /// let x = Tensor::<axes![batch, in]>::from_vec(x, &[2, 256])?;
    /// let q = QWeight::quantize(&w, GgmlType::Q4_K)?;
    /// let p = q.clone().prepared()?;
    /// // The same weight, whatever the layout: equal rows, equal products up to rounding.
    /// assert_eq!(p.row_f32(5)?, q.row_f32(5)?);
    /// let (a, b) = (q.forward(&x)?.to_f32_vec(), p.forward(&x)?.to_f32_vec());
    /// assert!(a.iter().zip(&b).all(|(u, v)| (u - v).abs() <= 1e-4 * (1.0 + u.abs())));
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn prepared(self) -> Result<QWeight<O, I>> {
        let ctx = ExecContext::current();
        let want = ctx.run(0, |k| k.weight_layout(self.layout, self.rows, self.cols));
        if want == self.layout {
            return Ok(self);
        }
        let layout = match want.interleaved() {
            Some(f) if want.plain() == self.layout && f.fits(self.rows, self.cols) => f,
            _ => {
                return Err(FucinaError::InvalidArgument {
                    op: "QWeight::prepared",
                    msg: format!("no repacking of a {}x{} {:?} into {want:?}", self.rows, self.cols, self.layout),
                })
            }
        };
        // Cache-line aligned: the kernels stream it with 64-byte loads.
        let len = self.data.len();
        let (mut buf, off) = crate::storage::alloc::try_aligned_bytes("a repacked weight", len, 64)?;
        let w = self.mat();
        ctx.run(len, |k| k.weight_repack(&w, layout, &mut buf[off..off + len]));
        let data = SharedBytes::from_owner(std::sync::Arc::new(buf), off, len).ok_or_else(|| {
            FucinaError::InvalidArgument {
                op: "QWeight::prepared",
                msg: "the aligned range lies outside its buffer".into(),
            }
        })?;
        Ok(QWeight { layout: want, data, ..self })
    }

    /// Whether the bytes were repacked into a backend's layout ([`QWeight::prepared`]).
    pub fn is_repacked(&self) -> bool {
        Some(self.layout) != weight_format(self.ty)
    }

    /// Bytes this weight holds in memory of its own (a repacked copy), as opposed to bytes it
    /// borrows from a file mapping or a shared buffer: the stored bytes when repacked, else 0.
    pub fn resident_bytes(&self) -> usize {
        if self.is_repacked() {
            self.data.len()
        } else {
            0
        }
    }

    /// Quantizes an f32 tensor `[O, I]`.
    pub fn quantize(w: &Tensor<(O, I)>, ty: GgmlType) -> Result<QWeight<O, I>> {
        let (rows, cols) = (w.shape()[0], w.shape()[1]);
        QWeight::from_bytes(ty, rows, cols, quantize(ty, &w.to_f32_vec())?)
    }

    /// The storage format.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// Size of the `O` axis.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Size of the `I` axis.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The stored bytes, in the type's row-major layout unless [`QWeight::prepared`]
    /// repacked them ([`QWeight::is_repacked`]).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Row `r` decoded to f32.
    pub fn row_f32(&self, r: usize) -> Result<Vec<f32>> {
        if r >= self.rows {
            return Err(FucinaError::OutOfRange { axis: O::NAME.to_string(), index: r, size: self.rows });
        }
        let mut buf = Vec::new();
        let w = self.mat();
        super::dequantize(self.ty, w.gather_row(r, &mut buf), self.cols)
    }

    /// Gathers rows by index (an embedding lookup): `ids [X]` gives `[X, I]`; an id out of
    /// range is an error naming the `O` axis.
    pub fn lookup<X: Axis>(&self, ids: &[u32]) -> Result<Tensor<(X, I)>> {
        let mut out = Vec::with_capacity(ids.len() * self.cols);
        for &id in ids {
            out.extend(self.row_f32(id as usize)?);
        }
        Tensor::from_vec(out, &[ids.len(), self.cols])
    }

    /// The whole matrix decoded to f32.
    pub fn to_tensor(&self) -> Result<Tensor<(O, I)>> {
        let ctx = ExecContext::current();
        let mut wv = crate::storage::alloc::try_vec("a decoded weight", self.rows * self.cols, 0.0f32)?;
        let w = self.mat();
        ctx.run(wv.len(), |k| k.weight_decode(&w, &mut wv));
        Tensor::from_vec(wv, &[self.rows, self.cols])
    }

    /// The weight as the backend's product kernels see it.
    pub(crate) fn mat(&self) -> WeightMat<'_> {
        WeightMat { format: self.layout, rows: self.rows, cols: self.cols, data: &self.data }
    }

    /// `x W^T`: contracts the `I` axis of `x [B, I]` with the weight, giving `[B, O]`. The
    /// backend picks the path (bf16, float or integer: `fucina::backend::weights`).
    pub fn forward<B: Axis>(&self, x: &Tensor<(B, I)>) -> Result<Tensor<(B, O)>> {
        let (m, k) = (x.shape()[0], x.shape()[1]);
        if k != self.cols {
            return Err(FucinaError::ShapeMismatch { axis: I::NAME.to_string(), left: k, right: self.cols });
        }
        let xv = x.to_f32_vec();
        let mut y = vec![0.0f32; m * self.rows];
        ctx_run(&self.mat(), &xv, m, k, &mut y);
        Tensor::from_vec(y, &[m, self.rows])
    }

    /// `x W^T` for `x` with any axes, `I` among them, in any layout: the result has `x`'s
    /// other axes in order, then `O` (what [`crate::nn::Linear::forward`] gives for a float
    /// weight). Not recorded for autograd: the weight is frozen and no gradient flows back.
    pub fn apply<A>(&self, x: &Tensor<A>) -> Result<Tensor<Projected<A, O, I>>>
    where
        A: CanContract<(O, I), I>,
    {
        let names = A::names();
        let d = names.iter().position(|n| *n == I::NAME).ok_or_else(|| FucinaError::InvalidArgument {
            op: "QWeight::apply",
            msg: format!("no axis `{}`", I::NAME),
        })?;
        let k = x.shape()[d];
        if k != self.cols {
            return Err(FucinaError::ShapeMismatch { axis: I::NAME.to_string(), left: k, right: self.cols });
        }
        // The rows of `x` with `I` last (a copy only when `I` is not last already).
        let mut perm: Vec<usize> = (0..names.len()).filter(|&i| i != d).collect();
        perm.push(d);
        let xv = x.raw().with_layout(x.raw().layout().permuted(&perm))?.to_f32_vec();
        let m = xv.len().checked_div(k).unwrap_or(0);
        let len = m.checked_mul(self.rows).ok_or_else(|| FucinaError::InvalidArgument {
            op: "QWeight::apply",
            msg: format!("{m} rows x {} outputs overflow", self.rows),
        })?;
        // Every element is written by the product, so a pooled buffer's stale values never show.
        let ctx = ExecContext::current();
        let mut y = ctx.try_alloc("a projection", len)?;
        let w = self.mat();
        ctx_run(&w, &xv, m, k, &mut y);
        let mut shape: Vec<usize> = perm[..perm.len() - 1].iter().map(|&i| x.shape()[i]).collect();
        shape.push(self.rows);
        Tensor::from_raw(ctx.wrap_f32(y, &shape)?)
    }
}

/// Several weight products run together (the q, k and v projections of an attention block,
/// the gate and up projections of a feed-forward block, the experts of a mixture-of-experts
/// layer): each gives the same values, bit for bit, as its own [`QWeight::forward`], but the
/// backend may run the whole group as one parallel region
/// ([`crate::backend::Kernels::weight_matmul_group`]), and products that read the same input
/// tensor share its conversion (and its quantization, where their formats take the same).
/// Each [`push`](ProductGroup::push) returns a typed handle; [`run`](ProductGroup::run)
/// computes everything and [`ProductOutputs::take`] hands each result back with its axes.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::quant::{GgmlType, ProductGroup, QWeight};
/// axis!(seq, hidden, q_out, kv_out);
/// let wq = QWeight::<q_out, hidden>::quantize(&Tensor::<axes![q_out, hidden]>::randn(&[64, 256])?, GgmlType::Q4_K)?;
/// let wk = QWeight::<kv_out, hidden>::quantize(&Tensor::<axes![kv_out, hidden]>::randn(&[32, 256])?, GgmlType::Q4_K)?;
/// let x = Tensor::<axes![seq, hidden]>::randn(&[2, 256])?;
/// let mut group = ProductGroup::new();
/// let (hq, hk) = (group.push(&wq, &x)?, group.push(&wk, &x)?);
/// let mut out = group.run()?;
/// let (q, k): (Tensor<axes![seq, q_out]>, Tensor<axes![seq, kv_out]>) = (out.take(hq)?, out.take(hk)?);
/// assert_eq!(q.to_f32_vec(), wq.forward(&x)?.to_f32_vec());
/// assert_eq!(k.shape(), &[2, 32]);
/// # Ok::<(), fucina::error::FucinaError>(())
/// ```
#[derive(Default)]
pub struct ProductGroup<'a> {
    jobs: Vec<(WeightMat<'a>, usize, usize)>,
    /// Each distinct input tensor (by address; the borrow keeps it from being replaced) as
    /// f32: borrowed where it is a dense f32 tensor, else converted.
    inputs: Vec<(*const (), std::borrow::Cow<'a, [f32]>)>,
}

/// A product pushed into a [`ProductGroup`], to take from its [`ProductOutputs`] as a
/// `Tensor<A>`.
#[must_use = "a product's handle is how its result is taken"]
#[derive(Debug)]
pub struct Product<A> {
    index: usize,
    shape: [usize; 2],
    _axes: PhantomData<fn() -> A>,
}

/// The results of a [`ProductGroup`], taken once each by handle.
#[derive(Debug)]
pub struct ProductOutputs {
    ys: Vec<Option<Vec<f32>>>,
}

impl<'a> ProductGroup<'a> {
    /// An empty group.
    pub fn new() -> ProductGroup<'a> {
        ProductGroup::default()
    }

    /// Adds `x W^T` (`x [B, I]`, `W [O, I]`) to the group.
    pub fn push<B: Axis, O: Axis, I: Axis>(
        &mut self,
        w: &'a QWeight<O, I>,
        x: &'a Tensor<(B, I)>,
    ) -> Result<Product<(B, O)>> {
        let (m, k) = (x.shape()[0], x.shape()[1]);
        if k != w.cols {
            return Err(FucinaError::ShapeMismatch { axis: I::NAME.to_string(), left: k, right: w.cols });
        }
        m.checked_mul(w.rows).ok_or_else(|| FucinaError::InvalidArgument {
            op: "ProductGroup::push",
            msg: format!("a [{m}, {}] product overflows", w.rows),
        })?;
        let key = x as *const Tensor<(B, I)> as *const ();
        let input = match self.inputs.iter().position(|(p, _)| *p == key) {
            Some(i) => i,
            None => {
                let data = match x.raw().contiguous_slice::<f32>() {
                    Some(v) => std::borrow::Cow::Borrowed(v),
                    None => std::borrow::Cow::Owned(x.to_f32_vec()),
                };
                self.inputs.push((key, data));
                self.inputs.len() - 1
            }
        };
        self.jobs.push((w.mat(), m, input));
        Ok(Product { index: self.jobs.len() - 1, shape: [m, w.rows], _axes: PhantomData })
    }

    /// Runs every product (on the current context's backend).
    pub fn run(self) -> Result<ProductOutputs> {
        // Buffers from the pool (no zero fill, no fresh pages): the products write every element.
        let ctx = ExecContext::current();
        let mut ys = Vec::with_capacity(self.jobs.len());
        for (w, m, _) in &self.jobs {
            ys.push(ctx.try_alloc("a weight product", m * w.rows)?);
        }
        let mut jobs: Vec<WeightJob<'_>> = ys
            .iter_mut()
            .zip(&self.jobs)
            .map(|(y, &(w, m, input))| WeightJob { w, x: &self.inputs[input].1, m, y })
            .collect();
        let work: usize = jobs.iter().map(|j| j.m * j.w.rows * j.w.cols).sum();
        ctx.run(work, |kern| kern.weight_matmul_group(&mut jobs));
        drop(jobs);
        Ok(ProductOutputs { ys: ys.into_iter().map(Some).collect() })
    }
}

impl ProductOutputs {
    /// The result of product `p` (once; a handle from another group is an error unless its
    /// slot happens to hold a result of the same shape).
    pub fn take<A: crate::tensor::axes::Axes>(&mut self, p: Product<A>) -> Result<Tensor<A>> {
        let y = self.ys.get_mut(p.index).and_then(Option::take).ok_or_else(|| FucinaError::InvalidArgument {
            op: "ProductOutputs::take",
            msg: format!("no result for product {} (taken already, or from another group)", p.index),
        })?;
        if y.len() != p.shape[0] * p.shape[1] {
            return Err(FucinaError::InvalidArgument {
                op: "ProductOutputs::take",
                msg: format!("product {} is not a {:?} result", p.index, p.shape),
            });
        }
        Tensor::from_raw(ExecContext::current().wrap_f32(y, &p.shape)?)
    }
}

/// Runs the backend's weight product on the current context.
fn ctx_run(w: &WeightMat<'_>, x: &[f32], m: usize, k: usize, y: &mut [f32]) {
    let ctx = ExecContext::current();
    ctx.run(m * w.rows * k, |kern| kern.weight_matmul(w, x, m, y));
}

/// A linear layer whose weight is a [`QWeight`] (any ggml block format, or f32/f16/bf16
/// rows) and whose optional bias is a tensor: the inference-time counterpart of
/// [`crate::nn::Linear`], over any input layout. A `#[derive(Module)]` struct lists the
/// weight as a frozen weight (`weight`) and the bias as a parameter (`bias`), and saves and
/// loads both (`formats::gguf::ModuleGguf`).
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Bias, Linear};
/// use fucina::quant::{GgmlType, QLinear};
/// let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() })?;
/// let fc = Linear::<hidden, r#in>::init(&ctx, 64, 8, Bias::With)?;
/// let q = QLinear::quantize(&fc, GgmlType::Q8_0)?;
/// let x = Tensor::<axes![in, batch, seq]>::ones(&[64, 2, 3])?; // `in` first: any layout
/// let (a, b) = (fc.forward(&x)?, q.forward(&x)?);
/// assert_eq!(b.shape(), &[2, 3, 8]); // [batch, seq, hidden]
/// let err = a.to_f32_vec().iter().zip(b.to_f32_vec()).map(|(u, v)| (u - v).abs()).fold(0.0, f32::max);
/// assert!(err < 2e-2, "Q8_0 weights and activations: {err}");
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(crate::Module, Debug, Clone)]
pub struct QLinear<O: Axis + Send + Sync, I: Axis + Send + Sync> {
    /// `[O, I]`.
    pub weight: QWeight<O, I>,
    /// `[O]`, if any.
    pub bias: Option<Tensor<(O,)>>,
}

impl<O: Axis + Send + Sync, I: Axis + Send + Sync> QLinear<O, I> {
    /// A layer from its weight and bias.
    pub fn new(weight: QWeight<O, I>, bias: Option<Tensor<(O,)>>) -> QLinear<O, I> {
        QLinear { weight, bias }
    }

    /// `layer`'s weight encoded in `ty`, its bias kept as it is.
    pub fn quantize(layer: &crate::nn::Linear<O, I>, ty: GgmlType) -> Result<QLinear<O, I>> {
        Ok(QLinear { weight: QWeight::quantize(&layer.weight, ty)?, bias: layer.bias.clone() })
    }

    /// `x W^T + b` over the `I` axis of `x`: `x`'s other axes, then `O`.
    pub fn forward<A>(&self, x: &Tensor<A>) -> Result<Tensor<Projected<A, O, I>>>
    where
        A: CanContract<(O, I), I>,
        Projected<A, O, I>: BroadcastFrom<(O,)>,
    {
        let y = self.weight.apply(x)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

/// The product layout of `rows` x `cols` weights of type `ty` held in `len` bytes, or an
/// error naming what does not fit: a type with no kernel, a size that overflows, a byte
/// count that is not the shape's.
fn validate(ty: GgmlType, rows: usize, cols: usize, len: usize) -> Result<WeightFormat> {
    let bad = |msg: String| FucinaError::InvalidArgument { op: "QWeight", msg };
    let Some(layout) = weight_format(ty) else {
        return Err(bad(format!("{ty:?} has no matmul kernel (F32, F16, BF16, Q8_0, Q4_0 and Q2_K..Q6_K do)")));
    };
    let need = ty.bytes_for(cols)?.checked_mul(rows).ok_or_else(|| bad(format!("{rows}x{cols} {ty:?} overflows")))?;
    if len != need {
        return Err(bad(format!("{rows}x{cols} {ty:?} takes {need} bytes, got {len}")));
    }
    Ok(layout)
}

/// The product format of a ggml type, if it has one.
pub(crate) fn weight_format(ty: GgmlType) -> Option<WeightFormat> {
    Some(match ty {
        GgmlType::F32 => WeightFormat::Float(FloatRow::F32),
        GgmlType::F16 => WeightFormat::Float(FloatRow::F16),
        GgmlType::BF16 => WeightFormat::Float(FloatRow::BF16),
        GgmlType::Q8_0 => WeightFormat::Q8_0,
        GgmlType::Q4_0 => WeightFormat::Q4_0,
        GgmlType::Q2_K => WeightFormat::K(KFormat::Q2K),
        GgmlType::Q3_K => WeightFormat::K(KFormat::Q3K),
        GgmlType::Q4_K => WeightFormat::K(KFormat::Q4K),
        GgmlType::Q5_K => WeightFormat::K(KFormat::Q5K),
        GgmlType::Q6_K => WeightFormat::K(KFormat::Q6K),
        _ => return None,
    })
}

/// A quantized (or half-precision) matrix is a module's frozen weight: it has no trainable
/// parameters and is visited by name through [`crate::nn::Module::visit_frozen`], so a
/// `#[derive(Module)]` struct lists its matrices with its tensors.
impl<O: Axis, I: Axis> crate::nn::Module for QWeight<O, I> {
    fn visit_params(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &crate::tensor::RawTensor)) {}
    fn visit_params_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, crate::nn::ParamMut<'_>)) {}
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn crate::nn::FrozenWeight)) {
        f(prefix, self)
    }
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn crate::nn::FrozenWeight)) {
        f(prefix, self)
    }
}

impl<O: Axis, I: Axis> crate::nn::FrozenWeight for QWeight<O, I> {
    fn format_name(&self) -> String {
        format!("{:?}", self.ty)
    }
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
    fn bytes(&self) -> usize {
        self.data.len()
    }
    fn stored_bytes(&self) -> Option<&[u8]> {
        (!self.is_repacked()).then_some(&self.data[..])
    }
    fn check_replacement(&self, format: &str, rows: usize, cols: usize, len: usize) -> Result<()> {
        if (rows, cols) != (self.rows, self.cols) {
            return Err(FucinaError::InvalidArgument {
                op: "QWeight::replace",
                msg: format!("a {rows}x{cols} weight for a {}x{} one", self.rows, self.cols),
            });
        }
        validate(GgmlType::from_name(format)?, rows, cols, len).map(|_| ())
    }
    fn replace(&mut self, format: &str, rows: usize, cols: usize, bytes: SharedBytes) -> Result<()> {
        self.check_replacement(format, rows, cols, bytes.len())?;
        *self = QWeight::from_shared(GgmlType::from_name(format)?, rows, cols, bytes)?;
        Ok(())
    }
}
