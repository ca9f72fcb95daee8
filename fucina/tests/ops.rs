//! Semantics of the ops on the scalar spec, against hand-computed values and naive loops,
//! and the runtime errors for sizes the type system cannot see.

mod common;

use common::{assert_close, values};
use fucina::prelude::*;
use fucina::FucinaError;

axis!(pub a, pub b, pub c, pub k);

fn scalar() -> ExecContext {
    ExecContext::with_backend(BackendKind::Scalar, 1).unwrap()
}

#[test]
fn contraction_matches_naive_loops_and_names_result_axes() {
    let _g = scalar().enter();
    let (m, kk, n) = (3, 4, 5);
    let xv = values(1, m * kk);
    let wv = values(2, n * kk);
    let x = Tensor::<axes![batch, in]>::from_vec(xv.clone(), &[m, kk]).unwrap();
    let w = Tensor::<axes![out, in]>::from_vec(wv.clone(), &[n, kk]).unwrap();
    let y: Tensor<axes![batch, out]> = einsum!(x, w; in ->).unwrap();
    let mut naive = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            naive[i * n + j] = (0..kk).map(|p| xv[i * kk + p] * wv[j * kk + p]).sum();
        }
    }
    assert_close("einsum short", &y.to_f32_vec(), &naive, 1e-6, 1e-6);
    let y2: Tensor<axes![out, batch]> = einsum!(x, w; batch in, out in -> out batch).unwrap();
    let y2t = y2.permute::<axes![batch, out]>().unwrap();
    assert_close("einsum explicit", &y2t.to_f32_vec(), &naive, 1e-6, 1e-6);
    let y3 = x.dot::<r#in, _>(&w).unwrap();
    assert_eq!(y3.axis_names(), vec!["batch", "out"]);
    // Summing an axis present in only one operand: sum_k x[b,k] * sum_o w[o,k] ... over in.
    let s: Tensor<axes![batch]> = einsum!(x, w; batch in, out in -> batch).unwrap();
    let want: Vec<f32> = (0..m).map(|i| naive[i * n..(i + 1) * n].iter().sum()).collect();
    assert_close("einsum sum-out", &s.to_f32_vec(), &want, 1e-5, 1e-5);
    let t: Tensor<axes![in, batch]> = einsum!(x; batch in -> in batch).unwrap();
    assert_eq!(t.shape(), &[kk, m]);
}

#[test]
fn elementwise_values() {
    let _g = scalar().enter();
    let x = Tensor::<axes![a]>::from_vec(vec![-2.0f32, -0.5, 0.0, 0.5, 3.0], &[5]).unwrap();
    let exact =
        |f: fn(f64) -> f64| -> Vec<f32> { [-2.0f64, -0.5, 0.0, 0.5, 3.0].iter().map(|v| f(*v) as f32).collect() };
    assert_close("tanh", &x.tanh().unwrap().to_f32_vec(), &exact(f64::tanh), 1e-7, 1e-6);
    assert_close("sigmoid", &x.sigmoid().unwrap().to_f32_vec(), &exact(|v| 1.0 / (1.0 + (-v).exp())), 1e-7, 1e-6);
    assert_close("silu", &x.silu().unwrap().to_f32_vec(), &exact(|v| v / (1.0 + (-v).exp())), 1e-7, 1e-6);
    // GELU(erf) reference values from the normal CDF: Phi(-2)=0.0227501, Phi(-0.5)=0.3085375, Phi(0.5)=0.6914625, Phi(3)=0.9986501
    let gelu = [-2.0 * 0.022_750_13, -0.5 * 0.308_537_5, 0.0, 0.5 * 0.691_462_5, 3.0 * 0.998_650_1];
    assert_close("gelu", &x.gelu().unwrap().to_f32_vec(), &gelu, 2e-6, 1e-6);
    assert_close("softplus", &x.softplus().unwrap().to_f32_vec(), &exact(|v| (1.0 + v.exp()).ln()), 1e-7, 1e-6);
    assert_eq!(x.relu().unwrap().to_f32_vec(), vec![0.0, 0.0, 0.0, 0.5, 3.0]);
    assert_eq!(x.affine(2.0, 1.0).unwrap().to_f32_vec(), vec![-3.0, 0.0, 1.0, 2.0, 7.0]);
}

