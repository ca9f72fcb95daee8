//! Finite-difference checks of every differentiable op's backward (scalar backend).
//!
//! Inputs are f32, so the central differences use eps = 1e-2 and are compared with
//! atol = rtol = 3e-3 (f32 rounding of the loss dominates below that).

mod common;

use common::values;
use fucina::autograd::gradcheck;
use fucina::prelude::*;
use fucina::RawTensor;

axis!(pub a, pub b, pub c, pub d);

type T2 = Tensor<axes![a, b]>;

fn raw(seed: u64, shape: &[usize], scale: f32) -> RawTensor {
    let n: usize = shape.iter().product();
    RawTensor::from_buffer(fucina::storage::Buffer::F32(values(seed, n).iter().map(|v| v * scale).collect()), shape)
        .unwrap()
}

fn t<A: fucina::tensor::axes::Axes>(r: &RawTensor) -> Tensor<A> {
    Tensor::from_raw(r.clone()).unwrap()
}

/// Weighted sum of all elements with fixed weights, so every output element matters.
fn weigh<A: fucina::tensor::axes::Axes>(y: Tensor<A>) -> fucina::Result<RawTensor> {
    let n = y.numel();
    let flat = y.reshape::<axes![d]>(&[n])?;
    let w = Tensor::<axes![d]>::from_vec(values(999, n).iter().map(|v| v + 1.5).collect(), &[n])?;
    Ok(flat.mul(&w)?.sum::<d>()?.into_raw())
}

fn check(name: &str, inputs: &[RawTensor], f: impl Fn(&[RawTensor]) -> fucina::Result<RawTensor>) {
    let ctx = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
    let r = gradcheck(&ctx, inputs, f, 1e-2, 3e-3, 3e-3);
    match r {
        Ok(rep) => assert!(rep.checked > 0, "{name}: nothing checked"),
        Err(e) => panic!("{name}: {e}"),
    }
}

