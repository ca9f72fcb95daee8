//! Tensors: an untyped [`RawTensor`] (storage + layout) and the axis-typed [`Tensor<A>`].

pub mod axes;
mod layout;

pub use layout::{contiguous_strides, Layout};

use crate::dtype::{DType, Element};
use crate::error::{FucinaError, Result};
use crate::storage::{Buffer, BufferElement, Storage};
use axes::{Axes, Axis, HasAxes};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// The autograd node that produced a tensor, opaque to this layer (the `autograd` layer owns it).
pub type GradNode = Arc<dyn std::any::Any + Send + Sync>;

/// A tensor without axis names: shared storage plus a strided view of it.
#[derive(Clone)]
pub struct RawTensor {
    storage: Arc<Storage>,
    layout: Layout,
    node: Option<GradNode>,
}

impl RawTensor {
    /// A tensor over a whole buffer with a contiguous layout.
    pub fn from_buffer(buf: Buffer, shape: &[usize]) -> Result<RawTensor> {
        let n: usize = shape.iter().product();
        if n != buf.len() {
            return Err(FucinaError::ElementCount { shape: shape.to_vec(), expected: n, got: buf.len() });
        }
        Ok(RawTensor { storage: Arc::new(Storage::new(buf)), layout: Layout::contiguous(shape), node: None })
    }

    /// A tensor over shared storage with the given layout, checked to stay in bounds.
    pub fn from_storage(storage: Arc<Storage>, layout: Layout) -> Result<RawTensor> {
        if layout.storage_extent() > storage.buffer().len() {
            return Err(FucinaError::InvalidView(format!(
                "view reaches element {} of a storage of {}",
                layout.storage_extent(),
                storage.buffer().len()
            )));
        }
        Ok(RawTensor { storage, layout, node: None })
    }

    /// The autograd node that produced this tensor, if it is tracked.
    pub fn node(&self) -> Option<&GradNode> {
        self.node.as_ref()
    }

    /// The same tensor, tracked by `node`.
    pub fn with_node(mut self, node: GradNode) -> RawTensor {
        self.node = Some(node);
        self
    }

    /// The same values, no longer tracked by autograd.
    pub fn detached(&self) -> RawTensor {
        RawTensor { storage: self.storage.clone(), layout: self.layout.clone(), node: None }
    }

    /// The shared storage.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The view.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Sizes, one per axis.
    pub fn shape(&self) -> &[usize] {
        self.layout.shape()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// Whether the view is dense row-major.
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// The same storage under another layout (checked); the result is untracked.
    pub fn with_layout(&self, layout: Layout) -> Result<RawTensor> {
        RawTensor::from_storage(self.storage.clone(), layout)
    }

    /// Calls `f(storage_index)` for every element in row-major order of the view.
    pub fn for_each_index(&self, f: impl FnMut(usize)) {
        walk(self.layout.shape(), self.layout.strides(), self.layout.offset(), f);
    }

    /// Calls `f(start, len)` for every run of the view's elements that lie next to each
    /// other in storage, in row-major order of the view: whole rows of the last axis when
    /// its stride is 1 (a permuted or narrowed view of row-major data), else single
    /// elements.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// // [seq 2, head 3, head_dim 2] row-major, viewed as [head, seq, head_dim]: rows stay whole.
    /// let x = Tensor::<axes![seq, head, head_dim]>::from_vec((0..12).map(|v| v as f32).collect(), &[2, 3, 2])?;
    /// let t = x.permute::<axes![head, seq, head_dim]>()?;
    /// let mut runs = Vec::new();
    /// t.raw().for_each_run(|start, len| runs.push((start, len)));
    /// assert_eq!(runs, [(0, 2), (6, 2), (2, 2), (8, 2), (4, 2), (10, 2)]);
    /// assert_eq!(t.to_f32_vec(), [0.0, 1.0, 6.0, 7.0, 2.0, 3.0, 8.0, 9.0, 4.0, 5.0, 10.0, 11.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn for_each_run(&self, mut f: impl FnMut(usize, usize)) {
        let (shape, strides) = (self.layout.shape(), self.layout.strides());
        match (shape.last(), strides.last()) {
            (Some(&len), Some(&1)) if len > 0 => {
                let outer = shape.len() - 1;
                walk(&shape[..outer], &strides[..outer], self.layout.offset(), |pos| f(pos, len));
            }
            _ => self.for_each_index(|i| f(i, 1)),
        }
    }

