//! Parity suite: every op on the native backend agrees with the scalar spec,
//! over random shapes with odd sizes, size-1 axes and non-contiguous views.
//!
//! Tolerances: elementwise maps 2e-6 abs + 2e-6 rel (SIMD exp/tanh are within ~2 ulp);
//! reductions and GEMM 1e-5 + 1e-5 * sqrt(len) relative (summation order differs).

mod common;

use common::{assert_close, contexts, values, Sizes};
use fucina::prelude::*;

axis!(pub a, pub b, pub c, pub d);

/// Runs `f` on both backends and returns (scalar, native) results.
fn on_both<T>(f: impl Fn() -> T) -> (T, T) {
    let (s, n) = contexts();
    (s.scope(&f), n.scope(&f))
}

/// A `[a, b, c]` tensor; with `transposed`, a non-contiguous view built from `[c, b, a]` storage.
fn tensor3(seed: u64, sa: usize, sb: usize, sc: usize, transposed: bool) -> Tensor<axes![a, b, c]> {
    let v = values(seed, sa * sb * sc);
    if transposed {
        Tensor::<axes![c, b, a]>::from_vec(v, &[sc, sb, sa]).unwrap().permute::<axes![a, b, c]>().unwrap()
    } else {
        Tensor::from_vec(v, &[sa, sb, sc]).unwrap()
    }
}

fn shapes(seed: u64, n: usize) -> Vec<(usize, usize, usize, bool)> {
    let mut s = Sizes::new(seed);
    let mut v = vec![(1, 1, 1, false), (1, 7, 1, true), (3, 1, 33, true)];
    for i in 0..n {
        v.push((s.pick(1, 9), s.pick(1, 17), s.pick(1, 70), i % 2 == 1));
    }
    v
}

#[test]
fn unary_ops() {
    type Op = fn(&Tensor<axes![a, b, c]>) -> fucina::Result<Tensor<axes![a, b, c]>>;
    let ops: Vec<(&str, Op)> = vec![
        ("neg", |t| t.neg()),
        ("exp", |t| t.scale(8.0)?.exp()),
        ("log", |t| t.abs()?.add_scalar(0.01)?.log()),
        ("sqrt", |t| t.abs()?.sqrt()),
        ("rsqrt", |t| t.abs()?.add_scalar(0.1)?.rsqrt()),
        ("tanh", |t| t.scale(5.0)?.tanh()),
        ("sigmoid", |t| t.scale(9.0)?.sigmoid()),
        ("relu", |t| t.relu()),
        ("gelu", |t| t.scale(4.0)?.gelu()),
        ("gelu_tanh", |t| t.scale(4.0)?.gelu_tanh()),
        ("silu", |t| t.scale(6.0)?.silu()),
        ("softplus", |t| t.scale(30.0)?.softplus()),
        ("square", |t| t.square()),
        ("recip", |t| t.add_scalar(2.0)?.recip()),
        ("powf", |t| t.abs()?.powf(1.7)),
    ];
    for (i, (sa, sb, sc, tr)) in shapes(1, 12).into_iter().enumerate() {
        let x = tensor3(i as u64, sa, sb, sc, tr);
        for (name, op) in &ops {
            let (s, n) = on_both(|| op(&x).unwrap().to_f32_vec());
            assert_close(&format!("{name} {sa}x{sb}x{sc} t={tr}"), &n, &s, 2e-6, 4e-6);
        }
    }
}

#[test]
fn binary_ops_broadcast_by_name() {
    for (i, (sa, sb, sc, tr)) in shapes(2, 12).into_iter().enumerate() {
        let x = tensor3(100 + i as u64, sa, sb, sc, tr);
        let y = tensor3(200 + i as u64, sa, sb, sc, !tr);
        let row = Tensor::<axes![c]>::from_vec(values(7, sc), &[sc]).unwrap().add_scalar(3.0).unwrap();
        let ca = Tensor::<axes![c, a]>::from_vec(values(8, sc * sa), &[sc, sa]).unwrap();
        let (s, n) = on_both(|| {
            vec![
                x.add(&y).unwrap().to_f32_vec(),
                x.sub(&y).unwrap().to_f32_vec(),
                x.mul(&y).unwrap().to_f32_vec(),
                x.div(&row).unwrap().to_f32_vec(),
                x.maximum(&ca).unwrap().to_f32_vec(),
                x.minimum(&y).unwrap().to_f32_vec(),
                x.add(&row).unwrap().to_f32_vec(),
            ]
        });
        for (k, (sv, nv)) in s.iter().zip(&n).enumerate() {
            assert_close(&format!("binary #{k} {sa}x{sb}x{sc}"), nv, sv, 1e-6, 1e-6);
        }
    }
}