#[test]
fn unary_ops() {
    let x = raw(1, &[3, 4], 1.5);
    let pos = raw(2, &[3, 4], 1.0);
    type F = fn(&T2) -> fucina::Result<T2>;
    let cases: Vec<(&str, F, bool)> = vec![
        ("neg", |x| x.neg(), false),
        ("exp", |x| x.exp(), false),
        ("tanh", |x| x.tanh(), false),
        ("sigmoid", |x| x.sigmoid(), false),
        ("gelu", |x| x.gelu(), false),
        ("gelu_tanh", |x| x.gelu_tanh(), false),
        ("silu", |x| x.silu(), false),
        ("softplus", |x| x.softplus(), false),
        ("square", |x| x.square(), false),
        ("affine", |x| x.affine(-2.0, 0.5), false),
        ("log", |x| x.log(), true),
        ("sqrt", |x| x.sqrt(), true),
        ("rsqrt", |x| x.rsqrt(), true),
        ("recip", |x| x.recip(), true),
        ("powf", |x| x.powf(1.7), true),
        ("relu", |x| x.relu(), false),
        ("abs", |x| x.abs(), false),
    ];
    for (name, f, positive) in cases {
        let input =
            if positive { pos.to_f32_vec().iter().map(|v| v.abs() + 0.5).collect::<Vec<_>>() } else { x.to_f32_vec() };
        // Keep relu/abs inputs away from the kink at 0, where differences are not derivatives.
        let input: Vec<f32> = input.iter().map(|v| if v.abs() < 0.05 { v + 0.1 } else { *v }).collect();
        let r = RawTensor::from_buffer(fucina::storage::Buffer::F32(input), &[3, 4]).unwrap();
        check(name, &[r], |xs| weigh(f(&t::<axes![a, b]>(&xs[0]))?));
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    let x = raw(3, &[3, 4], 1.0);
    let y = raw(4, &[3, 4], 1.0);
    let row =
        RawTensor::from_buffer(fucina::storage::Buffer::F32(values(5, 4).iter().map(|v| v + 2.0).collect()), &[4])
            .unwrap();
    let ba = raw(6, &[4, 3], 1.0);
    check("add", &[x.clone(), y.clone()], |v| weigh(t::<axes![a, b]>(&v[0]).add(&t::<axes![a, b]>(&v[1]))?));
    check("sub_bcast", &[x.clone(), row.clone()], |v| weigh(t::<axes![a, b]>(&v[0]).sub(&t::<axes![b]>(&v[1]))?));
    check("mul_perm", &[x.clone(), ba.clone()], |v| weigh(t::<axes![a, b]>(&v[0]).mul(&t::<axes![b, a]>(&v[1]))?));
    check("div_bcast", &[x.clone(), row.clone()], |v| weigh(t::<axes![a, b]>(&v[0]).div(&t::<axes![b]>(&v[1]))?));
    check("maximum", &[x.clone(), y.clone()], |v| weigh(t::<axes![a, b]>(&v[0]).maximum(&t::<axes![a, b]>(&v[1]))?));
    check("minimum", &[x.clone(), y.clone()], |v| weigh(t::<axes![a, b]>(&v[0]).minimum(&t::<axes![a, b]>(&v[1]))?));
    check("x*x (shared input)", std::slice::from_ref(&x), |v| {
        let xt = t::<axes![a, b]>(&v[0]);
        weigh(xt.mul(&xt)?.add(&xt)?)
    });
}

#[test]
fn reductions_softmax_norms() {
    let x = raw(7, &[3, 5], 2.0);
    let w = raw(8, &[5], 1.0);
    let bias = raw(9, &[5], 1.0);
    check("sum", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).sum::<b>()?));
    check("mean", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).mean::<a>()?));
    check("max", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).max::<b>()?));
    check("min", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).min::<a>()?));
    check("logsumexp", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).logsumexp::<b>()?));
    check("sum_all", std::slice::from_ref(&x), |v| Ok(t::<axes![a, b]>(&v[0]).sum::<(a, b)>()?.into_raw()));
    check("softmax_b", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).softmax::<b>()?));
    check("softmax_a", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).softmax::<a>()?));
    check("log_softmax", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).log_softmax::<b>()?));
    check("rms_norm", &[x.clone(), w.clone()], |v| {
        weigh(t::<axes![a, b]>(&v[0]).rms_norm::<b>(Some(&t::<axes![b]>(&v[1])), 1e-5)?)
    });
    check("rms_norm_axis_a", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b]>(&v[0]).rms_norm::<a>(None, 1e-5)?));
    check("layer_norm", &[x.clone(), w.clone(), bias.clone()], |v| {
        let (wt, bt) = (t::<axes![b]>(&v[1]), t::<axes![b]>(&v[2]));
        weigh(t::<axes![a, b]>(&v[0]).layer_norm::<b>(Some(&wt), Some(&bt), 1e-5)?)
    });
}

#[test]
fn contractions_and_views() {
    let x = raw(10, &[2, 3, 4], 1.0);
    let w = raw(11, &[5, 4], 1.0);
    let y = raw(12, &[2, 4, 6], 1.0);
    check("contract", &[x.clone(), w.clone()], |v| {
        let (xt, wt) = (t::<axes![a, b, c]>(&v[0]), t::<axes![d, c]>(&v[1]));
        weigh(einsum!(xt, wt; c ->)?)
    });
    check("batched contract", &[x.clone(), y.clone()], |v| {
        let (xt, yt) = (t::<axes![a, b, c]>(&v[0]), t::<axes![a, c, d]>(&v[1]));
        weigh(einsum!(xt, yt; c -> d a b)?)
    });
    check("two-axis contract", &[x.clone(), y.clone()], |v| {
        let (xt, yt) = (t::<axes![a, b, c]>(&v[0]), t::<axes![a, c, d]>(&v[1]));
        weigh(xt.contract::<(a, c), _>(&yt)?)
    });
    check("permute", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).permute::<axes![c, a, b]>()?));
    check("narrow", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).narrow::<b>(1, 2)?));
    check("split+concat", std::slice::from_ref(&x), |v| {
        let p = t::<axes![a, b, c]>(&v[0]).split::<c>(&[1, 3])?;
        weigh(Tensor::concat::<c>(&[&p[1], &p[0]])?.tanh()?)
    });
    check("reshape", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, c]>(&v[0]).permute::<axes![c, b, a]>()?.reshape::<axes![a, d]>(&[4, 6])?)
    });
    check("rename", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).rename::<b, d>()?.exp()?));
}