    /// All elements in row-major order, converted to f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let buf = self.storage.buffer();
        if self.is_contiguous() {
            let r = self.layout.offset()..self.layout.offset() + self.numel();
            return match buf {
                Buffer::F32(v) => v[r].to_vec(),
                Buffer::F16(v) => v[r].iter().map(|x| x.to_f32()).collect(),
                Buffer::BF16(v) => v[r].iter().map(|x| x.to_f32()).collect(),
                Buffer::U32(v) => v[r].iter().map(|x| *x as f32).collect(),
            };
        }
        let mut out = Vec::with_capacity(self.numel());
        match buf {
            Buffer::F32(v) => self.for_each_run(|i, n| out.extend_from_slice(&v[i..i + n])),
            Buffer::F16(v) => self.for_each_run(|i, n| out.extend(v[i..i + n].iter().map(|x| x.to_f32()))),
            other => self.for_each_index(|i| out.push(other.get_f32(i))),
        }
        out
    }

    /// All elements in row-major order as `T`, or an error if the dtype differs.
    pub fn to_vec<T: BufferElement>(&self) -> Result<Vec<T>> {
        let slice = T::slice(self.storage.buffer()).ok_or(FucinaError::DTypeMismatch {
            op: "to_vec",
            left: self.dtype(),
            right: T::DTYPE,
        })?;
        let mut out = Vec::with_capacity(self.numel());
        self.for_each_run(|i, n| out.extend_from_slice(&slice[i..i + n]));
        Ok(out)
    }

    /// The contiguous slice of the view, when the view is contiguous and of type `T`.
    pub fn contiguous_slice<T: BufferElement>(&self) -> Option<&[T]> {
        if !self.is_contiguous() {
            return None;
        }
        let s = T::slice(self.storage.buffer())?;
        let o = self.layout.offset();
        Some(&s[o..o + self.numel()])
    }
}

/// Calls `f(position)` for every index of `shape` in row-major order, `position` being its
/// storage index under `strides` from `offset` (once, at `offset`, for an empty shape).
fn walk(shape: &[usize], strides: &[usize], offset: usize, mut f: impl FnMut(usize)) {
    let n: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    let mut pos = offset;
    for _ in 0..n {
        f(pos);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            pos += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            pos -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

impl fmt::Debug for RawTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawTensor({:?}, {:?})", self.shape(), self.dtype())
    }
}

/// A tensor whose axes are the type `A`, e.g. `Tensor<axes![batch, in]>`.
pub struct Tensor<A: Axes> {
    raw: RawTensor,
    _axes: PhantomData<fn() -> A>,
}

impl<A: Axes> Clone for Tensor<A> {
    fn clone(&self) -> Self {
        Tensor { raw: self.raw.clone(), _axes: PhantomData }
    }
}

/// Checks that the runtime axis names of `A` are distinct.
fn check_axes<A: Axes>() -> Result<()> {
    let names = A::names();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(FucinaError::DuplicateAxis(n));
        }
    }
    Ok(())
}

impl<A: Axes> Tensor<A> {
    /// Types an untyped tensor, checking the rank and that axis names are distinct.
    pub fn from_raw(raw: RawTensor) -> Result<Tensor<A>> {
        check_axes::<A>()?;
        let expected = A::names().len();
        if raw.shape().len() != expected {
            return Err(FucinaError::RankMismatch { axes: A::names(), expected, got: raw.shape().len() });
        }
        Ok(Tensor { raw, _axes: PhantomData })
    }

    /// A tensor from a vector in row-major order.
    pub fn from_vec<T: BufferElement>(data: Vec<T>, shape: &[usize]) -> Result<Tensor<A>> {
        Self::check_rank(shape)?;
        Tensor::from_raw(RawTensor::from_buffer(T::into_buffer(data), shape)?)
    }

