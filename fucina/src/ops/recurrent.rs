//! Sequence mixers that carry state from one call to the next (Qwen3.5's Gated DeltaNet
//! layers): a causal depthwise convolution continuing from its last inputs
//! ([`causal_conv1d`], [`ConvState`]), the gated delta rule continuing from its per-head
//! state ([`gated_delta_rule`], [`DeltaState`]), and the L2 norm their queries and keys take
//! ([`Tensor::l2_norm`]). The kernels sit behind the backend seam
//! ([`crate::backend::delta`] holds their specifications). The convolution and the delta rule
//! are inference ops: they are not recorded for autograd (a tracked input is refused).

use super::contiguous_f32;
use crate::axis::seq;
use crate::backend::delta::{CausalConv, DeltaRule};
pub use crate::backend::delta::{DeltaForm, HeadMap};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::alloc;
use crate::tensor::axes::{Axes, Axis, HasAxes};
use crate::tensor::Tensor;

/// The last `taps - 1` inputs of a causal depthwise convolution, `[taps - 1, channels]`
/// (oldest first), zero at the start of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvState {
    data: Vec<f32>,
    taps: usize,
    channels: usize,
}

impl ConvState {
    /// A zero state for a `taps`-tap convolution over `channels` channels (the memory is
    /// checked and taken up front).
    pub fn new(taps: usize, channels: usize) -> Result<ConvState> {
        let n = taps.checked_sub(1).and_then(|k| k.checked_mul(channels)).ok_or(FucinaError::InvalidArgument {
            op: "ConvState",
            msg: format!("a {taps}-tap convolution over {channels} channels"),
        })?;
        Ok(ConvState { data: alloc::try_vec("a convolution state", n, 0.0)?, taps, channels })
    }

    /// Back to zeros (a new sequence).
    pub fn reset(&mut self) {
        self.data.fill(0.0);
    }

    /// The stored inputs, `[taps - 1, channels]`.
    pub fn values(&self) -> &[f32] {
        &self.data
    }
}

/// The per-head states of a gated delta rule, `[heads, dk, dv]`, zero at the start of a
/// sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaState {
    data: Vec<f32>,
    heads: usize,
    dk: usize,
    dv: usize,
}

impl DeltaState {
    /// A zero state for `heads` value heads with keys `dk` and values `dv` wide (the memory
    /// is checked and taken up front).
    pub fn new(heads: usize, dk: usize, dv: usize) -> Result<DeltaState> {
        let n = heads
            .checked_mul(dk)
            .and_then(|x| x.checked_mul(dv))
            .ok_or(FucinaError::InvalidArgument { op: "DeltaState", msg: format!("{heads} heads of {dk} x {dv}") })?;
        Ok(DeltaState { data: alloc::try_vec("a delta-rule state", n, 0.0)?, heads, dk, dv })
    }

    /// Back to zeros (a new sequence).
    pub fn reset(&mut self) {
        self.data.fill(0.0);
    }

    /// The states, `[heads, dk, dv]`.
    pub fn values(&self) -> &[f32] {
        &self.data
    }

    /// A state holding `values` (`[heads, dk, dv]`, checked).
    pub fn from_values(heads: usize, dk: usize, dv: usize, values: Vec<f32>) -> Result<DeltaState> {
        let mut s = DeltaState::new(heads, dk, dv)?;
        if values.len() != s.data.len() {
            return Err(FucinaError::InvalidArgument {
                op: "DeltaState",
                msg: format!("{} values for {heads} heads of {dk} x {dv}", values.len()),
            });
        }
        s.data = values;
        Ok(s)
    }
}

fn untracked(op: &'static str, ts: &[bool]) -> Result<()> {
    if ts.iter().any(|&t| t) {
        return Err(FucinaError::InvalidArgument {
            op,
            msg: "an inference op: its inputs must not require gradients".into(),
        });
    }
    Ok(())
}