#[test]
fn reductions_softmax_norms() {
    for (i, (sa, sb, sc, tr)) in shapes(3, 10).into_iter().enumerate() {
        let x = tensor3(300 + i as u64, sa, sb, sc, tr).scale(3.0).unwrap();
        let w = Tensor::<axes![c]>::from_vec(values(9, sc), &[sc]).unwrap();
        let bias = Tensor::<axes![c]>::from_vec(values(10, sc), &[sc]).unwrap();
        let wb = Tensor::<axes![b]>::from_vec(values(11, sb), &[sb]).unwrap();
        let (s, n) = on_both(|| {
            vec![
                x.sum::<c>().unwrap().to_f32_vec(),
                x.sum::<b>().unwrap().to_f32_vec(),
                x.sum::<(a, c)>().unwrap().to_f32_vec(),
                x.mean::<a>().unwrap().to_f32_vec(),
                x.max::<b>().unwrap().to_f32_vec(),
                x.min::<c>().unwrap().to_f32_vec(),
                x.logsumexp::<c>().unwrap().to_f32_vec(),
                x.logsumexp::<a>().unwrap().to_f32_vec(),
                x.softmax::<c>().unwrap().to_f32_vec(),
                x.softmax::<b>().unwrap().to_f32_vec(),
                x.log_softmax::<a>().unwrap().to_f32_vec(),
                x.rms_norm::<c>(Some(&w), 1e-6).unwrap().to_f32_vec(),
                x.rms_norm::<b>(Some(&wb), 1e-5).unwrap().to_f32_vec(),
                x.layer_norm::<c>(Some(&w), Some(&bias), 1e-5).unwrap().to_f32_vec(),
                x.layer_norm::<b>(None, None, 1e-5).unwrap().to_f32_vec(),
            ]
        });
        for (k, (sv, nv)) in s.iter().zip(&n).enumerate() {
            let tol = 1e-5 * ((sa * sb * sc) as f32).sqrt();
            assert_close(&format!("reduce #{k} {sa}x{sb}x{sc} t={tr}"), nv, sv, tol, tol);
        }
    }
}

#[test]
fn gemm_shapes_layouts_and_dtypes() {
    let mut sz = Sizes::new(4);
    let mut cases: Vec<(usize, usize, usize)> =
        vec![(1, 1, 1), (1, 300, 17), (2, 33, 129), (6, 16, 256), (7, 17, 257), (13, 1, 5), (97, 65, 300)];
    for _ in 0..10 {
        cases.push((sz.pick(1, 80), sz.pick(1, 80), sz.pick(1, 300)));
    }
    for (ci, (m, n, k)) in cases.into_iter().enumerate() {
        let seed = 400 + ci as u64 * 3;
        let x = Tensor::<axes![a, b]>::from_vec(values(seed, m * k), &[m, k]).unwrap();
        let w = Tensor::<axes![c, b]>::from_vec(values(seed + 1, n * k), &[n, k]).unwrap();
        let wt = Tensor::<axes![b, c]>::from_vec(values(seed + 2, k * n), &[k, n]).unwrap();
        let xt = Tensor::<axes![b, a]>::from_vec(values(seed, m * k), &[k, m]).unwrap();
        let tol = 2e-6 * (k as f32).sqrt() + 1e-6;
        let (s, nv) = on_both(|| {
            vec![
                x.contract::<b, _>(&w).unwrap().to_f32_vec(),
                x.contract::<b, _>(&wt).unwrap().to_f32_vec(),
                xt.contract::<b, _>(&w).unwrap().to_f32_vec(),
                x.contract::<b, _>(&w.cast(DType::BF16).unwrap()).unwrap().to_f32_vec(),
                x.cast(DType::F16).unwrap().contract::<b, _>(&wt.cast(DType::F16).unwrap()).unwrap().to_f32_vec(),
            ]
        });
        for (kk, (a1, b1)) in s.iter().zip(&nv).enumerate() {
            let t = if kk == 4 { 2e-3 * (k as f32).sqrt() } else { tol };
            assert_close(&format!("gemm #{kk} m={m} n={n} k={k}"), b1, a1, t, t);
        }
    }
}

#[test]
fn batched_contraction_and_multi_axis_groups() {
    // [a=batch, b=m, d=k] x [a, d, c=n] and a two-axis contraction over (b, d).
    let (ba, m, k, n) = (3, 5, 19, 7);
    let x = Tensor::<axes![a, b, d]>::from_vec(values(500, ba * m * k), &[ba, m, k]).unwrap();
    let y = Tensor::<axes![a, d, c]>::from_vec(values(501, ba * k * n), &[ba, k, n]).unwrap();
    let yt = Tensor::<axes![c, d, a]>::from_vec(values(502, ba * k * n), &[n, k, ba]).unwrap();
    let z = Tensor::<axes![b, d, c]>::from_vec(values(503, m * k * n), &[m, k, n]).unwrap();
    let (s, nv) = on_both(|| {
        vec![
            einsum!(x, y; d ->).unwrap().to_f32_vec(),
            einsum!(x, yt; d -> c b a).unwrap().to_f32_vec(),
            x.contract::<(b, d), _>(&z).unwrap().to_f32_vec(),
        ]
    });
    for (i, (p, q)) in s.iter().zip(&nv).enumerate() {
        assert_close(&format!("batched #{i}"), q, p, 1e-5, 1e-5);
    }
}

