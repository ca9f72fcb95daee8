//! `fucina::nn` layers against PyTorch's `torch.nn` modules (`tools/gen_nn_goldens.py`,
//! committed in `goldens/nn.json`): outputs and the gradients of the input and every
//! parameter, on both backends, within 1e-5 abs + 1e-5 rel. Initializers, dropout.

mod common;

use common::{assert_close, contexts};
use fucina::nn::{
    Affine, BatchNorm, Bias, Conv2d, Dropout, Embedding, Init, LayerNorm, Linear, Lstm, LstmCell, Mode,
    MultiHeadAttention, RmsNorm,
};
use fucina::ops::{Conv2dOptions, Mask};
use fucina::prelude::*;
use serde_json::Value;

axis!(pub a, pub b, pub height, pub width);

fn floats(v: &Value) -> Vec<f32> {
    v["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn shape(v: &Value) -> Vec<usize> {
    v["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect()
}

fn tensor<A: fucina::tensor::axes::Axes>(v: &Value) -> Tensor<A> {
    Tensor::from_vec(floats(v), &shape(v)).unwrap()
}

fn cases() -> Vec<Value> {
    let v: Value = serde_json::from_str(include_str!("goldens/nn.json")).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// Runs a layer with loss `sum(y * g)`; returns the output and the named gradients.
fn check(case: &Value, ctx: &ExecContext, run: impl Fn() -> (Vec<f32>, Vec<(String, Vec<f32>)>)) {
    let name = case["name"].as_str().unwrap();
    let (y, grads) = ctx.scope(|| {
        let _scope = ctx.open_exec_scope();
        run()
    });
    let what = format!("{name} on {:?}", ctx.backend());
    assert_close(&format!("{what}: output"), &y, &floats(&case["y"]), 1e-5, 1e-5);
    let want = case["grads"].as_object().unwrap();
    assert_eq!(grads.len(), want.len(), "{what}: gradient count");
    for (k, g) in grads {
        assert_close(&format!("{what}: d{k}"), &g, &floats(&want[&k]), 1e-5, 1e-5);
    }
}

#[test]
fn layers_match_torch_nn_outputs_and_gradients() {
    let all = cases();
    assert_eq!(all.len(), 10);
    let (s, n) = contexts();
    for case in &all {
        for ctx in [&s, &n] {
            let p = &case["params"];
            let g = &case["g"];
            let c = case.clone();
            match case["name"].as_str().unwrap() {
                "linear" => check(case, ctx, || {
                    let fc = Linear::<out, r#in>::new(tensor(&p["weight"]), Some(tensor(&p["bias"])));
                    let mut fc = fc;
                    fc.track_params();
                    let x = tensor::<axes![batch, seq, in]>(&c["x"]).requires_grad();
                    let y = fc.forward(&x).unwrap();
                    let gt = tensor::<axes![batch, seq, out]>(g);
                    y.mul(&gt).unwrap().sum::<axes![batch, seq, out]>().unwrap().backward(ctx).unwrap();
                    let gw = fc.weight.grad().unwrap().to_f32_vec();
                    let gb = fc.bias.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    let gx = x.grad().unwrap().to_f32_vec();
                    (y.to_f32_vec(), vec![("weight".into(), gw), ("bias".into(), gb), ("x".into(), gx)])
                }),
                "linear_no_bias" => check(case, ctx, || {
                    let mut fc = Linear::<out, r#in>::new(tensor(&p["weight"]), None);
                    fc.track_params();
                    let x = tensor::<axes![batch, in]>(&c["x"]).requires_grad();
                    let y = fc.forward(&x).unwrap();
                    y.mul(&tensor::<axes![batch, out]>(g))
                        .unwrap()
                        .sum::<axes![batch, out]>()
                        .unwrap()
                        .backward(ctx)
                        .unwrap();
                    let gw = fc.weight.grad().unwrap().to_f32_vec();
                    (y.to_f32_vec(), vec![("weight".into(), gw), ("x".into(), x.grad().unwrap().to_f32_vec())])
                }),
                "layer_norm" => check(case, ctx, || {
                    let eps = c["extra"]["eps"].as_f64().unwrap() as f32;
                    let mut ln = LayerNorm::<hidden>::new(6, eps, Affine::Learned).unwrap();
                    ln.weight = Some(tensor(&p["weight"]));
                    ln.bias = Some(tensor(&p["bias"]));
                    ln.track_params();
                    let x = tensor::<axes![batch, seq, hidden]>(&c["x"]).requires_grad();
                    let y = ln.forward(&x).unwrap();
                    let gt = tensor::<axes![batch, seq, hidden]>(g);
                    y.mul(&gt).unwrap().sum::<axes![batch, seq, hidden]>().unwrap().backward(ctx).unwrap();
                    let gw = ln.weight.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    let gb = ln.bias.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    (
                        y.to_f32_vec(),
                        vec![("weight".into(), gw), ("bias".into(), gb), ("x".into(), x.grad().unwrap().to_f32_vec())],
                    )
                }),
                "rms_norm" => check(case, ctx, || {
                    let eps = c["extra"]["eps"].as_f64().unwrap() as f32;
                    let mut rn = RmsNorm::<hidden>::new(6, eps, Affine::Learned).unwrap();
                    rn.weight = Some(tensor(&p["weight"]));
                    rn.track_params();
                    let x = tensor::<axes![seq, hidden]>(&c["x"]).requires_grad();
                    let y = rn.forward(&x).unwrap();
                    y.mul(&tensor::<axes![seq, hidden]>(g))
                        .unwrap()
                        .sum::<axes![seq, hidden]>()
                        .unwrap()
                        .backward(ctx)
                        .unwrap();
                    let gw = rn.weight.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    (y.to_f32_vec(), vec![("weight".into(), gw), ("x".into(), x.grad().unwrap().to_f32_vec())])
                }),
                "embedding" => check(case, ctx, || {
                    let mut emb = Embedding::<vocab, hidden>::new(tensor(&p["weight"]));
                    emb.track_params();
                    let ids: Vec<u32> = floats(&c["x"]).iter().map(|v| *v as u32).collect();
                    let ids = Tensor::<axes![batch, seq]>::from_vec(ids, &shape(&c["x"])).unwrap();
                    let y = emb.forward(&ids).unwrap();
                    let gt = tensor::<axes![batch, seq, hidden]>(g);
                    y.mul(&gt).unwrap().sum::<axes![batch, seq, hidden]>().unwrap().backward(ctx).unwrap();
                    (y.to_f32_vec(), vec![("weight".into(), emb.weight.grad().unwrap().to_f32_vec())])
                }),
                "mha_causal" | "mha_sliding" => check(case, ctx, || {
                    let inp = floats(&p["in_proj_weight"]);
                    let (e, h) = (8usize, c["extra"]["heads"].as_u64().unwrap() as usize);
                    let d = e / h;
                    let part = |k: usize| inp[k * e * e..(k + 1) * e * e].to_vec();
                    let mut mha = MultiHeadAttention::new(
                        Tensor::from_vec(part(0), &[h, 1, d, e]).unwrap(),
                        Tensor::from_vec(part(1), &[h, d, e]).unwrap(),
                        Tensor::from_vec(part(2), &[h, d, e]).unwrap(),
                        Tensor::from_vec(floats(&p["out_proj_weight"]), &[e, h, 1, d]).unwrap(),
                    )
                    .unwrap();
                    mha.track_params();
                    let mask = match c["extra"]["window"].as_u64() {
                        Some(w) => Mask::Sliding { start: 0, window: w as usize },
                        None => Mask::Causal(0),
                    };
                    let x = tensor::<axes![seq, hidden]>(&c["x"]).requires_grad();
                    let y = mha.forward(&x, mask).unwrap();
                    y.mul(&tensor::<axes![seq, hidden]>(g))
                        .unwrap()
                        .sum::<axes![seq, hidden]>()
                        .unwrap()
                        .backward(ctx)
                        .unwrap();
                    let mut gin = Vec::new();
                    for w in [
                        mha.wq.grad().unwrap().to_f32_vec(),
                        mha.wk.grad().unwrap().to_f32_vec(),
                        mha.wv.grad().unwrap().to_f32_vec(),
                    ] {
                        gin.extend(w);
                    }
                    let go = mha.wo.grad().unwrap().to_f32_vec();
                    let gx = x.grad().unwrap().to_f32_vec();
                    (
                        y.to_f32_vec(),
                        vec![("in_proj_weight".into(), gin), ("out_proj_weight".into(), go), ("x".into(), gx)],
                    )
                }),
                "batch_norm2d" => check(case, ctx, || {
                    let mut bn = BatchNorm::<channel>::new(3, 1e-5, 0.1, Affine::Learned).unwrap();
                    bn.weight = Some(tensor(&p["weight"]));
                    bn.bias = Some(tensor(&p["bias"]));
                    bn.track_params();
                    let x = tensor::<axes![batch, channel, height, width]>(&c["x"]).requires_grad();
                    let y = bn.forward(&x, Mode::Train).unwrap();
                    let gt = tensor::<axes![batch, channel, height, width]>(g);
                    y.mul(&gt).unwrap().sum::<axes![batch, channel, height, width]>().unwrap().backward(ctx).unwrap();
                    let e = &c["extra"];
                    assert_close(
                        "running_mean",
                        &bn.running_mean.to_f32_vec(),
                        &floats(&e["running_mean"]),
                        1e-6,
                        1e-5,
                    );
                    assert_close("running_var", &bn.running_var.to_f32_vec(), &floats(&e["running_var"]), 1e-6, 1e-5);
                    // Channels-last evaluation input: the same layer by name.
                    let xe = tensor::<axes![batch, channel, height, width]>(&e["eval_x"]);
                    let ye =
                        bn.forward(&xe.permute::<axes![height, width, batch, channel]>().unwrap(), Mode::Eval).unwrap();
                    let ye = ye.permute::<axes![batch, channel, height, width]>().unwrap();
                    assert_close("eval", &ye.to_f32_vec(), &floats(&e["eval_y"]), 1e-5, 1e-5);
                    let gw = bn.weight.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    let gb = bn.bias.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    (
                        y.to_f32_vec(),
                        vec![("weight".into(), gw), ("bias".into(), gb), ("x".into(), x.grad().unwrap().to_f32_vec())],
                    )
                }),
                "conv2d" => check(case, ctx, || {
                    let opts = Conv2dOptions { stride: [2, 1], padding: [1, 1], dilation: [1, 1], groups: 2 };
                    let mut conv = Conv2d::<out, channel, height, width> {
                        weight: tensor(&p["weight"]),
                        bias: Some(tensor(&p["bias"])),
                        options: opts,
                    };
                    conv.track_params();
                    let x = tensor::<axes![batch, channel, height, width]>(&c["x"]).requires_grad();
                    let y = conv.forward(&x).unwrap();
                    let gt = tensor::<axes![batch, out, height, width]>(g);
                    y.mul(&gt).unwrap().sum::<axes![batch, out, height, width]>().unwrap().backward(ctx).unwrap();
                    let gw = conv.weight.grad().unwrap().to_f32_vec();
                    let gb = conv.bias.as_ref().unwrap().grad().unwrap().to_f32_vec();
                    (
                        y.to_f32_vec(),
                        vec![("weight".into(), gw), ("bias".into(), gb), ("x".into(), x.grad().unwrap().to_f32_vec())],
                    )
                }),
                "lstm" => check(case, ctx, || {
                    let layer = |k: usize| {
                        let w = |n: &str| format!("{n}_l{k}");
                        let input = Linear::new(tensor(&p[w("weight_ih")]), Some(tensor(&p[w("bias_ih")])));
                        let recurrent = Linear::new(tensor(&p[w("weight_hh")]), Some(tensor(&p[w("bias_hh")])));
                        LstmCell::new(input, recurrent).unwrap()
                    };
                    let mut lstm = Lstm::new(vec![layer(0), layer(1)]).unwrap();
                    lstm.track_params();
                    let x = tensor::<axes![batch, seq, in]>(&c["x"]).requires_grad();
                    let gt = tensor::<axes![batch, seq, hidden]>(g);
                    let mut states = lstm.zero_state(2).unwrap();
                    let mut outs = Vec::new();
                    for t in 0..5 {
                        let xt = x.narrow::<seq>(t, 1).unwrap().permute::<axes![batch, in, seq]>().unwrap();
                        let h = lstm.step(&xt.sum::<seq>().unwrap(), &mut states).unwrap();
                        outs.push(h.unsqueeze::<seq>().unwrap().permute::<axes![batch, seq, hidden]>().unwrap());
                    }
                    let y = Tensor::concat::<seq>(&outs.iter().collect::<Vec<_>>()).unwrap();
                    y.mul(&gt).unwrap().sum::<axes![batch, seq, hidden]>().unwrap().backward(ctx).unwrap();
                    let mut grads = Vec::new();
                    for (k, cell) in lstm.layers.iter().enumerate() {
                        grads.push((format!("weight_ih_l{k}"), cell.input.weight.grad().unwrap().to_f32_vec()));
                        grads.push((
                            format!("bias_ih_l{k}"),
                            cell.input.bias.as_ref().unwrap().grad().unwrap().to_f32_vec(),
                        ));
                        grads.push((format!("weight_hh_l{k}"), cell.recurrent.weight.grad().unwrap().to_f32_vec()));
                        grads.push((
                            format!("bias_hh_l{k}"),
                            cell.recurrent.bias.as_ref().unwrap().grad().unwrap().to_f32_vec(),
                        ));
                    }
                    grads.push(("x".into(), x.grad().unwrap().to_f32_vec()));
                    (y.to_f32_vec(), grads)
                }),
                other => panic!("no runner for {other}"),
            }
        }
    }
}

#[test]
fn half_precision_weights_multiply_in_f32() {
    let w = Tensor::<axes![out, in]>::from_vec((0..12).map(|i| i as f32 * 0.25 - 1.0).collect(), &[3, 4]).unwrap();
    let x = Tensor::<axes![batch, in]>::from_vec(vec![1.0, -2.0, 0.5, 3.0], &[1, 4]).unwrap();
    let ctx = ExecContext::new(ExecConfig::default()).unwrap();
    assert!(Linear::<out, r#in>::init(&ctx, 4, 3, Bias::Without).unwrap().bias.is_none());
    assert_eq!(Linear::<out, r#in>::init(&ctx, 4, 3, Bias::With).unwrap().num_params(), 15);
    let want = Linear::new(w.clone(), None).forward(&x).unwrap().to_f32_vec();
    for dt in [DType::F16, DType::BF16] {
        // These weights are exact in both half types, so the products agree exactly.
        let got = Linear::new(w.cast(dt).unwrap(), None).forward(&x).unwrap().to_f32_vec();
        assert_eq!(got, want, "{dt:?}");
    }
}

#[test]
fn initializers_have_torchs_bounds_and_spreads_and_repeat_under_a_seed() {
    let ctx = || ExecContext::new(ExecConfig { seed: 11, ..ExecConfig::default() }).unwrap();
    let stats = |v: &[f32]| {
        let m = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / v.len() as f32;
        (m, var.sqrt(), v.iter().fold(0.0f32, |a, x| a.max(x.abs())))
    };
    let (fan_in, fan_out) = (200usize, 300usize);
    let sh = [fan_out, fan_in];
    let cases = [
        (Init::KaimingUniform { gain: 2f32.sqrt() }, (6.0 / fan_in as f32).sqrt(), Some((6.0 / fan_in as f32).sqrt())),
        (Init::KaimingNormal { gain: 2f32.sqrt() }, (2.0 / fan_in as f32).sqrt() * 3f32.sqrt(), None),
        (Init::XavierUniform { gain: 1.0 }, (6.0 / (fan_in + fan_out) as f32).sqrt(), Some((6.0 / 500.0f32).sqrt())),
        (Init::XavierNormal { gain: 1.0 }, (2.0 / 500.0f32).sqrt() * 3f32.sqrt(), None),
        (Init::TORCH_LINEAR, (1.0 / fan_in as f32).sqrt(), Some((1.0 / fan_in as f32).sqrt())),
    ];
    for (init, uniform_bound_or_3std, bound) in cases {
        let w: Tensor<axes![out, in]> = init.tensor(&ctx(), &sh).unwrap();
        let v = w.to_f32_vec();
        let (m, sd, max) = stats(&v);
        // A uniform in ±b has std b / sqrt(3); a normal's std is given as 3 std / sqrt(3).
        let want_sd = uniform_bound_or_3std / 3f32.sqrt();
        assert!(m.abs() < 0.05 * want_sd * 3.0, "{init:?}: mean {m}");
        assert!((sd / want_sd - 1.0).abs() < 0.03, "{init:?}: std {sd} vs {want_sd}");
        if let Some(b) = bound {
            assert!(max <= b && max > 0.98 * b, "{init:?}: max {max} vs bound {b}");
        }
        let again: Tensor<axes![out, in]> = init.tensor(&ctx(), &sh).unwrap();
        assert_eq!(again.to_f32_vec(), v, "{init:?}: same seed, same tensor");
    }
    assert!(Init::KaimingUniform { gain: 1.0 }.tensor::<axes![a, b]>(&ctx(), &[4, 0]).is_err());
}

#[test]
fn dropout_is_seeded_the_same_on_every_backend_and_thread_count_and_passes_scaled_gradients() {
    let x = Tensor::<axes![a, b]>::from_vec((0..600).map(|i| (i as f32 * 0.37).sin()).collect(), &[20, 30]).unwrap();
    let drop = Dropout::new(0.3).unwrap();
    let run = |backend: BackendKind, threads: usize| {
        let ctx = ExecContext::new(ExecConfig { seed: 42, backend, threads: Some(threads), ..ExecConfig::default() })
            .unwrap();
        ctx.scope(|| {
            let _s = ctx.open_exec_scope();
            let xp = x.clone().requires_grad();
            let y = drop.forward(&xp, Mode::Train).unwrap();
            y.sum::<axes![a, b]>().unwrap().backward(&ctx).unwrap();
            (y.to_f32_vec(), xp.grad().unwrap().to_f32_vec())
        })
    };
    let (y, g) = run(BackendKind::Scalar, 1);
    assert_eq!(run(BackendKind::Native, 1), (y.clone(), g.clone()));
    assert_eq!(run(BackendKind::Native, 2), (y.clone(), g.clone()));
    let scale = 1.0 / 0.7f32;
    for ((yv, gv), xv) in y.iter().zip(&g).zip(x.to_f32_vec()) {
        if *gv == 0.0 {
            assert_eq!(*yv, 0.0);
        } else {
            assert!((gv - scale).abs() < 1e-6 && (yv - xv * scale).abs() < 1e-6);
        }
    }
    let dropped = g.iter().filter(|v| **v == 0.0).count() as f32 / g.len() as f32;
    assert!((dropped - 0.3).abs() < 0.05, "dropped {dropped}");
    assert_eq!(drop.forward(&x, Mode::Eval).unwrap().to_f32_vec(), x.to_f32_vec());
    assert!(Dropout::new(1.0).is_err() && Dropout::new(-0.1).is_err() && Dropout::new(f32::NAN).is_err());
}

/// nn::Conv1d: PyTorch's init bounds (weight and bias within 1/sqrt(in * k), spread over
/// the range) and its forward is the conv1d op on its parameters (the op itself is held to
/// torch.nn.functional.conv1d in torch_parity).
#[test]
fn conv1d_layer_init_and_forward() {
    use fucina::nn::Conv1d;
    use fucina::ops::{Conv1dOptions, Padding};
    let ctx = ExecContext::new(ExecConfig { seed: 11, ..ExecConfig::default() }).unwrap();
    let _g = ctx.enter();
    let opts = Conv1dOptions { dilation: 2, padding: Padding::Same };
    let conv = Conv1d::<out, channel, seq>::init(&ctx, 5, 7, 3, opts, Bias::With).unwrap();
    let bound = 1.0 / (15.0f32).sqrt();
    let w = conv.weight.to_f32_vec();
    assert_eq!(conv.weight.shape(), &[7, 5, 3]);
    assert!(w.iter().all(|v| v.abs() <= bound), "weight outside ±{bound}");
    assert!(w.iter().cloned().fold(0.0f32, f32::max) > 0.8 * bound, "weights do not fill the range");
    assert!(conv.bias.as_ref().unwrap().to_f32_vec().iter().all(|v| v.abs() <= bound));
    let x = Tensor::<axes![batch, seq, channel]>::from_vec(
        (0..2 * 9 * 5).map(|i| (i % 7) as f32 - 3.0).collect(),
        &[2, 9, 5],
    )
    .unwrap();
    let y = conv.forward(&x).unwrap();
    let want = x.conv1d::<channel, seq, out>(&conv.weight, conv.bias.as_ref(), opts).unwrap();
    assert_eq!(y.shape(), &[2, 9, 7]);
    assert_eq!(y.to_f32_vec(), want.to_f32_vec());
    assert_eq!(conv.param_names(), ["weight", "bias"]);
}