/// A causal depthwise convolution of `x [seq, C]` with `w [C, K]` (`K` taps per channel)
/// that continues from `state`: position `t` sees the `K - 1` inputs before it, taken from
/// the state where they precede this call; the state then holds this call's last inputs.
/// Over a whole sequence from a zero state this is PyTorch's `conv1d(x, w, padding=K-1,
/// groups=C)[..seq]`; split into any pieces, it gives the same outputs.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::ops::{causal_conv1d, ConvState};
/// axis!(ch, tap);
/// let w = Tensor::<axes![ch, tap]>::from_vec(vec![1.0, 10.0], &[1, 2])?;
/// let mut st = ConvState::new(2, 1)?;
/// let a = causal_conv1d(&Tensor::<axes![seq, ch]>::from_vec(vec![3.0], &[1, 1])?, &w, &mut st)?;
/// let b = causal_conv1d(&Tensor::<axes![seq, ch]>::from_vec(vec![4.0], &[1, 1])?, &w, &mut st)?;
/// assert_eq!((a.to_f32_vec(), b.to_f32_vec()), (vec![30.0], vec![43.0]));
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn causal_conv1d<C: Axis, K: Axis>(
    x: &Tensor<(seq, C)>,
    w: &Tensor<(C, K)>,
    state: &mut ConvState,
) -> Result<Tensor<(seq, C)>> {
    untracked("causal_conv1d", &[x.is_tracked(), w.is_tracked()])?;
    let (xs, ws) = (x.shape(), w.shape());
    let p = CausalConv { s: xs[0], ch: xs[1], taps: ws[1] };
    if ws[0] != p.ch || state.channels != p.ch || state.taps != p.taps {
        return Err(FucinaError::InvalidArgument {
            op: "causal_conv1d",
            msg: format!(
                "input of {} channels, weight [{}, {}], state of {} taps over {} channels",
                p.ch, ws[0], ws[1], state.taps, state.channels
            ),
        });
    }
    let ctx = ExecContext::current();
    let xd = contiguous_f32(&ctx, x.raw(), "causal_conv1d")?;
    let wd = contiguous_f32(&ctx, w.raw(), "causal_conv1d")?;
    let mut out = ctx.alloc(p.s * p.ch);
    p.check(&xd, &wd, &state.data, &out)?;
    let st = &mut state.data;
    ctx.run(p.s * p.ch * p.taps, |k| k.causal_conv1d(&p, &xd, &wd, st, &mut out));
    Tensor::from_raw(ctx.wrap_f32(out, &[p.s, p.ch])?)
}

/// How [`gated_delta_rule`] reads its heads and which form it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaOptions {
    /// Factor on the queries (`1 / sqrt(dk)` in Qwen3.5).
    pub scale: f32,
    /// Which key head each value head reads.
    pub map: HeadMap,
    /// Recurrent, chunked, or the backend's choice.
    pub form: DeltaForm,
}