#[test]
fn conv1d_gather_embedding_concat_where_copy() {
    axis!(pub bt, pub ci, pub co, pub t, pub v, pub h, pub s);
    for (cin, cout, len, k, dil) in [(1, 1, 1, 1, 1), (3, 5, 40, 3, 2), (8, 4, 67, 2, 16), (2, 6, 9, 5, 1)] {
        let x = Tensor::<axes![bt, ci, t]>::from_vec(values(600, 2 * cin * len), &[2, cin, len]).unwrap();
        let w = Tensor::<axes![co, ci, t]>::from_vec(values(601, cout * cin * k), &[cout, cin, k]).unwrap();
        let b = Tensor::<axes![co]>::from_vec(values(602, cout), &[cout]).unwrap();
        for padding in [Padding::Causal, Padding::Same] {
            let opts = Conv1dOptions { dilation: dil, padding };
            let (p, q) = on_both(|| x.conv1d::<ci, t, co>(&w, Some(&b), opts).unwrap().to_f32_vec());
            assert_close(&format!("conv1d {cin}->{cout} len={len} k={k} d={dil} {padding:?}"), &q, &p, 1e-5, 1e-5);
        }
    }
    let table = Tensor::<axes![v, h]>::from_vec(values(610, 11 * 6), &[11, 6]).unwrap();
    let ids = Tensor::<axes![bt, s]>::from_vec(vec![0u32, 10, 3, 3, 7, 1], &[2, 3]).unwrap();
    let (p, q) = on_both(|| table.embedding(&ids).unwrap().to_f32_vec());
    assert_close("embedding", &q, &p, 0.0, 0.0);

    let src = tensor3(620, 4, 5, 6, true);
    let idx =
        Tensor::<axes![a, b, c]>::from_vec((0..4 * 2 * 6).map(|i| (i * 7 % 5) as u32).collect(), &[4, 2, 6]).unwrap();
    let (p, q) = on_both(|| src.gather::<b>(&idx).unwrap().to_f32_vec());
    assert_close("gather", &q, &p, 0.0, 0.0);

    let x1 = tensor3(630, 3, 2, 5, false);
    let x2 = tensor3(631, 3, 4, 5, true);
    let mask = Tensor::<axes![c]>::from_vec(vec![1.0f32, 0.0, 1.0, 0.0, 0.0], &[5]).unwrap();
    let (p, q) = on_both(|| {
        vec![
            Tensor::concat::<b>(&[&x1, &x2]).unwrap().to_f32_vec(),
            Tensor::where_cond(&mask, &x1, &x1.neg().unwrap()).unwrap().to_f32_vec(),
            x2.masked_fill(&mask, -1e9).unwrap().to_f32_vec(),
            x2.contiguous().unwrap().to_f32_vec(),
            x2.cast(DType::BF16).unwrap().permute::<axes![c, a, b]>().unwrap().contiguous().unwrap().to_f32_vec(),
        ]
    });
    for (i, (a1, b1)) in p.iter().zip(&q).enumerate() {
        assert_close(&format!("layout op #{i}"), b1, a1, 0.0, 0.0);
    }
}

#[test]
fn random_streams_do_not_depend_on_backend_or_threads() {
    let mk = |backend, threads| {
        let ctx = ExecContext::new(ExecConfig { backend, threads: Some(threads), seed: 42, ..ExecConfig::default() })
            .unwrap();
        let n = ctx.randn::<axes![a]>(&[10_001], 0.0, 1.0).unwrap().to_f32_vec();
        let u = ctx.rand_uniform::<axes![a, b]>(&[33, 7], -1.0, 1.0).unwrap().to_f32_vec();
        (n, u, ctx.rng_counter())
    };
    let base = mk(BackendKind::Scalar, 1);
    assert_eq!(base, mk(BackendKind::Native, 1));
    assert_eq!(base, mk(BackendKind::Native, 2));
    assert!(base.1.iter().all(|v| (-1.0..1.0).contains(v)));
}

#[test]
fn backward_kernels_agree() {
    // conv1d_backward, scatter_add_rows (embedding/gather) and every op's backward on both backends.
    axis!(pub bt, pub ch, pub tm, pub co, pub v, pub h);
    let grads = || {
        let ctx = fucina::ExecContext::current();
        let x = Tensor::<axes![bt, ch, tm]>::from_vec(values(700, 2 * 5 * 70), &[2, 5, 70]).unwrap().requires_grad();
        let w = Tensor::<axes![co, ch, tm]>::from_vec(values(701, 6 * 5 * 3), &[6, 5, 3]).unwrap().requires_grad();
        let table = Tensor::<axes![v, h]>::from_vec(values(702, 9 * 70), &[9, 70]).unwrap().requires_grad();
        let ids = Tensor::<axes![bt, co]>::from_vec((0..12).map(|i| (i * 5 % 9) as u32).collect(), &[2, 6]).unwrap();
        let scope = ctx.open_exec_scope();
        let y = x.conv1d::<ch, tm, co>(&w, None, Conv1dOptions { dilation: 4, padding: Padding::Causal }).unwrap();
        let e = table.embedding(&ids).unwrap().rename::<h, tm>().unwrap();
        let z = y.mul(&e).unwrap().tanh().unwrap().softmax::<tm>().unwrap();
        let loss = z.mul(&y).unwrap().sum::<(bt, co, tm)>().unwrap();
        loss.backward(&ctx).unwrap();
        drop(scope);
        [x.grad().unwrap().to_f32_vec(), w.grad().unwrap().to_f32_vec(), table.grad().unwrap().to_f32_vec()]
    };
    let (s, n) = on_both(grads);
    for (i, (p, q)) in s.iter().zip(&n).enumerate() {
        assert_close(&format!("grad #{i}"), q, p, 2e-5, 2e-5);
    }
}