#[test]
fn broadcasting_by_axis_name_ignores_order() {
    let _g = scalar().enter();
    let x = Tensor::<axes![a, b]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let col = Tensor::<axes![a]>::from_vec(vec![10.0f32, 20.0], &[2]).unwrap();
    let row = Tensor::<axes![b]>::from_vec(vec![100.0f32, 200.0, 300.0], &[3]).unwrap();
    assert_eq!(x.add(&col).unwrap().to_f32_vec(), vec![11.0, 12.0, 13.0, 24.0, 25.0, 26.0]);
    assert_eq!(x.add(&row).unwrap().to_f32_vec(), vec![101.0, 202.0, 303.0, 104.0, 205.0, 306.0]);
    let xt = x.permute::<axes![b, a]>().unwrap();
    assert_eq!(x.sub(&xt).unwrap().to_f32_vec(), vec![0.0; 6]);
    let err = x.add(&Tensor::<axes![b]>::zeros(&[4]).unwrap()).unwrap_err();
    assert_eq!(err, FucinaError::ShapeMismatch { axis: "b".into(), left: 3, right: 4 });
    assert!(err.to_string().contains("axis `b`"));
}

#[test]
fn reductions_and_softmax_values() {
    let _g = scalar().enter();
    let x = Tensor::<axes![a, b]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    assert_eq!(x.sum::<b>().unwrap().to_f32_vec(), vec![6.0, 15.0]);
    assert_eq!(x.sum::<a>().unwrap().to_f32_vec(), vec![5.0, 7.0, 9.0]);
    assert_eq!(x.sum::<(a, b)>().unwrap().item().unwrap(), 21.0);
    assert_eq!(x.mean::<a>().unwrap().to_f32_vec(), vec![2.5, 3.5, 4.5]);
    assert_eq!(x.max::<b>().unwrap().to_f32_vec(), vec![3.0, 6.0]);
    let lse = x.logsumexp::<b>().unwrap().to_f32_vec();
    let want = [(1f64.exp() + 2f64.exp() + 3f64.exp()).ln() as f32, (4f64.exp() + 5f64.exp() + 6f64.exp()).ln() as f32];
    assert_close("lse", &lse, &want, 1e-6, 1e-6);
    let sm = x.softmax::<a>().unwrap();
    let col0 = [1.0 / (1.0 + 3f32.exp()), 3f32.exp() / (1.0 + 3f32.exp())];
    let v = sm.to_f32_vec();
    assert_close("softmax col", &[v[0], v[3]], &col0, 1e-7, 1e-6);
    let ls = x.log_softmax::<b>().unwrap().exp().unwrap().sum::<b>().unwrap();
    assert_close("log_softmax normalises", &ls.to_f32_vec(), &[1.0, 1.0], 1e-6, 0.0);
}

#[test]
fn norms_values() {
    let _g = scalar().enter();
    let x = Tensor::<axes![a, b]>::from_vec(vec![1.0f32, 2.0, 3.0, -1.0, 0.0, 1.0], &[2, 3]).unwrap();
    let w = Tensor::<axes![b]>::from_vec(vec![1.0f32, 2.0, 0.5], &[3]).unwrap();
    let r = x.rms_norm::<b>(Some(&w), 0.0).unwrap().to_f32_vec();
    let s1 = (14.0f32 / 3.0).sqrt();
    let s2 = (2.0f32 / 3.0).sqrt();
    assert_close("rms", &r, &[1.0 / s1, 4.0 / s1, 1.5 / s1, -1.0 / s2, 0.0, 0.5 / s2], 1e-6, 1e-6);
    let l = x.layer_norm::<b>(None, None, 0.0).unwrap().to_f32_vec();
    let sd = (2.0f32 / 3.0).sqrt();
    assert_close("layer", &l, &[-1.0 / sd, 0.0, 1.0 / sd, -1.0 / sd, 0.0, 1.0 / sd], 1e-6, 1e-6);
    let bad = Tensor::<axes![b]>::ones(&[4]).unwrap();
    assert!(matches!(x.rms_norm::<b>(Some(&bad), 1e-6), Err(FucinaError::ShapeMismatch { .. })));
}