#[test]
fn mlp_end_to_end() {
    axis!(pub h);
    let x = raw(20, &[4, 3], 1.0);
    let w1 = raw(21, &[5, 3], 0.7);
    let b1 = raw(22, &[5], 0.1);
    let w2 = raw(23, &[2, 5], 0.7);
    check("mlp", &[x, w1, b1, w2], |v| {
        let xt = t::<axes![batch, in]>(&v[0]);
        let (w1t, b1t, w2t) = (t::<axes![h, in]>(&v[1]), t::<axes![h]>(&v[2]), t::<axes![class, h]>(&v[3]));
        let h1 = einsum!(xt, w1t; in ->)?.add(&b1t)?.tanh()?;
        let logits = h1.dot::<h, _>(&w2t)?;
        let lp = logits.log_softmax::<class>()?;
        Ok(lp.narrow::<class>(0, 1)?.sum::<(batch, class)>()?.neg()?.into_raw())
    });
}

#[test]
fn indexing_selection_cast_conv() {
    axis!(pub v, pub h, pub s, pub ch, pub o, pub tm);
    let table = raw(30, &[6, 3], 1.0);
    check("embedding", &[table], |x| {
        let ids = Tensor::<axes![batch, s]>::from_vec(vec![1u32, 5, 1, 0], &[2, 2])?;
        weigh(t::<axes![v, h]>(&x[0]).embedding(&ids)?)
    });
    let src = raw(31, &[3, 5, 2], 1.0);
    check("gather", &[src], |x| {
        let idx = Tensor::<axes![a, b, c]>::from_vec((0..3 * 4 * 2).map(|i| (i * 7 % 5) as u32).collect(), &[3, 4, 2])?;
        weigh(t::<axes![a, b, c]>(&x[0]).gather::<b>(&idx)?)
    });
    let (p, q) = (raw(32, &[3, 4], 1.0), raw(33, &[3, 4], 1.0));
    check("where_cond", &[p.clone(), q], |x| {
        let cond = Tensor::<axes![b]>::from_vec(vec![1.0f32, 0.0, 2.0, 0.0], &[4])?;
        weigh(Tensor::where_cond(&cond, &t::<axes![a, b]>(&x[0]), &t::<axes![a, b]>(&x[1]))?)
    });
    check("masked_fill", &[p], |x| {
        let mask = Tensor::<axes![a]>::from_vec(vec![0.0f32, 1.0, 0.0], &[3])?;
        weigh(t::<axes![a, b]>(&x[0]).masked_fill(&mask, -5.0)?)
    });
    let xs = raw(34, &[2, 3, 9], 1.0);
    let w = raw(35, &[4, 3, 3], 0.5);
    let bias = raw(36, &[4], 0.5);
    for (dil, padding) in [(1, Padding::Causal), (2, Padding::Causal), (3, Padding::Same), (1, Padding::Valid)] {
        check(&format!("conv1d d={dil} {padding:?}"), &[xs.clone(), w.clone(), bias.clone()], |x| {
            let (xt, wt, bt) = (t::<axes![batch, ch, tm]>(&x[0]), t::<axes![o, ch, tm]>(&x[1]), t::<axes![o]>(&x[2]));
            weigh(xt.conv1d::<ch, tm, o>(&wt, Some(&bt), Conv1dOptions { dilation: dil, padding })?)
        });
    }
}