#[test]
fn attention_matches_scalar_and_the_composed_ops() {
    use fucina::ops::{attention, Mask};
    let mut sz = Sizes::new(77);
    for case in 0..14 {
        let (s, h, g, dk, dv) = (sz.pick(1, 9), sz.pick(1, 4), sz.pick(1, 4), sz.pick(1, 40), sz.pick(1, 33));
        let t = s + sz.pick(0, 20);
        // Causal, every key, or causal within a sliding window (1 to 6 keys).
        let causal = match case % 4 {
            0 | 1 => Mask::Causal(t - s),
            2 => Mask::Full,
            _ => Mask::Sliding { start: t - s, window: 1 + (case % 6) as usize },
        };
        let q = Tensor::<axes![seq, kv_head, group, head_dim]>::from_vec(values(case, s * h * g * dk), &[s, h, g, dk])
            .unwrap();
        // Keys as a transposed view (strided rows) on even cases, contiguous (f16 on some) on
        // odd ones; values in f16 on odd cases.
        let k = if case % 2 == 0 {
            Tensor::<axes![kv_seq, kv_head, head_dim]>::from_vec(values(case + 50, t * h * dk), &[t, h, dk])
                .unwrap()
                .permute::<axes![kv_head, kv_seq, head_dim]>()
                .unwrap()
        } else {
            let k = Tensor::<axes![kv_head, kv_seq, head_dim]>::from_vec(values(case + 50, t * h * dk), &[h, t, dk])
                .unwrap();
            if case % 4 == 1 {
                k.cast(DType::F16).unwrap()
            } else {
                k
            }
        };
        let v = Tensor::<axes![kv_head, kv_seq, d]>::from_vec(values(case + 90, h * t * dv), &[h, t, dv]).unwrap();
        let v = if case % 2 == 1 { v.cast(DType::F16).unwrap() } else { v };
        let scale = 1.0 / (dk as f32).sqrt();
        let (sc, nat) = on_both(|| attention(&q, &k, &v, scale, causal).unwrap().to_f32_vec());
        let name = format!("attention s{s} h{h} g{g} t{t} dk{dk} dv{dv} {causal:?}");
        assert_close(&name, &nat, &sc, 1e-5, 1e-5 * (t as f32).sqrt());
        // The same thing from the composed ops (einsum, mask, softmax, einsum).
        let composed = contexts().0.scope(|| {
            let scores: Tensor<axes![seq, kv_head, group, kv_seq]> = einsum!(q, k; head_dim ->).unwrap();
            let mask: Vec<f32> = (0..s)
                .flat_map(|i| (0..t).map(move |j| if causal.keys(i, t).contains(&j) { 0.0 } else { 1.0 }))
                .collect();
            let mask = Tensor::<axes![seq, kv_seq]>::from_vec(mask, &[s, t]).unwrap();
            let p = scores
                .scale(scale)
                .unwrap()
                .masked_fill(&mask, f32::NEG_INFINITY)
                .unwrap()
                .softmax::<kv_seq>()
                .unwrap();
            let o: Tensor<axes![seq, kv_head, group, d]> = einsum!(p, v; kv_seq ->).unwrap();
            o.to_f32_vec()
        });
        assert_close(&format!("{name} vs composed"), &sc, &composed, 1e-5, 1e-5 * (t as f32).sqrt());
    }
}

/// Seeded attention operands for case `case`, sizes `[s, h, g, t, dk, dv]`: q, k and v
/// tracked for gradients, and the weights `w` of the loss `sum(attention(..) * w)`.
#[allow(clippy::type_complexity)]
fn attention_inputs(
    case: u64,
    [s, h, g, t, dk, dv]: [usize; 6],
) -> (
    Tensor<axes![seq, kv_head, group, head_dim]>,
    Tensor<axes![kv_head, kv_seq, head_dim]>,
    Tensor<axes![kv_head, kv_seq, d]>,
    Tensor<axes![seq, kv_head, group, d]>,
) {
    let q = Tensor::from_vec(values(case, s * h * g * dk), &[s, h, g, dk]).unwrap().requires_grad();
    let k = Tensor::from_vec(values(case + 30, h * t * dk), &[h, t, dk]).unwrap().requires_grad();
    let v = Tensor::from_vec(values(case + 60, h * t * dv), &[h, t, dv]).unwrap().requires_grad();
    let w = Tensor::from_vec(values(case + 90, s * h * g * dv), &[s, h, g, dv]).unwrap();
    (q, k, v, w)
}

/// The attention backward: native runs the scalar specification per head, compiled for the
/// CPU's vectors, so the gradients of q, k and v are the scalar backend's bit for bit
/// (including heads wide enough for the vector loops and odd widths for their tails).
#[test]
fn attention_backward_equals_the_scalar_spec_bit_for_bit() {
    use fucina::ops::{attention, Mask};
    let mut sz = Sizes::new(91);
    for case in 0..8 {
        let (s, h, g) = (sz.pick(1, 40), sz.pick(1, 4), sz.pick(1, 3));
        let (dk, dv) = if case % 2 == 0 { (32, 32) } else { (sz.pick(1, 45), sz.pick(1, 37)) };
        let t = s + sz.pick(0, 9);
        let mask = match case % 3 {
            0 => Mask::Causal(t - s),
            1 => Mask::Full,
            _ => Mask::Sliding { start: t - s, window: 3 },
        };
        let grads = || {
            let ctx = fucina::ExecContext::current();
            let (q, k, v, w) = attention_inputs(case, [s, h, g, t, dk, dv]);
            let scope = ctx.open_exec_scope();
            let y = attention(&q, &k, &v, 0.3, mask).unwrap();
            let loss = y.mul(&w).unwrap().sum::<(seq, kv_head, group, d)>().unwrap();
            loss.backward(&ctx).unwrap();
            drop(scope);
            [q.grad().unwrap().to_f32_vec(), k.grad().unwrap().to_f32_vec(), v.grad().unwrap().to_f32_vec()]
        };
        let (sc, nat) = on_both(grads);
        for (i, (a, b)) in sc.iter().zip(&nat).enumerate() {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "case {case} (s{s} h{h} g{g} t{t} dk{dk} dv{dv} {mask:?}): gradient #{i} differs");
        }
    }
}