#[test]
fn conv1d_causal_dilated_matches_definition() {
    axis!(pub n, pub ch, pub t, pub o);
    let _g = scalar().enter();
    let x = Tensor::<axes![n, ch, t]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5]).unwrap();
    let w = Tensor::<axes![o, ch, t]>::from_vec(vec![1.0f32, 10.0], &[1, 1, 2]).unwrap();
    // causal, dilation 2: y[t] = 1*x[t-2] + 10*x[t]
    let y = x.conv1d::<ch, t, o>(&w, None, Conv1dOptions { dilation: 2, padding: Padding::Causal }).unwrap();
    assert_eq!(y.to_f32_vec(), vec![10.0, 20.0, 31.0, 42.0, 53.0]);
    let v = x.conv1d::<ch, t, o>(&w, None, Conv1dOptions { dilation: 1, padding: Padding::Valid }).unwrap();
    assert_eq!(v.to_f32_vec(), vec![21.0, 32.0, 43.0, 54.0]);
    let too_long = Tensor::<axes![o, ch, t]>::ones(&[1, 1, 9]).unwrap();
    let err = x.conv1d::<ch, t, o>(&too_long, None, Conv1dOptions::default()).unwrap_err();
    assert!(err.to_string().contains("shorter than the kernel span"), "{err}");
}

#[test]
fn views_share_storage_and_check_bounds() {
    let _g = scalar().enter();
    let x = Tensor::<axes![a, b]>::from_vec((0..12).map(|v| v as f32).collect(), &[3, 4]).unwrap();
    let n = x.narrow::<b>(1, 2).unwrap();
    assert_eq!(n.to_f32_vec(), vec![1.0, 2.0, 5.0, 6.0, 9.0, 10.0]);
    assert!(std::sync::Arc::ptr_eq(n.raw().storage(), x.raw().storage()));
    assert!(matches!(x.narrow::<b>(3, 2), Err(FucinaError::OutOfRange { .. })));
    let parts = x.split::<a>(&[1, 2]).unwrap();
    assert_eq!(parts[1].to_f32_vec(), (4..12).map(|v| v as f32).collect::<Vec<_>>());
    let joined = Tensor::concat::<a>(&[&parts[1], &parts[0]]).unwrap();
    assert_eq!(joined.to_f32_vec()[8..], [0.0, 1.0, 2.0, 3.0]);
    let r = x.reshape::<axes![c]>(&[12]).unwrap();
    assert!(std::sync::Arc::ptr_eq(r.raw().storage(), x.raw().storage()));
    let rt = x.permute::<axes![b, a]>().unwrap().reshape::<axes![c]>(&[12]).unwrap();
    assert_eq!(&rt.to_f32_vec()[..4], &[0.0, 4.0, 8.0, 1.0]);
    assert!(matches!(x.reshape::<axes![c]>(&[11]), Err(FucinaError::ElementCount { .. })));
    let renamed: Tensor<axes![a, k]> = x.rename::<b, k>().unwrap();
    assert_eq!(renamed.size::<k>(), 4);
}

#[test]
fn gather_embedding_where_cast() {
    axis!(pub v, pub h, pub s);
    let _g = scalar().enter();
    let table = Tensor::<axes![v, h]>::from_vec((0..6).map(|x| x as f32).collect(), &[3, 2]).unwrap();
    let ids = Tensor::<axes![s]>::from_vec(vec![2u32, 0, 2], &[3]).unwrap();
    let e: Tensor<axes![s, h]> = table.embedding(&ids).unwrap();
    assert_eq!(e.to_f32_vec(), vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]);
    let bad = Tensor::<axes![s]>::from_vec(vec![3u32], &[1]).unwrap();
    assert_eq!(table.embedding(&bad).unwrap_err(), FucinaError::OutOfRange { axis: "v".into(), index: 3, size: 3 });
    let float_ids = Tensor::<axes![s]>::zeros(&[1]).unwrap();
    assert!(matches!(table.embedding(&float_ids), Err(FucinaError::DTypeMismatch { .. })));

    let x = Tensor::<axes![a, b]>::from_vec(vec![10.0f32, 11.0, 12.0, 20.0, 21.0, 22.0], &[2, 3]).unwrap();
    let idx = Tensor::<axes![a, b]>::from_vec(vec![2u32, 2, 0, 0], &[2, 2]).unwrap();
    assert_eq!(x.gather::<b>(&idx).unwrap().to_f32_vec(), vec![12.0, 12.0, 20.0, 20.0]);

    let mask = Tensor::<axes![b]>::from_vec(vec![0.0f32, 1.0, 0.0], &[3]).unwrap();
    let m = x.masked_fill(&mask, f32::NEG_INFINITY).unwrap().to_f32_vec();
    assert_eq!(m[1], f32::NEG_INFINITY);
    assert_eq!(m[3], 20.0);
    let h = x.cast(DType::BF16).unwrap();
    assert_eq!(h.dtype(), DType::BF16);
    assert_eq!(h.cast(DType::F32).unwrap().to_f32_vec(), vec![10.0, 11.0, 12.0, 20.0, 21.0, 22.0]);
    let f16 = Tensor::<axes![a]>::from_vec(vec![1.0f32 / 3.0], &[1]).unwrap().cast(DType::F16).unwrap();
    assert_eq!(f16.to_vec::<half::f16>().unwrap()[0], half::f16::from_f32(1.0 / 3.0));
}