/// The gated delta rule (Gated DeltaNet's sequence mixer) continuing from `state`: for each
/// value head, position by position, `S = exp(g) S`, `S += k (beta (v - S^T k))^T`, and the
/// output is `scale S^T q`. Queries and keys `[seq, KH, DK]` (one key head serves `VH / KH`
/// value heads, as `opts.map` says), values `[seq, VH, DV]`, log decays `g` and update
/// strengths `beta` `[seq, VH]`; returns `[seq, VH, DV]`. The recurrent and chunked forms
/// compute the same function (to rounding); `DeltaForm::Auto` lets the backend choose.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::ops::{gated_delta_rule, DeltaForm, DeltaOptions, DeltaState, HeadMap};
/// axis!(kh, vh, dk, dv);
/// let q = Tensor::<(seq, kh, dk)>::from_vec(vec![1.0, 1.0], &[2, 1, 1])?;
/// let v = Tensor::<(seq, vh, dv)>::from_vec(vec![3.0, 5.0], &[2, 1, 1])?;
/// let zero = Tensor::<(seq, vh)>::from_vec(vec![0.0, 0.0], &[2, 1])?;
/// let one = Tensor::<(seq, vh)>::from_vec(vec![1.0, 1.0], &[2, 1])?;
/// let mut st = DeltaState::new(1, 1, 1)?;
/// let opts = DeltaOptions { scale: 1.0, map: HeadMap::Tiled, form: DeltaForm::Auto };
/// let o = gated_delta_rule(&q, &q, &v, &zero, &one, opts, &mut st)?;
/// assert_eq!((o.to_f32_vec(), st.values().to_vec()), (vec![3.0, 5.0], vec![5.0]));
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn gated_delta_rule<KH: Axis, VH: Axis, DK: Axis, DV: Axis>(
    q: &Tensor<(seq, KH, DK)>,
    k: &Tensor<(seq, KH, DK)>,
    v: &Tensor<(seq, VH, DV)>,
    g: &Tensor<(seq, VH)>,
    beta: &Tensor<(seq, VH)>,
    opts: DeltaOptions,
    state: &mut DeltaState,
) -> Result<Tensor<(seq, VH, DV)>> {
    let tracked = q.is_tracked() || k.is_tracked() || v.is_tracked() || g.is_tracked() || beta.is_tracked();
    untracked("gated_delta_rule", &[tracked])?;
    let (qs, vs) = (q.shape(), v.shape());
    let (s_, kh, vh, dk, dv) = (qs[0], qs[1], vs[1], qs[2], vs[2]);
    let sizes_agree = k.shape() == qs
        && vs[0] == s_
        && g.shape() == [s_, vh]
        && beta.shape() == [s_, vh]
        && (state.heads, state.dk, state.dv) == (vh, dk, dv);
    if !sizes_agree {
        return Err(FucinaError::InvalidArgument {
            op: "gated_delta_rule",
            msg: format!(
                "queries {qs:?}, keys {:?}, values {vs:?}, decays {:?}, strengths {:?}, state of {} heads {} x {}",
                k.shape(),
                g.shape(),
                beta.shape(),
                state.heads,
                state.dk,
                state.dv
            ),
        });
    }
    let ctx = ExecContext::current();
    let name = "gated_delta_rule";
    let (qd, kd, vd) = (
        contiguous_f32(&ctx, q.raw(), name)?,
        contiguous_f32(&ctx, k.raw(), name)?,
        contiguous_f32(&ctx, v.raw(), name)?,
    );
    let (gd, bd) = (contiguous_f32(&ctx, g.raw(), name)?, contiguous_f32(&ctx, beta.raw(), name)?);
    let p = DeltaRule {
        s: s_,
        kh,
        vh,
        dk,
        dv,
        scale: opts.scale,
        map: opts.map,
        q: &qd,
        k: &kd,
        v: &vd,
        g: &gd,
        beta: &bd,
    };
    let mut out = ctx.alloc(p.s * p.vh * p.dv);
    p.check(&state.data, &out)?;
    let st = &mut state.data;
    let form = opts.form;
    ctx.run(p.s * p.vh * p.dk * p.dv * 4, |kern| kern.gated_delta_rule(&p, form, st, &mut out));
    Tensor::from_raw(ctx.wrap_f32(out, &[p.s, p.vh, p.dv])?)
}

impl<A: Axes> Tensor<A> {
    /// `x / sqrt(sum(x^2) + eps)` along axis `X` (the Gated DeltaNet's query and key norm);
    /// differentiable.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![seq, hidden]>::from_vec(vec![3.0, 4.0], &[1, 2])?;
    /// let y = x.l2_norm::<hidden>(0.0)?.to_f32_vec();
    /// assert!((y[0] - 0.6).abs() < 1e-6 && (y[1] - 0.8).abs() < 1e-6);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn l2_norm<X: Axis + Send + Sync>(&self, eps: f32) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        // sqrt(sum + eps) = sqrt(n) sqrt(mean + eps / n): an RMS norm, rescaled.
        let n = self.size::<X>().max(1) as f32;
        self.rms_norm::<X>(None, eps / n)?.scale(1.0 / n.sqrt())
    }
}