/// Attention over Q8_0 keys and values (a quantized KV cache): native equals the scalar
/// spec (integer block sums are exact; 1e-5 covers the f32 accumulation order), and both
/// stay within 3e-2 of float attention over the unquantized rows (Q8_0 keeps ~1/254 of
/// each block's largest magnitude; the query is quantized too).
#[test]
fn q8_0_attention_matches_scalar_and_the_float_rows() {
    use fucina::ops::{attention, attention_q8_0, Mask, Q8Rows};
    use fucina::quant::{dequantize_q8_0, quantize_q8_0};
    let mut sz = Sizes::new(91);
    for case in 0..10 {
        let (s, h, g) = (sz.pick(1, 7), sz.pick(1, 3), sz.pick(1, 4));
        let (dk, dv) = (32 * sz.pick(1, 3), 32 * sz.pick(1, 2));
        let t = s + sz.pick(0, 12);
        let causal = match case % 4 {
            0 | 1 => Mask::Causal(t - s),
            2 => Mask::Full,
            _ => Mask::Sliding { start: t - s, window: 2 + (case % 3) as usize },
        };
        let q = Tensor::<axes![seq, kv_head, group, head_dim]>::from_vec(values(case, s * h * g * dk), &[s, h, g, dk])
            .unwrap();
        // Keys and values in one buffer of rows [key | value] (as a latent cache keeps them),
        // heads `cap` positions apart: strides and offsets in whole blocks.
        let (cap, w) = (t + 3, dk + dv);
        let raw = values(case + 40, h * cap * w);
        let bytes = quantize_q8_0(&raw);
        let k8 = Q8Rows::<head_dim>::new(&bytes, h, t, dk, 0, cap * w, w).unwrap();
        let v8 = Q8Rows::<d>::new(&bytes, h, t, dv, dk, cap * w, w).unwrap();
        let scale = 1.0 / (dk as f32).sqrt();
        let (sc, nat) = on_both(|| attention_q8_0(&q, &k8, &v8, scale, causal).unwrap().to_f32_vec());
        let name = format!("q8_0 attention s{s} h{h} g{g} t{t} dk{dk} dv{dv} {causal:?}");
        assert_close(&name, &nat, &sc, 1e-5, 1e-5 * (t as f32).sqrt());
        // Float attention over the rows before quantization.
        let deq = raw;
        let pick = |from: usize, width: usize| -> Vec<f32> {
            (0..h)
                .flat_map(|hh| (0..t).flat_map(move |j| (0..width).map(move |x| (hh, j, x))))
                .map(|(hh, j, x)| deq[(hh * cap + j) * w + from + x])
                .collect()
        };
        let k = Tensor::<axes![kv_head, kv_seq, head_dim]>::from_vec(pick(0, dk), &[h, t, dk]).unwrap();
        let v = Tensor::<axes![kv_head, kv_seq, d]>::from_vec(pick(dk, dv), &[h, t, dv]).unwrap();
        let float = contexts().0.scope(|| attention(&q, &k, &v, scale, causal).unwrap().to_f32_vec());
        assert_close(&format!("{name} vs float"), &sc, &float, 3e-2, 3e-2);
        // The decoded rows are what the kernel reads.
        assert_eq!(dequantize_q8_0(&bytes).len(), h * cap * w);
    }
    // Rows off block boundaries are refused.
    let bytes = quantize_q8_0(&values(1, 64));
    assert!(Q8Rows::<head_dim>::new(&bytes, 1, 1, 16, 0, 64, 32).is_err());
}

#[test]
fn rope_matches_scalar_and_rotates() {
    use fucina::ops::RopeStyle;
    let (s, h, d) = (5, 3, 8);
    let x = Tensor::<axes![seq, head, head_dim]>::from_vec(values(5, s * h * d), &[s, h, d]).unwrap();
    let ang: Vec<f32> = values(6, s * d / 2).iter().map(|v| v * 3.0).collect();
    let cos = Tensor::<axes![seq, head_dim]>::from_vec(ang.iter().map(|a| a.cos()).collect(), &[s, d / 2]).unwrap();
    let sin = Tensor::<axes![seq, head_dim]>::from_vec(ang.iter().map(|a| a.sin()).collect(), &[s, d / 2]).unwrap();
    for style in [RopeStyle::Halves, RopeStyle::Pairs] {
        let (sc, nat) = on_both(|| x.rope(&cos, &sin, style).unwrap().to_f32_vec());
        assert_close("rope", &nat, &sc, 1e-6, 1e-6);
        // A rotation keeps every pair's norm.
        let xv = x.to_f32_vec();
        let pair = |i: usize| if style == RopeStyle::Pairs { (2 * i, 2 * i + 1) } else { (i, i + d / 2) };
        for row in 0..s * h {
            for i in 0..d / 2 {
                let (a0, b0) = pair(i);
                let n0 = xv[row * d + a0].hypot(xv[row * d + b0]);
                let n1 = sc[row * d + a0].hypot(sc[row * d + b0]);
                assert!((n0 - n1).abs() < 1e-5, "{style:?} row {row} pair {i}");
            }
        }
    }
    let bad = Tensor::<axes![seq, head_dim]>::zeros(&[4, 4]).unwrap();
    let wide = Tensor::<axes![seq, head_dim]>::zeros(&[s, d / 2 + 1]).unwrap();
    assert!(x.rope(&wide, &wide, RopeStyle::Halves).is_err(), "tables wider than half the head");
    assert!(x.rope(&bad, &bad, RopeStyle::Halves).unwrap_err().to_string().contains("tables"));
}