    /// A tensor copied from a slice in row-major order.
    pub fn from_slice<T: BufferElement>(data: &[T], shape: &[usize]) -> Result<Tensor<A>> {
        Self::from_vec(data.to_vec(), shape)
    }

    /// A tensor filled with `value`, in `dtype`.
    pub fn full(value: f32, shape: &[usize], dtype: DType) -> Result<Tensor<A>> {
        Self::check_rank(shape)?;
        let n: usize = shape.iter().product();
        let buf = match dtype {
            DType::F32 => Buffer::F32(vec![value; n]),
            DType::F16 => Buffer::F16(vec![half::f16::from_f32(value); n]),
            DType::BF16 => Buffer::BF16(vec![half::bf16::from_f32(value); n]),
            DType::U32 => Buffer::U32(vec![value as u32; n]),
        };
        Tensor::from_raw(RawTensor::from_buffer(buf, shape)?)
    }

    /// An f32 tensor of zeros.
    pub fn zeros(shape: &[usize]) -> Result<Tensor<A>> {
        Self::full(0.0, shape, DType::F32)
    }

    /// An f32 tensor of ones.
    pub fn ones(shape: &[usize]) -> Result<Tensor<A>> {
        Self::full(1.0, shape, DType::F32)
    }

    fn check_rank(shape: &[usize]) -> Result<()> {
        let expected = A::names().len();
        if shape.len() != expected {
            return Err(FucinaError::RankMismatch { axes: A::names(), expected, got: shape.len() });
        }
        Ok(())
    }

    /// The untyped tensor.
    pub fn raw(&self) -> &RawTensor {
        &self.raw
    }

    /// The untyped tensor, mutably (the axis type cannot change through it).
    pub fn raw_mut(&mut self) -> &mut RawTensor {
        &mut self.raw
    }

    /// Drops the axis type.
    pub fn into_raw(self) -> RawTensor {
        self.raw
    }

    /// The axis names in order.
    pub fn axis_names(&self) -> Vec<&'static str> {
        A::names()
    }

    /// Sizes in axis order.
    pub fn shape(&self) -> &[usize] {
        self.raw.shape()
    }

    /// The position of axis `X` among this tensor's axes.
    pub fn axis_index<X: Axis>(&self) -> usize
    where
        A: HasAxes<X>,
    {
        // The bound proves X is one of A's axes, so the search succeeds.
        A::names().iter().position(|n| *n == X::NAME).unwrap_or(0)
    }

    /// The size of axis `X`.
    pub fn size<X: Axis>(&self) -> usize
    where
        A: HasAxes<X>,
    {
        self.shape()[self.axis_index::<X>()]
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.raw.numel()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.raw.dtype()
    }

    /// Whether the view is dense row-major.
    pub fn is_contiguous(&self) -> bool {
        self.raw.is_contiguous()
    }

    /// Elements in row-major order as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.raw.to_f32_vec()
    }

    /// Elements in row-major order as `T` (which must be the dtype).
    pub fn to_vec<T: BufferElement>(&self) -> Result<Vec<T>> {
        self.raw.to_vec()
    }

    /// The single element of a tensor with one element, as f32.
    pub fn item(&self) -> Result<f32> {
        if self.numel() != 1 {
            return Err(FucinaError::InvalidArgument {
                op: "item",
                msg: format!("tensor has {} elements, not 1", self.numel()),
            });
        }
        Ok(self.to_f32_vec()[0])
    }

    /// Re-types the same data with other axis names of the same rank (an explicit, unchecked relabel).
    pub fn relabel<B: Axes>(self) -> Result<Tensor<B>> {
        Tensor::from_raw(self.raw)
    }
}

impl<A: Axes> fmt::Debug for Tensor<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = A::names();
        write!(f, "Tensor[")?;
        for (i, (n, s)) in names.iter().zip(self.shape()).enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{n}={s}")?;
        }
        write!(f, "; {:?}]", self.dtype())
    }
}

/// Shorthand for element types that can build tensors.
pub trait TensorElement: Element + BufferElement {}
impl<T: Element + BufferElement> TensorElement for T {}