#[test]
fn construction_errors_name_the_problem() {
    let e = Tensor::<axes![a, b]>::from_vec(vec![1.0f32; 5], &[2, 3]).unwrap_err();
    assert!(matches!(e, FucinaError::ElementCount { expected: 6, got: 5, .. }));
    let e = Tensor::<axes![a, b]>::zeros(&[2]).unwrap_err();
    assert!(e.to_string().contains("need 2 sizes"), "{e}");
    let raw = fucina::RawTensor::from_buffer(fucina::storage::Buffer::F32(vec![0.0; 4]), &[2, 2]).unwrap();
    assert!(Tensor::<(a, a)>::from_raw(raw).unwrap_err().to_string().contains("duplicate axis `a`"));
}

#[test]
fn half_precision_ops_keep_their_dtype() {
    let _g = scalar().enter();
    let x = Tensor::<axes![a]>::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap().cast(DType::F16).unwrap();
    let y = x.exp().unwrap();
    assert_eq!(y.dtype(), DType::F16);
    assert_close("f16 exp", &y.to_f32_vec(), &[1f32.exp(), 2f32.exp(), 3f32.exp()], 1e-2, 1e-3);
    let z = x.add(&Tensor::<axes![a]>::ones(&[3]).unwrap()).unwrap();
    assert_eq!(z.dtype(), DType::F32);
}

#[test]
fn axis_surgery_matches_row_major_reshapes_and_checks_sizes() {
    let _g = scalar().enter();
    let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let x = Tensor::<axes![a, b, c]>::from_vec(v.clone(), &[2, 6, 2]).unwrap();
    // Splitting b = (head 3, head_dim 2): element [i, h, d, j] is x[i, 2h + d, j]; the parts go last.
    let y = x.split_axis::<b, axes![head, head_dim]>(&[3, 2]).unwrap();
    assert_eq!(y.axis_names(), vec!["a", "c", "head", "head_dim"]);
    let got = y.permute::<axes![a, head, head_dim, c]>().unwrap().to_f32_vec();
    assert_eq!(got, v, "a row-major view of the same numbers");
    // Merging (a, c) gathers a*2 + c outermost-first.
    let m = x.merge_axes::<axes![a, c], k>().unwrap();
    assert_eq!(m.axis_names(), vec!["b", "k"]);
    assert_eq!(m.shape(), &[6, 4]);
    let mv = m.to_f32_vec();
    for bb in 0..6 {
        for (kk, (i, j)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
            assert_eq!(mv[bb * 4 + kk], v[i * 12 + bb * 2 + j]);
        }
    }
    // A contiguous merge of the last axes is a view of the same storage.
    let tail = x.merge_axes::<axes![b, c], k>().unwrap();
    assert_eq!(tail.to_f32_vec(), v);
    assert!(tail.is_contiguous());
    assert!(matches!(
        x.split_axis::<b, axes![head, head_dim]>(&[4, 2]),
        Err(FucinaError::InvalidArgument { op: "split_axis", .. })
    ));
    assert!(x.split_axis::<b, axes![head, head_dim]>(&[6]).is_err());
}