/// Partial rotary embedding (tables narrower than half the head): the leading `2n` values
/// rotate exactly as a whole-head rope of width `2n` would, the rest pass through unchanged.
#[test]
fn partial_rope_rotates_the_leading_part_only() {
    use fucina::ops::RopeStyle;
    let (s, h, d, n) = (4, 2, 12, 2);
    let x = Tensor::<axes![seq, head, head_dim]>::from_vec(values(7, s * h * d), &[s, h, d]).unwrap();
    let ang: Vec<f32> = values(8, s * n).iter().map(|v| v * 3.0).collect();
    let cos = Tensor::<axes![seq, head_dim]>::from_vec(ang.iter().map(|a| a.cos()).collect(), &[s, n]).unwrap();
    let sin = Tensor::<axes![seq, head_dim]>::from_vec(ang.iter().map(|a| a.sin()).collect(), &[s, n]).unwrap();
    for style in [RopeStyle::Halves, RopeStyle::Pairs] {
        let (sc, nat) = on_both(|| x.rope(&cos, &sin, style).unwrap().to_f32_vec());
        assert_close("partial rope", &nat, &sc, 1e-6, 1e-6);
        let lead = x.narrow::<head_dim>(0, 2 * n).unwrap().rope(&cos, &sin, style).unwrap();
        let tail = x.narrow::<head_dim>(2 * n, d - 2 * n).unwrap();
        let want = Tensor::concat::<head_dim>(&[&lead, &tail]).unwrap().to_f32_vec();
        assert_eq!(sc, want, "{style:?}");
        let xv = x.to_f32_vec();
        assert!((0..s * h).all(|r| sc[r * d + 2 * n..(r + 1) * d] == xv[r * d + 2 * n..(r + 1) * d]));
        assert!((0..s * h).any(|r| sc[r * d..r * d + 2 * n] != xv[r * d..r * d + 2 * n]), "{style:?} rotated nothing");
    }
}

/// Side-by-side jobs (the experts of a decode step): in item order, each job's kernels run
/// serially with the context current, the same values on the worker team a forward drives
/// (`run_on_pool`), on the pool, and on one thread; the first error is returned.
#[test]
fn side_by_side_jobs_keep_order_and_values_on_the_team() {
    let x = Tensor::<axes![seq, hidden]>::from_vec(values(3, 64 * 96), &[64, 96]).unwrap();
    let job = |k: &usize| -> fucina::Result<Vec<f32>> { Ok(x.scale(*k as f32)?.softmax::<hidden>()?.to_f32_vec()) };
    let items: Vec<usize> = (1..=7).collect();
    let one = ExecContext::with_backend(BackendKind::Native, 1).unwrap();
    let want: Vec<Vec<f32>> = items.iter().map(|k| one.scope(|| job(k)).unwrap()).collect();
    let ctx = ExecContext::with_backend(BackendKind::Native, 3).unwrap();
    let on_team = ctx.run_on_pool(|| ctx.map_side_by_side(&items, job)).unwrap();
    let on_pool = ctx.scope(|| ctx.map_side_by_side(&items, job)).unwrap();
    assert_eq!(on_team, want);
    assert_eq!(on_pool, want);
    let failing = ctx.run_on_pool(|| {
        ctx.map_side_by_side(&items, |k| {
            if *k == 4 {
                Err(fucina::FucinaError::InvalidArgument { op: "job", msg: "four".into() })
            } else {
                job(k)
            }
        })
    });
    assert!(failing.unwrap_err().to_string().contains("four"));
}

/// A side-by-side job's kernels run on the thread that runs the job, whichever worker of the
/// team it is: handing them to the pool from a team helper (which is not a pool thread) woke a
/// pool thread per kernel to do what the helper then waited for, with three threads on two
/// cores (GLM-4.5-mini Q4_K decode: 120-136 tok/s against 153-163 once inline).
#[test]
fn side_by_side_kernels_run_on_the_jobs_own_thread() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ctx = ExecContext::with_backend(BackendKind::Native, 3).unwrap();
    let items: Vec<usize> = (0..16).collect();
    // A try proves something only if the team's helpers took jobs too; each job waits (up to
    // 200 ms) until a second one has started, and a try where one thread ran them all is
    // repeated (a busy machine may keep the helpers off the cores).
    for _ in 0..20 {
        let started = AtomicUsize::new(0);
        let out = ctx
            .run_on_pool(|| {
                ctx.map_side_by_side(&items, |_| {
                    started.fetch_add(1, Ordering::SeqCst);
                    let t0 = std::time::Instant::now();
                    while started.load(Ordering::SeqCst) < 2 && t0.elapsed().as_millis() < 200 {
                        std::hint::spin_loop();
                    }
                    let me = std::thread::current().id();
                    // Work far above the inline threshold: a helper used to send it to the pool.
                    Ok((me, ctx.run(1 << 30, |_| std::thread::current().id()) != me))
                })
            })
            .unwrap();
        let threads: std::collections::HashSet<_> = out.iter().map(|(t, _)| *t).collect();
        if threads.len() >= 2 {
            let hops = out.iter().filter(|(_, h)| *h).count();
            assert_eq!(hops, 0, "{hops} of {} jobs' kernels left their job's thread", out.len());
            return;
        }
    }
    panic!("in 20 tries the jobs always ran on one thread: nothing was checked");
}

