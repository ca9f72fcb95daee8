//! Contraction by axis name (`einsum!`, `dot`): batched GEMM with f32 accumulation.
//!
//! Axes are classified as batch (in both operands, kept), M (left only), N (right
//! only) and K (contracted). Operands are viewed as `[batch, M, K]` and `[batch, K, N]`
//! without copying whenever each group's axes can be merged into one stride.

use super::{float_slice, perm_to, pos};
use crate::backend::{Gemm, MatRef};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, AxisSet, CanContract};
use crate::tensor::{Layout, RawTensor, Tensor};

/// The single stride of a group of axes, if they can be walked as one.
fn group_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let dims: Vec<usize> = (0..shape.len()).filter(|d| shape[*d] != 1).collect();
    match dims.last() {
        None => Some(0),
        Some(&last) => {
            for w in dims.windows(2) {
                if strides[w[0]] != strides[w[1]] * shape[w[1]] {
                    return None;
                }
            }
            Some(strides[last])
        }
    }
}

/// An operand permuted to `[batch.., rows.., cols..]` and its three group strides.
struct Operand {
    raw: RawTensor,
    bs: usize,
    rs: usize,
    cs: usize,
}

fn operand(t: &RawTensor, names: &[&'static str], groups: [&[&'static str]; 3]) -> Result<Operand> {
    let order: Vec<&'static str> = groups.iter().flat_map(|g| g.iter().copied()).collect();
    let perm = perm_to(names, &order);
    let l = t.layout().permuted(&perm);
    let (n0, n1) = (groups[0].len(), groups[0].len() + groups[1].len());
    let strides_of = |l: &Layout| {
        let (sh, st) = (l.shape(), l.strides());
        (group_stride(&sh[..n0], &st[..n0]), group_stride(&sh[n0..n1], &st[n0..n1]), group_stride(&sh[n1..], &st[n1..]))
    };
    if let (Some(bs), Some(rs), Some(cs)) = strides_of(&l) {
        return Ok(Operand { raw: t.with_layout(l)?, bs, rs, cs });
    }
    // Not expressible with one stride per group: gather into the permuted order.
    let ctx = ExecContext::current();
    let view = t.with_layout(l)?;
    let data = super::contiguous_f32(&ctx, &view, "contract")?.to_vec();
    let c = ctx.wrap_f32(data, view.shape())?;
    let cl = c.layout().clone();
    match strides_of(&cl) {
        (Some(bs), Some(rs), Some(cs)) => Ok(Operand { raw: c, bs, rs, cs }),
        _ => Err(FucinaError::InvalidView("contiguous operand without group strides".into())),
    }
}

/// Contracts `a` and `b` over `over`; the result axes are `out_names` (a's kept axes, then b-only axes).
pub(crate) fn contract_raw(
    ctx: &ExecContext,
    a: &RawTensor,
    an: &[&'static str],
    b: &RawTensor,
    bn: &[&'static str],
    over: &[&'static str],
    out_names: &[&'static str],
) -> Result<RawTensor> {
    let (sa, sb) = (a.shape(), b.shape());
    for n in an.iter().filter(|n| bn.contains(n)) {
        let (l, r) = (sa[pos(an, n)], sb[pos(bn, n)]);
        if l != r {
            return Err(FucinaError::ShapeMismatch { axis: n.to_string(), left: l, right: r });
        }
    }
    let batch: Vec<&'static str> = an.iter().copied().filter(|n| bn.contains(n) && !over.contains(n)).collect();
    let m_ax: Vec<&'static str> = an.iter().copied().filter(|n| !bn.contains(n)).collect();
    let n_ax: Vec<&'static str> = bn.iter().copied().filter(|n| !an.contains(n)).collect();
    let dim = |nm: &&'static str| if an.contains(nm) { sa[pos(an, nm)] } else { sb[pos(bn, nm)] };
    let size = |names: &[&'static str]| names.iter().map(dim).product::<usize>();
    let (bt, m, n, k) = (size(&batch), size(&m_ax), size(&n_ax), size(over));
    let oa = operand(a, an, [&batch, &m_ax, over])?;
    let ob = operand(b, bn, [&batch, over, &n_ax])?;
    let g = Gemm {
        batch: bt,
        m,
        n,
        k,
        a: MatRef {
            data: float_slice(&oa.raw, "contract")?,
            offset: oa.raw.layout().offset(),
            bs: oa.bs,
            rs: oa.rs,
            cs: oa.cs,
        },
        b: MatRef {
            data: float_slice(&ob.raw, "contract")?,
            offset: ob.raw.layout().offset(),
            bs: ob.bs,
            rs: ob.rs,
            cs: ob.cs,
        },
    };
    let mut out = ctx.alloc(bt * m * n);
    // A product is worth handing to the pool from about 8M multiply-adds (see gemm::gemm).
    ctx.run(bt * m * n * k / 256, |kern| kern.gemm(&g, &mut out));
    let order: Vec<&'static str> = batch.iter().chain(&m_ax).chain(&n_ax).copied().collect();
    let shape: Vec<usize> = order.iter().map(dim).collect();
    let res = super::finish(ctx, out, &shape, a.dtype().promote(b.dtype()))?;
    // Present the result in the order the type computed.
    let perm = perm_to(&order, out_names);
    res.with_layout(res.layout().permuted(&perm))
}

impl<A: Axes> Tensor<A> {
    /// Contracts `self` with `other` over the axes `C` (one axis or a tuple).
    ///
    /// The result has `self`'s other axes in order, then `other`'s axes that `self`
    /// lacks; axes in both and not contracted are batch axes. Same as `einsum!(a, b; C ->)`.
    pub fn contract<C: AxisSet, B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<<A as CanContract<B, C>>::Out>>
    where
        A: CanContract<B, C>,
    {
        let ctx = ExecContext::current();
        let out = <<A as CanContract<B, C>>::Out as AxisSet>::names();
        let (an, bn, cn) = (A::names(), B::names(), C::names());
        let r = contract_raw(&ctx, self.raw(), &an, other.raw(), &bn, &cn, &out)?;
        let (ad, bd) = (self.raw().detached(), other.raw().detached());
        let r = record(r, &[self.raw(), other.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                // dA contracts g with B over B's own axes; dB contracts A with g over A's own axes.
                let b_only: Vec<&'static str> = bn.iter().copied().filter(|n| !an.contains(n)).collect();
                let a_only: Vec<&'static str> = an.iter().copied().filter(|n| !bn.contains(n)).collect();
                let ga = contract_raw(&ctx, g, &out, &bd, &bn, &b_only, &an)?;
                let gb = contract_raw(&ctx, &ad, &an, g, &out, &a_only, &bn)?;
                Ok(vec![Some(ga), Some(gb)])
            })
        });
        Tensor::from_raw(r)
    }

    /// `x.dot::<in_>(&w)`: contraction over one named axis (alias of [`contract`](Self::contract)).
    pub fn dot<X: AxisSet, B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<<A as CanContract<B, X>>::Out>>
    where
        A: CanContract<B, X>,
    {
        self.contract::<X, B>(other)
    }
}