/// conv1d by axis name: the same signal stored time-major ([t, n, ch]) gives the same output
/// and the same input, weight and bias gradients as the channel-major layout.
#[test]
fn conv1d_by_name_in_any_layout() {
    axis!(pub n, pub ch, pub t, pub o);
    let _g = scalar().enter();
    let xv: Vec<f32> = (0..2 * 3 * 7).map(|i| ((i * 13) % 11) as f32 * 0.25 - 1.0).collect();
    let wv: Vec<f32> = (0..4 * 3 * 2).map(|i| ((i * 7) % 5) as f32 * 0.5 - 1.0).collect();
    let run = |time_major: bool| {
        let ctx = ExecContext::current();
        let _scope = ctx.open_exec_scope();
        let x = Tensor::<axes![n, ch, t]>::from_vec(xv.clone(), &[2, 3, 7]).unwrap();
        // Time-major storage, or a strided time-major view of channel-major storage.
        let view = x.permute::<axes![t, n, ch]>().unwrap();
        let x = if time_major { view.contiguous().unwrap() } else { view };
        let x = x.requires_grad();
        let w = Tensor::<axes![o, ch, t]>::from_vec(wv.clone(), &[4, 3, 2]).unwrap().requires_grad();
        let b = Tensor::<axes![o]>::from_vec(vec![0.5, -0.5, 1.0, 0.0], &[4]).unwrap().requires_grad();
        let opts = Conv1dOptions { dilation: 2, padding: Padding::Causal };
        let y: Tensor<axes![t, n, o]> = x.conv1d::<ch, t, o>(&w, Some(&b), opts).unwrap();
        let loss = y.mul(&y).unwrap().sum::<axes![t, n, o]>().unwrap();
        loss.backward(&ctx).unwrap();
        let gx = x.grad().unwrap().permute::<axes![n, ch, t]>().unwrap().to_f32_vec();
        (
            y.permute::<axes![n, o, t]>().unwrap().to_f32_vec(),
            gx,
            w.grad().unwrap().to_f32_vec(),
            b.grad().unwrap().to_f32_vec(),
        )
    };
    let reference = {
        let ctx = ExecContext::current();
        let _scope = ctx.open_exec_scope();
        let x = Tensor::<axes![n, ch, t]>::from_vec(xv.clone(), &[2, 3, 7]).unwrap().requires_grad();
        let w = Tensor::<axes![o, ch, t]>::from_vec(wv.clone(), &[4, 3, 2]).unwrap().requires_grad();
        let b = Tensor::<axes![o]>::from_vec(vec![0.5, -0.5, 1.0, 0.0], &[4]).unwrap().requires_grad();
        let opts = Conv1dOptions { dilation: 2, padding: Padding::Causal };
        let y: Tensor<axes![n, o, t]> = x.conv1d::<ch, t, o>(&w, Some(&b), opts).unwrap();
        let loss = y.mul(&y).unwrap().sum::<axes![n, o, t]>().unwrap();
        loss.backward(&ctx).unwrap();
        (y.to_f32_vec(), x.grad().unwrap().to_f32_vec(), w.grad().unwrap().to_f32_vec(), b.grad().unwrap().to_f32_vec())
    };
    for time_major in [true, false] {
        let got = run(time_major);
        assert_eq!(got.0, reference.0, "output, time-major={time_major}");
        for (what, a, b) in
            [("input", &got.1, &reference.1), ("weight", &got.2, &reference.2), ("bias", &got.3, &reference.3)]
        {
            for (p, q) in a.iter().zip(b.iter()) {
                assert!(
                    (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                    "{what} gradient, time-major={time_major}: {p} vs {q}"
                );
            }
        }
    }
}

#[test]
fn views_read_back_in_row_major_order_of_the_view() {
    // Permuted, narrowed and both: the last axis contiguous (read by rows) or strided (read
    // element by element), f32 and f16 storage, against indices computed by hand.
    let (na, nb, nc) = (3, 4, 5);
    let data: Vec<f32> = (0..na * nb * nc).map(|v| v as f32).collect();
    let at = |i: usize, j: usize, l: usize| (i * nb * nc + j * nc + l) as f32;
    let x = Tensor::<axes![a, b, c]>::from_vec(data.clone(), &[na, nb, nc]).unwrap();
    let x16 = Tensor::<axes![a, b, c]>::from_vec(data.iter().map(|v| half::f16::from_f32(*v)).collect(), &[na, nb, nc])
        .unwrap();
    for t in [&x, &x16] {
        // [b, a, c]: rows of c stay whole.
        let v = t.permute::<axes![b, a, c]>().unwrap().narrow::<c>(1, 3).unwrap();
        let want: Vec<f32> =
            (0..nb).flat_map(|j| (0..na).flat_map(move |i| (1..4).map(move |l| at(i, j, l)))).collect();
        assert_eq!(v.to_f32_vec(), want);
        // [c, b, a]: the last axis strided.
        let v = t.permute::<axes![c, b, a]>().unwrap().narrow::<b>(2, 2).unwrap();
        let want: Vec<f32> =
            (0..nc).flat_map(|l| (2..4).flat_map(move |j| (0..na).map(move |i| at(i, j, l)))).collect();
        assert_eq!(v.to_f32_vec(), want);
    }
    let v = x.narrow::<a>(1, 2).unwrap().permute::<axes![b, a, c]>().unwrap();
    let want: Vec<f32> = (0..nb).flat_map(|j| (1..3).flat_map(move |i| (0..nc).map(move |l| at(i, j, l)))).collect();
    assert_eq!(v.to_vec::<f32>().unwrap(), want);
}