#[test]
fn order_scan_compare_and_clamp_ops_match_scalar_bit_for_bit() {
    // Big enough for the native backend to split the work over threads.
    let mut all = shapes(9, 10);
    all.push((64, 129, 33, false));
    all.push((5, 300, 70, true));
    for (i, (sa, sb, sc, tr)) in all.into_iter().enumerate() {
        // Rounded values, so ties are common and the first-index rule is exercised.
        let x = tensor3(100 + i as u64, sa, sb, sc, tr).scale(8.0).unwrap();
        let x = Tensor::<axes![a, b, c]>::from_vec(x.to_f32_vec().iter().map(|v| v.round()).collect(), &[sa, sb, sc])
            .unwrap();
        let y = tensor3(200 + i as u64, 1, sb, sc, false).scale(8.0).unwrap().sum::<a>().unwrap();
        let k = sb.min(3);
        let tag = format!("{sa}x{sb}x{sc} t={tr}");
        let run = || {
            let (tv, ti) = x.topk::<b>(k).unwrap();
            vec![
                x.argmax::<b>().unwrap().to_f32_vec(),
                x.argmin::<c>().unwrap().to_f32_vec(),
                tv.to_f32_vec(),
                ti.to_f32_vec(),
                x.cumsum::<b>().unwrap().to_f32_vec(),
                x.cumsum::<a>().unwrap().to_f32_vec(),
                x.clamp(-2.0, 3.0).unwrap().to_f32_vec(),
                x.ge(&y).unwrap().to_f32_vec(),
                x.ne_scalar(0.0).unwrap().to_f32_vec(),
            ]
        };
        let (s, n) = on_both(run);
        for (j, (sv, nv)) in s.iter().zip(&n).enumerate() {
            assert_eq!(sv.len(), nv.len(), "{tag} output {j}");
            assert!(sv.iter().zip(nv).all(|(p, q)| p.to_bits() == q.to_bits()), "{tag} output {j} differs");
        }
    }
}

#[test]
fn conv2d_and_pooling_match_scalar_forward_and_backward() {
    use fucina::ops::{Conv2dOptions, PoolOptions};
    axis!(pub hh, pub ww, pub co);
    let mut s = Sizes::new(77);
    for round in 0..8 {
        let groups = [1, 2, 3][round % 3];
        let (n, cin, cout) = (s.pick(1, 3), groups * s.pick(1, 3), groups * s.pick(1, 4));
        let (h, w) = (s.pick(4, 19), s.pick(4, 23));
        let opts = Conv2dOptions {
            stride: [s.pick(1, 2), s.pick(1, 3)],
            padding: [s.pick(0, 2), s.pick(0, 1)],
            dilation: [s.pick(1, 2), 1],
            groups,
        };
        let x =
            Tensor::<axes![a, b, hh, ww]>::from_vec(values(round as u64, n * cin * h * w), &[n, cin, h, w]).unwrap();
        let wt = Tensor::<axes![co, b, hh, ww]>::from_vec(
            values(50 + round as u64, cout * (cin / groups) * 6),
            &[cout, cin / groups, 3, 2],
        )
        .unwrap();
        let pool = PoolOptions { kernel: [3, 2], stride: [2, 2], padding: [1, 0] };
        let run = || {
            let ctx = ExecContext::current();
            let _scope = ctx.open_exec_scope();
            let (xp, wp) = (x.clone().requires_grad(), wt.clone().requires_grad());
            let y = xp.conv2d::<b, hh, ww, co>(&wp, None, opts).unwrap();
            let m = xp.max_pool2d::<hh, ww>(pool).unwrap();
            let av = xp.avg_pool2d::<hh, ww>(pool).unwrap();
            let loss = y.square().unwrap().sum::<axes![a, co, hh, ww]>().unwrap();
            let loss = loss.add(&m.sum::<axes![a, b, hh, ww]>().unwrap()).unwrap();
            let loss = loss.add(&av.scale(3.0).unwrap().sum::<axes![a, b, hh, ww]>().unwrap()).unwrap();
            loss.backward(&ctx).unwrap();
            vec![
                y.to_f32_vec(),
                m.to_f32_vec(),
                av.to_f32_vec(),
                xp.grad().unwrap().to_f32_vec(),
                wp.grad().unwrap().to_f32_vec(),
            ]
        };
        let (sv, nv) = on_both(run);
        for (j, (p, q)) in sv.iter().zip(&nv).enumerate() {
            assert_close(&format!("round {round} output {j}"), q, p, 1e-4, 1e-4);
        }
    }
}

/// The streaming frame product (`Kernels::frames_gemm_acc`): native (4-frame, 8/4/1-column
/// register blocks) against the spec over odd widths, strided frames and frame counts that
/// leave every remainder; the operands' check refuses short buffers.
#[cfg(feature = "nam")]
#[test]
fn frame_products_agree() {
    use fucina::backend::frames::FrameGemm;
    use fucina::backend::BackendKind;
    let mut s = Sizes::new(91);
    let mut cases = vec![(1, 1, 1, 0, 0), (4, 3, 8, 0, 0), (5, 16, 13, 2, 1), (9, 2, 64, 0, 3)];
    for _ in 0..24 {
        cases.push((s.pick(1, 19), s.pick(1, 40), s.pick(1, 70), s.pick(0, 3), s.pick(0, 3)));
    }
    for (i, &(n, ni, no, xpad, opad)) in cases.iter().enumerate() {
        let g = FrameGemm { n, ni, no, xs: ni + xpad, os: no + opad };
        let x = values(1000 + i as u64, (n - 1) * g.xs + ni);
        let w = values(2000 + i as u64, ni * no);
        let start = values(3000 + i as u64, (n - 1) * g.os + no);
        g.check(&x, &w, &start).unwrap();
        let run = |kind: BackendKind| {
            let mut out = start.clone();
            kind.kernels().frames_gemm_acc(g, &x, &w, &mut out);
            out
        };
        let (spec, native) = (run(BackendKind::Scalar), run(BackendKind::Native));
        assert_close(&format!("frames {g:?}"), &native, &spec, 1e-5, 1e-5 * (ni as f32).sqrt());
        // The gaps between strided output frames are left alone.
        for t in 0..n - 1 {
            for o in no..g.os {
                assert_eq!(native[t * g.os + o], start[t * g.os + o], "gap written at frame {t}");
            }
        }
        assert!(g.check(&x[..x.len() - 1], &w, &start).is_err(), "short input accepted");
        assert!(g.check(&x, &w[..w.len() - 1], &start).is_err(), "short weight accepted");
    }
}

