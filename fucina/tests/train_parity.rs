//! Gradients of small graphs and optimizer trajectories against PyTorch goldens
//! (`tools/gen_train_goldens.py`, committed as `goldens/train.json`).
//!
//! Tolerances: losses and gradients 2e-5 abs + 2e-5 rel on both backends; optimizer
//! trajectories (5 steps) must be bit-identical to torch.optim (tolerance 0).

mod common;

use common::{assert_close, contexts};
use fucina::nn::{bce_with_logits, cross_entropy, mse_loss};
use fucina::optim::{AdamW, Optimizer, Sgd};
use fucina::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

axis!(pub h, pub qs, pub ks, pub d, pub ch, pub tm, pub oc, pub v, pub e, pub s);

fn golden() -> Value {
    serde_json::from_str(include_str!("goldens/train.json")).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn shape(v: &Value) -> Vec<usize> {
    v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

fn leaf<A: fucina::tensor::axes::Axes>(g: &Value, k: &str) -> Tensor<A> {
    let t = &g["inputs"][k];
    Tensor::from_vec(floats(&t["data"]), &shape(t)).unwrap().requires_grad()
}

fn signal(shape: &[usize], seed: f64) -> Vec<f32> {
    let n: usize = shape.iter().product();
    (0..n).map(|i| ((0.7 * i as f64 + 1.3 * seed).sin() + 0.1 * (0.31 * i as f64 * seed).cos()) as f32).collect()
}

/// Runs golden graph `g`; returns the loss and the gradients by input name.
fn run_graph(ctx: &ExecContext, g: &Value) -> (f32, BTreeMap<String, Vec<f32>>) {
    let name = g["name"].as_str().unwrap();
    let scope = ctx.open_exec_scope();
    let mut grads = BTreeMap::new();
    macro_rules! collect {
        ($($k:literal => $t:expr),*) => {{ $( grads.insert($k.to_string(), $t.grad().unwrap().to_f32_vec()); )* }};
    }
    let loss = match name {
        "mlp_cross_entropy" => {
            let (x, w1, b1) =
                (leaf::<axes![batch, in]>(g, "x"), leaf::<axes![h, in]>(g, "w1"), leaf::<axes![h]>(g, "b1"));
            let (w2, b2) = (leaf::<axes![class, h]>(g, "w2"), leaf::<axes![class]>(g, "b2"));
            let t: Vec<u32> = g["targets"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            let targets = Tensor::<axes![batch]>::from_vec(t, &[4]).unwrap();
            let hid = einsum!(x, w1; in ->).unwrap().add(&b1).unwrap().tanh().unwrap();
            let logits = hid.dot::<h, _>(&w2).unwrap().add(&b2).unwrap();
            let loss = cross_entropy::<class, _>(&logits, &targets, None).unwrap();
            loss.backward(ctx).unwrap();
            collect!("x" => x, "w1" => w1, "b1" => b1, "w2" => w2, "b2" => b2);
            loss
        }
        "attention" => {
            let (q, k, vv) = (
                leaf::<axes![batch, qs, d]>(g, "q"),
                leaf::<axes![batch, ks, d]>(g, "k"),
                leaf::<axes![batch, ks, d]>(g, "v"),
            );
            let p = einsum!(q, k; d ->).unwrap().scale(0.5).unwrap().softmax::<ks>().unwrap();
            let o = einsum!(p, vv; ks ->).unwrap();
            let w = Tensor::<axes![batch, qs, d]>::from_vec(signal(&[2, 3, 4], 9.0), &[2, 3, 4]).unwrap();
            let loss = o.mul(&w).unwrap().sum::<(batch, qs, d)>().unwrap();
            loss.backward(ctx).unwrap();
            collect!("q" => q, "k" => k, "v" => vv);
            loss
        }
        "norms_gelu_mse" => {
            let (x, gg, b, w) = (
                leaf::<axes![batch, e]>(g, "x"),
                leaf::<axes![e]>(g, "g"),
                leaf::<axes![e]>(g, "b"),
                leaf::<axes![e]>(g, "w"),
            );
            let y = x
                .layer_norm::<e>(Some(&gg), Some(&b), 1e-5)
                .unwrap()
                .rms_norm::<e>(Some(&w), 1e-6)
                .unwrap()
                .gelu()
                .unwrap();
            let target = Tensor::<axes![batch, e]>::from_vec(signal(&[3, 6], 14.0), &[3, 6]).unwrap();
            let loss = mse_loss(&y, &target).unwrap();
            loss.backward(ctx).unwrap();
            collect!("x" => x, "g" => gg, "b" => b, "w" => w);
            loss
        }
        "conv_bce" => {
            let (x, w, b) =
                (leaf::<axes![batch, ch, tm]>(g, "x"), leaf::<axes![oc, ch, tm]>(g, "w"), leaf::<axes![oc]>(g, "b"));
            let y = x
                .conv1d::<ch, tm, oc>(&w, Some(&b), Conv1dOptions { dilation: 2, padding: Padding::Causal })
                .unwrap()
                .tanh()
                .unwrap()
                .scale(3.0)
                .unwrap();
            let target: Vec<f32> = signal(&[2, 4, 12], 18.0).iter().map(|v| if *v > 0.0 { 1.0 } else { 0.0 }).collect();
            let target = Tensor::<axes![batch, oc, tm]>::from_vec(target, &[2, 4, 12]).unwrap();
            let loss = bce_with_logits(&y, &target).unwrap();
            loss.backward(ctx).unwrap();
            collect!("x" => x, "w" => w, "b" => b);
            loss
        }
        "embedding_ce_ignore" => {
            let table = leaf::<axes![v, e]>(g, "table");
            let flat = |k: &str| -> Vec<u32> {
                g[k].as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32))
                    .collect()
            };
            let ids = Tensor::<axes![batch, s]>::from_vec(flat("ids"), &[2, 3]).unwrap();
            let targets = Tensor::<axes![batch, s]>::from_vec(flat("targets"), &[2, 3]).unwrap();
            let logits = table.embedding(&ids).unwrap();
            let loss =
                cross_entropy::<e, _>(&logits, &targets, Some(g["ignore_index"].as_u64().unwrap() as u32)).unwrap();
            loss.backward(ctx).unwrap();
            collect!("table" => table);
            loss
        }
        other => panic!("golden graph `{other}` has no runner"),
    };
    let l = loss.item().unwrap();
    drop(scope);
    (l, grads)
}

#[test]
fn gradients_match_pytorch() {
    let gold = golden();
    let graphs = gold["graphs"].as_array().unwrap();
    assert!(graphs.len() >= 5);
    let (sc, nc) = contexts();
    for g in graphs {
        let name = g["name"].as_str().unwrap();
        for ctx in [&sc, &nc] {
            let (loss, grads) = run_graph(ctx, g);
            let want = g["loss"].as_f64().unwrap() as f32;
            assert_close(&format!("{name} loss ({:?})", ctx.backend()), &[loss], &[want], 2e-5, 2e-5);
            for (k, gv) in g["grads"].as_object().unwrap() {
                assert_close(
                    &format!("{name} d/d{k} ({:?})", ctx.backend()),
                    &grads[k],
                    &floats(&gv["data"]),
                    2e-5,
                    2e-5,
                );
            }
        }
    }
}

#[derive(Module)]
struct One {
    p: Tensor<axes![batch, e]>,
}

#[test]
fn optimizers_match_torch_optim_step_by_step() {
    let gold = golden();
    let ctx = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
    for run in gold["optimizers"].as_array().unwrap() {
        let name = run["name"].as_str().unwrap();
        let hp = &run["hyper"];
        let f = |k: &str| hp[k].as_f64().unwrap();
        let mut opt: Box<dyn Optimizer> = if name.starts_with("sgd") {
            Box::new(
                Sgd::new(f("lr"), f("momentum"))
                    .nesterov(hp["nesterov"].as_bool().unwrap())
                    .weight_decay(f("weight_decay")),
            )
        } else {
            let b = hp["betas"].as_array().unwrap();
            let mut o = AdamW::new(f("lr"))
                .weight_decay(f("weight_decay"))
                .betas(b[0].as_f64().unwrap(), b[1].as_f64().unwrap());
            o.eps = f("eps");
            Box::new(o)
        };
        let sh = shape(&run["p0"]);
        let mut m = One { p: Tensor::from_vec(floats(&run["p0"]["data"]), &sh).unwrap() };
        m.track_params();
        for (step, (g, want)) in
            run["grads"].as_array().unwrap().iter().zip(run["after_each_step"].as_array().unwrap()).enumerate()
        {
            // Inject the golden gradient: d/dp sum(p * g) = g.
            m.zero_grad();
            {
                let _scope = ctx.open_exec_scope();
                let gt = Tensor::<axes![batch, e]>::from_vec(floats(&g["data"]), &sh).unwrap();
                m.p.mul(&gt).unwrap().sum::<(batch, e)>().unwrap().backward(&ctx).unwrap();
            }
            assert_eq!(opt.step(&mut m).unwrap(), 1);
            assert_close(&format!("{name} step {}", step + 1), &m.p.to_f32_vec(), &floats(&want["data"]), 0.0, 0.0);
            assert!(m.p.is_tracked(), "{name}: the parameter must stay a leaf");
        }
        assert_eq!(opt.steps(), 5);
    }
}

#[derive(Module)]
struct Three {
    w: Tensor<axes![batch, e]>,
    wt: Tensor<axes![e, batch]>,
    b: Tensor<axes![e]>,
}

#[test]
fn muon_and_apollo_match_the_reference_implementations() {
    use fucina::optim::{Apollo, Muon};
    let gold = golden();
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    for run in gold["reference_optimizers"].as_array().unwrap() {
        let name = run["name"].as_str().unwrap();
        let p0 = &run["p0"];
        let ld = |k: &str| (floats(&p0[k]["data"]), shape(&p0[k]));
        let (w, ws) = ld("w");
        let (wt, wts) = ld("wt");
        let (b, bs) = ld("b");
        let mut m = Three {
            w: Tensor::from_vec(w, &ws).unwrap(),
            wt: Tensor::from_vec(wt, &wts).unwrap(),
            b: Tensor::from_vec(b, &bs).unwrap(),
        };
        m.track_params();
        let mut opt: Box<dyn Optimizer> = match name {
            "muon" => Box::new(Muon::new(0.02, 0.01)),
            "apollo" => {
                let mut a = Apollo::new(0.01, 2, 5);
                a.update_proj_gap = 2;
                Box::new(a)
            }
            other => panic!("no runner for {other}"),
        };
        for (step, (g, want)) in
            run["grads"].as_array().unwrap().iter().zip(run["after_each_step"].as_array().unwrap()).enumerate()
        {
            m.zero_grad();
            {
                let _scope = ctx.open_exec_scope();
                let gw = Tensor::<axes![batch, e]>::from_vec(floats(&g["w"]["data"]), &ws).unwrap();
                let gwt = Tensor::<axes![e, batch]>::from_vec(floats(&g["wt"]["data"]), &wts).unwrap();
                let gb = Tensor::<axes![e]>::from_vec(floats(&g["b"]["data"]), &bs).unwrap();
                let l = m.w.mul(&gw).unwrap().sum::<(batch, e)>().unwrap();
                let l = l.add(&m.wt.mul(&gwt).unwrap().sum::<(e, batch)>().unwrap()).unwrap();
                let l = l.add(&m.b.mul(&gb).unwrap().sum::<e>().unwrap()).unwrap();
                l.backward(&ctx).unwrap();
            }
            assert_eq!(opt.step(&mut m).unwrap(), 3);
            for (k, t) in [("w", &m.w.to_f32_vec()), ("wt", &m.wt.to_f32_vec()), ("b", &m.b.to_f32_vec())] {
                assert_close(&format!("{name} step {} {k}", step + 1), t, &floats(&want[k]["data"]), 2e-6, 2e-5);
            }
        }
    }
    let pc = &gold["apollo_projection"];
    let p = fucina::optim::apollo_projection(pc["seed"].as_u64().unwrap(), pc["name"].as_str().unwrap(), 1, 2, 4);
    assert_eq!(p, floats(&pc["p"]["data"]), "the regenerated projection must be bit-identical to the reference's");
}