#[test]
fn attention_and_rope() {
    use fucina::ops::{attention, Mask, RopeStyle};
    // q [seq 3, kv_head 2, group 2, head_dim 4], k/v [kv_head 2, kv_seq 5, 4|3]; causal from position 2.
    let q = raw(30, &[3, 2, 2, 4], 1.0);
    let k = raw(31, &[2, 5, 4], 1.0);
    let v = raw(32, &[2, 5, 3], 1.0);
    for causal in [Mask::Causal(2), Mask::Full, Mask::Sliding { start: 2, window: 2 }] {
        check("attention", &[q.clone(), k.clone(), v.clone()], |x| {
            let (qt, kt, vt) = (
                t::<axes![seq, kv_head, group, head_dim]>(&x[0]),
                t::<axes![kv_head, kv_seq, head_dim]>(&x[1]),
                t::<axes![kv_head, kv_seq, d]>(&x[2]),
            );
            weigh(attention(&qt, &kt, &vt, 0.7, causal)?)
        });
    }
    let x = raw(33, &[3, 2, 6], 1.0);
    let cos = Tensor::<axes![seq, head_dim]>::from_vec(values(34, 9), &[3, 3]).unwrap();
    let sin = Tensor::<axes![seq, head_dim]>::from_vec(values(35, 9), &[3, 3]).unwrap();
    for style in [RopeStyle::Halves, RopeStyle::Pairs] {
        check("rope", std::slice::from_ref(&x), |v| {
            weigh(t::<axes![seq, head, head_dim]>(&v[0]).rope(&cos, &sin, style)?)
        });
    }
    // Partial: the leading 4 of 6 values rotate, the gradient of the other 2 passes through.
    let cos = Tensor::<axes![seq, head_dim]>::from_vec(values(36, 6), &[3, 2]).unwrap();
    let sin = Tensor::<axes![seq, head_dim]>::from_vec(values(37, 6), &[3, 2]).unwrap();
    for style in [RopeStyle::Halves, RopeStyle::Pairs] {
        check("partial rope", std::slice::from_ref(&x), |v| {
            weigh(t::<axes![seq, head, head_dim]>(&v[0]).rope(&cos, &sin, style)?)
        });
    }
}

#[test]
fn relative_to_absolute_scores() {
    // [head 2, q 3, rel 5] -> [head 2, q 3, key 3], from a transposed (strided) input too.
    axis!(pub rq, pub rel, pub key, pub hd);
    let x = raw(60, &[2, 3, 5], 1.0);
    check("relative_to_absolute", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![hd, rq, rel]>(&v[0]).relative_to_absolute::<rel, key>()?)
    });
    let xt = raw(61, &[3, 2, 5], 1.0);
    check("relative_to_absolute of a permuted view", std::slice::from_ref(&xt), |v| {
        let p = t::<axes![rq, hd, rel]>(&v[0]).permute::<axes![hd, rq, rel]>()?;
        weigh(p.relative_to_absolute::<rel, key>()?)
    });
}

#[test]
fn clamp_scans_order_triangles_broadcasts() {
    // Inputs kept away from the clamp bounds, where differences are not derivatives.
    let x: Vec<f32> = values(40, 24)
        .iter()
        .map(|v| v * 2.0)
        .map(|v| if (v.abs() - 0.6).abs() < 0.05 { v + 0.1 } else { v })
        .collect();
    let x = RawTensor::from_buffer(fucina::storage::Buffer::F32(x), &[2, 3, 4]).unwrap();
    let row = raw(41, &[4], 1.0);
    check("clamp", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).clamp(-0.6, 0.6)?));
    check("cumsum_b", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).cumsum::<b>()?));
    check("cumsum_c", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).cumsum::<c>()?));
    check("topk values", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).topk::<c>(2)?.0));
    check("tril", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).tril::<b, c>(0)?));
    check("triu", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).triu::<b, c>(1)?));
    check("broadcast_to", std::slice::from_ref(&row), |v| {
        weigh(t::<axes![c]>(&v[0]).broadcast_to::<axes![c, a, b]>(&[4, 2, 3])?)
    });
    check("unsqueeze", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, c]>(&v[0]).unsqueeze::<d>()?.scale(2.0)?));
    let x1 = raw(42, &[2, 1, 4], 1.0);
    check("squeeze", std::slice::from_ref(&x1), |v| weigh(t::<axes![a, b, c]>(&v[0]).squeeze::<b>()?.scale(2.0)?));
    // A strided input: the middle axis of a permuted view.
    check("squeeze (strided)", std::slice::from_ref(&x1), |v| {
        weigh(t::<axes![a, b, c]>(&v[0]).permute::<axes![c, b, a]>()?.squeeze::<b>()?)
    });
}