/// Power spectra: native's f32 FFT (realfft) against the scalar spec's f64 DFT, on odd and
/// composite lengths (odd `n_fft` has no Nyquist bin), windows shorter than the transform,
/// both centerings; within 1e-4 of the largest bin (f32 FFT rounding).
#[test]
fn power_spectrogram_matches_the_dft_spec() {
    use fucina::ops::{power_spectrogram, Centering, Stft};
    axis!(pub fr, pub bin);
    for (case, (len, n_fft, win, hop)) in
        [(100, 7, 7, 3), (301, 30, 25, 10), (1000, 255, 200, 64), (3217, 512, 400, 160), (64, 64, 64, 64)]
            .into_iter()
            .enumerate()
    {
        for centering in [Centering::Zeros, Centering::None] {
            let x = Tensor::<(sample,)>::from_vec(values(case as u64 + 300, len), &[len]).unwrap();
            let w = Tensor::<(sample,)>::from_vec(values(case as u64 + 400, win), &[win]).unwrap();
            let stft = Stft { n_fft, hop, centering };
            let (sc, nat) = on_both(|| {
                let p: Tensor<(fr, bin)> = power_spectrogram(&x, &w, &stft).unwrap();
                (p.shape().to_vec(), p.to_f32_vec())
            });
            assert_eq!(sc.0, nat.0);
            assert_eq!(sc.0, vec![stft.frames(len).unwrap(), n_fft / 2 + 1]);
            let energy = sc.1.iter().fold(0.0f32, |m, v| m.max(*v));
            assert_close(
                &format!("spectrum len{len} n{n_fft} w{win} h{hop} {centering:?}"),
                &nat.1,
                &sc.1,
                1e-4 * energy,
                1e-5,
            );
        }
    }
}

/// A block-diagonal causal mask (several sequences end to end in one call) gives what each
/// sequence gives alone under a causal mask: outputs and the gradients of q, k and v within
/// 1e-6, on both backends, for odd block lengths and grouped heads; bad block sizes are
/// errors naming them.
#[test]
fn block_mask_equals_one_call_per_sequence() {
    use fucina::ops::{attention, Mask};
    let mut sz = Sizes::new(117);
    for case in 0..8 {
        let (len, n, h, g) = (sz.pick(1, 7), sz.pick(1, 4), sz.pick(1, 3), sz.pick(1, 3));
        let (dk, dv) = (sz.pick(1, 9), sz.pick(1, 9));
        let s = len * n;
        let run = |blocks: bool| {
            let ctx = fucina::ExecContext::current();
            let (q, k, v, w) = attention_inputs(case, [s, h, g, s, dk, dv]);
            let scope = ctx.open_exec_scope();
            let y = if blocks {
                attention(&q, &k, &v, 0.3, Mask::Blocks { len }).unwrap()
            } else {
                let parts: Vec<_> = (0..n)
                    .map(|b| {
                        let kb = k.narrow::<kv_seq>(b * len, len).unwrap();
                        let vb = v.narrow::<kv_seq>(b * len, len).unwrap();
                        attention(&q.narrow::<seq>(b * len, len).unwrap(), &kb, &vb, 0.3, Mask::Causal(0)).unwrap()
                    })
                    .collect();
                Tensor::concat::<seq>(&parts.iter().collect::<Vec<_>>()).unwrap()
            };
            let loss = y.mul(&w).unwrap().sum::<(seq, kv_head, group, d)>().unwrap();
            loss.backward(&ctx).unwrap();
            drop(scope);
            [
                y.to_f32_vec(),
                q.grad().unwrap().to_f32_vec(),
                k.grad().unwrap().to_f32_vec(),
                v.grad().unwrap().to_f32_vec(),
            ]
        };
        for ctx in [contexts().0, contexts().1] {
            let (one, split) = ctx.scope(|| (run(true), run(false)));
            for (i, (a, b)) in one.iter().zip(&split).enumerate() {
                let what = format!("case {case} (len {len} x{n} h{h} g{g} dk{dk} dv{dv}) tensor #{i}");
                assert_close(&what, a, b, 1e-6, 0.0);
            }
        }
    }
    let q = Tensor::<axes![seq, kv_head, group, head_dim]>::zeros(&[6, 1, 1, 2]).unwrap();
    let k = Tensor::<axes![kv_head, kv_seq, head_dim]>::zeros(&[1, 6, 2]).unwrap();
    for len in [0, 4] {
        let e = attention(&q, &k, &k, 1.0, Mask::Blocks { len }).unwrap_err().to_string();
        assert!(e.contains(&format!("blocks of {len}")), "{e}");
    }
}
