//! Ops: eager functions on tensors. Each validates sizes, then dispatches to the
//! current context's kernels. Axis-set checks were already done by the compiler.

mod attention;
mod attention_q8;
mod batch_norm;
mod broadcast;
mod compare;
mod conv;
mod conv2d;
mod elementwise;
pub(crate) mod grad;
mod index;
mod matmul;
mod order;
mod random;
mod recurrent;
mod reduce;
mod relative;
mod rope;
mod shape;
mod signal;
mod surgery;
mod triangle;

pub use attention::{attention, Mask};
pub use attention_q8::{attention_q8_0, Q8Rows};
pub use batch_norm::{BatchStats, Moments};
pub use conv::{Conv1dOptions, Padding};
pub use conv2d::{Conv2dOptions, PoolOptions};
pub use grad::add_same;
pub use recurrent::{causal_conv1d, gated_delta_rule, ConvState, DeltaForm, DeltaOptions, DeltaState, HeadMap};
pub use rope::RopeStyle;
pub use signal::{
    hann_window, mel_filter_bank, power_spectrogram, Centering, MelBank, MelNorm, MelScale, Stft, WindowKind, MAX_FFT,
};
pub use surgery::{MergedAxes, SplitAxes};

/// The elements of `t` as a contiguous f32 vector, gathered with the context's copy kernel.
pub fn to_f32_contiguous(ctx: &ExecContext, t: &RawTensor) -> Result<Vec<f32>> {
    Ok(match contiguous_f32(ctx, t, "to_f32_contiguous")? {
        F32Data::Borrowed(s) => s.to_vec(),
        F32Data::Owned(v) => v,
    })
}

/// `x [m, k]` times `w [n, k]` transposed, as `[m, n]` (names-free, for layers above the DSL).
pub fn contract_positional(ctx: &ExecContext, x: &RawTensor, w: &RawTensor) -> Result<RawTensor> {
    matmul::contract_raw(ctx, x, &["m", "k"], w, &["n", "k"], &["k"], &["m", "n"])
}

/// Casts a tensor to `dtype` (a contiguous copy unless it already has that dtype).
pub fn cast_to(t: &RawTensor, dtype: DType) -> Result<RawTensor> {
    elementwise::cast_raw(t, dtype)
}
pub(crate) use reduce::reduce_raw;

use crate::backend::{FloatSlice, Strided};
use crate::dtype::DType;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::Buffer;
use crate::tensor::{contiguous_strides, Layout, RawTensor};
use half::slice::HalfFloatSliceExt;

/// A float view of a tensor's storage, with the error for integer dtypes.
pub(crate) fn float_slice<'a>(t: &'a RawTensor, op: &'static str) -> Result<FloatSlice<'a>> {
    match t.storage().buffer() {
        Buffer::F32(v) => Ok(FloatSlice::F32(v)),
        Buffer::F16(v) => Ok(FloatSlice::F16(v)),
        Buffer::BF16(v) => Ok(FloatSlice::BF16(v)),
        Buffer::U32(_) => Err(FucinaError::UnsupportedDType { op, dtype: DType::U32 }),
    }
}

/// The float elements of a contiguous tensor, as a slice starting at its first element.
pub(crate) fn float_slice_contiguous<'a>(t: &'a RawTensor, op: &'static str) -> Result<FloatSlice<'a>> {
    if !t.is_contiguous() {
        return Err(FucinaError::InvalidView(format!("{op} needs a contiguous tensor")));
    }
    let r = t.layout().offset()..t.layout().offset() + t.numel();
    Ok(match float_slice(t, op)? {
        FloatSlice::F32(s) => FloatSlice::F32(&s[r]),
        FloatSlice::F16(s) => FloatSlice::F16(&s[r]),
        FloatSlice::BF16(s) => FloatSlice::BF16(&s[r]),
    })
}

/// f32 data of a tensor: borrowed from the storage, or converted/gathered.
pub(crate) enum F32Data<'a> {
    Borrowed(&'a [f32]),
    Owned(Vec<f32>),
}

impl std::ops::Deref for F32Data<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            F32Data::Borrowed(s) => s,
            F32Data::Owned(v) => v,
        }
    }
}

/// The elements of `t` as contiguous f32 in row-major view order.
pub(crate) fn contiguous_f32<'a>(ctx: &ExecContext, t: &'a RawTensor, op: &'static str) -> Result<F32Data<'a>> {
    if let Some(s) = t.contiguous_slice::<f32>() {
        return Ok(F32Data::Borrowed(s));
    }
    let src = float_slice(t, op)?;
    let mut out = ctx.alloc(t.numel());
    let l = t.layout();
    ctx.run(t.numel(), |k| k.copy_strided(src, l.offset(), l.shape(), l.strides(), &mut out));
    Ok(F32Data::Owned(out))
}

/// A strided f32 view of `t`: the storage itself when f32, else a converted contiguous copy.
pub(crate) struct F32View<'a> {
    data: F32Data<'a>,
    offset: usize,
    strides: Vec<usize>,
}

impl<'a> F32View<'a> {
    pub(crate) fn new(ctx: &ExecContext, t: &'a RawTensor, op: &'static str) -> Result<F32View<'a>> {
        if let Buffer::F32(v) = t.storage().buffer() {
            return Ok(F32View {
                data: F32Data::Borrowed(v),
                offset: t.layout().offset(),
                strides: t.layout().strides().to_vec(),
            });
        }
        let data = contiguous_f32(ctx, t, op)?;
        Ok(F32View { data, offset: 0, strides: contiguous_strides(t.shape()) })
    }

    /// The view over an output shape, with `strides` already mapped to it.
    pub(crate) fn strided<'s>(&'s self, strides: &'s [usize]) -> Strided<'s> {
        Strided { data: &self.data, offset: self.offset, strides }
    }

    pub(crate) fn strides(&self) -> &[usize] {
        &self.strides
    }
}

/// Wraps f32 results as a tensor of `dtype` (f32 stays pooled, half types are converted).
pub(crate) fn finish(ctx: &ExecContext, data: Vec<f32>, shape: &[usize], dtype: DType) -> Result<RawTensor> {
    match dtype {
        DType::F32 => ctx.wrap_f32(data, shape),
        DType::F16 => {
            let mut v = vec![half::f16::ZERO; data.len()];
            v.convert_from_f32_slice(&data);
            RawTensor::from_buffer(Buffer::F16(v), shape)
        }
        DType::BF16 => {
            let mut v = vec![half::bf16::ZERO; data.len()];
            v.convert_from_f32_slice(&data);
            RawTensor::from_buffer(Buffer::BF16(v), shape)
        }
        DType::U32 => Err(FucinaError::UnsupportedDType { op: "float result", dtype }),
    }
}

/// Position of an axis name (the type system guarantees presence).
pub(crate) fn pos(names: &[&'static str], name: &str) -> usize {
    names.iter().position(|n| *n == name).unwrap_or(0)
}

/// The permutation that moves axes so `order` (names) is the new order.
pub(crate) fn perm_to(names: &[&'static str], order: &[&'static str]) -> Vec<usize> {
    order.iter().map(|n| pos(names, n)).collect()
}

/// Inverse of a permutation.
pub(crate) fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, p) in perm.iter().enumerate() {
        inv[*p] = i;
    }
    inv
}

/// A contiguous result computed in the axis order `perm` of `shape`, viewed back in the original order.
pub(crate) fn unpermute(t: RawTensor, perm: &[usize]) -> Result<RawTensor> {
    let inv = inverse(perm);
    let l: Layout = t.layout().permuted(&inv);
    t.with_layout(l)
}