#[test]
fn axis_surgery() {
    let x = raw(50, &[2, 6, 3], 1.0);
    check("split_axis", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, c]>(&v[0]).split_axis::<b, axes![d, kv_head]>(&[3, 2])?)
    });
    // Merging a and c of [a, b, c] cannot be a view: the copy path.
    check("merge_axes (copy)", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, c]>(&v[0]).merge_axes::<axes![a, c], d>()?)
    });
    check("merge_axes (view)", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, c]>(&v[0]).merge_axes::<axes![b, c], d>()?)
    });
}

#[test]
fn conv2d_and_pooling() {
    use fucina::ops::{Conv2dOptions, PoolOptions};
    axis!(pub hh, pub ww);
    let x = raw(60, &[2, 4, 5, 4], 1.0);
    let w = raw(61, &[6, 2, 3, 2], 1.0);
    let bias = raw(62, &[6], 1.0);
    let opts = Conv2dOptions { stride: [2, 1], padding: [1, 1], dilation: [1, 2], groups: 2 };
    check("conv2d", &[x.clone(), w.clone(), bias.clone()], |v| {
        let (xt, wt, bt) = (t::<axes![a, b, hh, ww]>(&v[0]), t::<axes![c, b, hh, ww]>(&v[1]), t::<axes![c]>(&v[2]));
        weigh(xt.conv2d::<b, hh, ww, c>(&wt, Some(&bt), opts)?)
    });
    // Channels-last input: the same op by name.
    let xl = raw(63, &[2, 5, 4, 4], 1.0);
    check("conv2d channels-last", &[xl.clone(), w.clone()], |v| {
        let (xt, wt) = (t::<axes![a, hh, ww, b]>(&v[0]), t::<axes![c, b, hh, ww]>(&v[1]));
        weigh(xt.conv2d::<b, hh, ww, c>(&wt, None, opts)?)
    });
    let pool = PoolOptions { kernel: [3, 2], stride: [2, 1], padding: [1, 1] };
    // Distinct values 0.05 apart, so no window has a near-tie a finite difference would cross.
    let spread: Vec<f32> = (0..160).map(|i| ((i * 37) % 160) as f32 * 0.05 - 4.0).collect();
    let x = RawTensor::from_buffer(fucina::storage::Buffer::F32(spread), &[2, 4, 5, 4]).unwrap();
    check("max_pool2d", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, hh, ww]>(&v[0]).max_pool2d::<hh, ww>(pool)?)
    });
    check("avg_pool2d", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, hh, ww]>(&v[0]).avg_pool2d::<hh, ww>(pool)?)
    });
    check("max_pool1d", std::slice::from_ref(&x), |v| {
        weigh(t::<axes![a, b, hh, ww]>(&v[0]).max_pool1d::<hh>(3, 2, 1)?)
    });
    check("avg_pool1d", std::slice::from_ref(&x), |v| weigh(t::<axes![a, b, hh, ww]>(&v[0]).avg_pool1d::<b>(2, 1, 1)?));
}

#[test]
fn batch_norm_both_modes() {
    use fucina::ops::BatchStats;
    let x = raw(70, &[3, 4, 5], 2.0);
    let w = raw(71, &[4], 1.0);
    let bias = raw(72, &[4], 1.0);
    let (rm, rv) = (
        t::<axes![b]>(&raw(73, &[4], 1.0)),
        t::<axes![b]>(&raw(74, &[4], 0.3)).abs().unwrap().add_scalar(0.5).unwrap(),
    );
    check("batch_norm train", &[x.clone(), w.clone(), bias.clone()], |v| {
        let (wt, bt) = (t::<axes![b]>(&v[1]), t::<axes![b]>(&v[2]));
        weigh(t::<axes![a, b, c]>(&v[0]).batch_norm::<b>(Some(&wt), Some(&bt), BatchStats::Batch, 1e-5)?)
    });
    check("batch_norm eval", &[x.clone(), w.clone(), bias.clone()], |v| {
        let (wt, bt) = (t::<axes![b]>(&v[1]), t::<axes![b]>(&v[2]));
        let stats = BatchStats::Running { mean: &rm, var: &rv };
        weigh(t::<axes![a, b, c]>(&v[0]).batch_norm::<b>(Some(&wt), Some(&bt), stats, 1e-5)?)
    });
}
