//! Forward ops against PyTorch goldens (`tools/gen_op_goldens.py`, committed in `goldens/ops.json`).
//!
//! Every case runs on both backends. Tolerances: 2e-6 abs + 2e-6 rel for elementwise
//! maps; 1e-5 for reductions, norms, convolutions and contractions; casts are exact.

mod common;

use common::{assert_close, contexts};
use fucina::prelude::*;
use serde_json::Value;

axis!(pub a, pub b, pub c, pub height, pub width);
use fucina::ops::{Conv2dOptions, PoolOptions};

struct Case {
    name: String,
    inputs: serde_json::Map<String, Value>,
    output: Vec<f32>,
    out_shape: Vec<usize>,
    params: serde_json::Map<String, Value>,
}

fn load() -> Vec<Case> {
    let text = include_str!("goldens/ops.json");
    let v: Value = serde_json::from_str(text).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap().to_string(),
            inputs: c["inputs"].as_object().unwrap().clone(),
            output: floats(&c["output"]["data"]),
            out_shape: c["output"]["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect(),
            params: c["params"].as_object().unwrap().clone(),
        })
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

impl Case {
    fn shape(&self, k: &str) -> Vec<usize> {
        self.inputs[k]["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect()
    }
    fn t<A: fucina::tensor::axes::Axes>(&self, k: &str) -> Tensor<A> {
        Tensor::from_vec(floats(&self.inputs[k]["data"]), &self.shape(k)).unwrap()
    }
    fn ids<A: fucina::tensor::axes::Axes>(&self, k: &str) -> Tensor<A> {
        let v: Vec<u32> = floats(&self.inputs[k]["data"]).iter().map(|x| *x as u32).collect();
        Tensor::from_vec(v, &self.shape(k)).unwrap()
    }
    fn f(&self, k: &str) -> f32 {
        self.params[k].as_f64().unwrap() as f32
    }
    fn u(&self, k: &str) -> usize {
        self.params[k].as_u64().unwrap() as usize
    }

    /// Runs the case with fucina; returns (output, shape, abs tol, rel tol).
    fn run(&self) -> (Vec<f32>, Vec<usize>, f32, f32) {
        type T3 = Tensor<axes![a, b, c]>;
        let ew = |t: T3| (t.to_f32_vec(), t.shape().to_vec(), 2e-6, 2e-6);
        let red = |v: Vec<f32>, s: &[usize]| (v, s.to_vec(), 1e-5, 1e-5);
        let x = || self.t::<axes![a, b, c]>("x");
        match self.name.as_str() {
            "gelu" => ew(x().gelu().unwrap()),
            "gelu_tanh" => ew(x().gelu_tanh().unwrap()),
            "silu" => ew(x().silu().unwrap()),
            "softplus" => ew(x().softplus().unwrap()),
            "sigmoid" => ew(x().sigmoid().unwrap()),
            "tanh" => ew(x().tanh().unwrap()),
            "exp" => ew(x().exp().unwrap()),
            "relu" => ew(x().relu().unwrap()),
            "log" => ew(x().abs().unwrap().add_scalar(0.5).unwrap().log().unwrap()),
            "softmax_last" => ew(x().softmax::<c>().unwrap()),
            "softmax_mid" => ew(x().softmax::<b>().unwrap()),
            "log_softmax_first" => ew(x().log_softmax::<a>().unwrap()),
            "logsumexp_mid" => {
                let r = x().logsumexp::<b>().unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "sum_first_last" => {
                let r = x().sum::<(a, c)>().unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "mean_last" => {
                let r = x().mean::<c>().unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "max_mid" => {
                let r = x().max::<b>().unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "layer_norm" => {
                let (w, bb) = (self.t::<axes![c]>("w"), self.t::<axes![c]>("b"));
                let r = x().layer_norm::<c>(Some(&w), Some(&bb), self.f("eps")).unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "rms_norm" => {
                let w = self.t::<axes![c]>("w");
                let r = x().rms_norm::<c>(Some(&w), self.f("eps")).unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "einsum_linear" => {
                let xi = self.t::<axes![batch, seq, in]>("x");
                let w = self.t::<axes![out, in]>("w");
                let r: Tensor<axes![batch, seq, out]> = einsum!(xi, w; in ->).unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "einsum_scores" => {
                let q = self.t::<axes![batch, seq, head_dim]>("q");
                let k = self.t::<axes![batch, kv_seq, head_dim]>("k");
                let r: Tensor<axes![batch, seq, kv_seq]> = einsum!(q, k; head_dim ->).unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            n if n.starts_with("conv1d") => {
                let xc = self.t::<axes![batch, channel, time]>("x");
                let w = self.t::<axes![out, channel, time]>("w");
                let bias = self.t::<axes![out]>("b");
                let padding = if n == "conv1d_same" { Padding::Same } else { Padding::Causal };
                let r = xc
                    .conv1d::<channel, time, out>(
                        &w,
                        Some(&bias),
                        Conv1dOptions { dilation: self.u("dilation"), padding },
                    )
                    .unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "gather_mid" => {
                let r = x().gather::<b>(&self.ids::<axes![a, b, c]>("index")).unwrap();
                (r.to_f32_vec(), r.shape().to_vec(), 0.0, 0.0)
            }
            "embedding" => {
                let table = self.t::<axes![vocab, hidden]>("table");
                let r = table.embedding(&self.ids::<axes![batch, seq]>("ids")).unwrap();
                (r.to_f32_vec(), r.shape().to_vec(), 0.0, 0.0)
            }
            "cast_f16" | "cast_bf16" => {
                let dt = if self.name == "cast_f16" { DType::F16 } else { DType::BF16 };
                let r = self.t::<axes![a]>("x").cast(dt).unwrap();
                (r.to_f32_vec(), r.shape().to_vec(), 0.0, 0.0)
            }
            "clamp" => ew(x().clamp(self.f("lo"), self.f("hi")).unwrap()),
            n if n.starts_with("cmp_") => {
                let y = || self.t::<axes![b, c]>("y");
                let r = match &n[4..] {
                    "gt" => x().gt(&y()),
                    "ge" => x().ge(&y()),
                    "lt" => x().lt(&y()),
                    "le" => x().le(&y()),
                    "eq" => x().eq(&y()),
                    "ne" => x().ne(&y()),
                    "gt_scalar" => x().gt_scalar(self.f("value")),
                    other => panic!("no comparison {other}"),
                };
                (r.unwrap().to_f32_vec(), x().shape().to_vec(), 0.0, 0.0)
            }
            "cumsum_mid" => red(x().cumsum::<b>().unwrap().to_f32_vec(), x().shape()),
            "cumsum_last" => red(x().cumsum::<c>().unwrap().to_f32_vec(), x().shape()),
            "argmax_mid" => {
                let r = x().argmax::<b>().unwrap();
                (r.to_f32_vec(), r.shape().to_vec(), 0.0, 0.0)
            }
            "argmin_last" => {
                let r = x().argmin::<c>().unwrap();
                (r.to_f32_vec(), r.shape().to_vec(), 0.0, 0.0)
            }
            "topk_mid_values" | "topk_mid_indices" => {
                let (v, i) = x().topk::<b>(self.u("k")).unwrap();
                let r = if self.name.ends_with("values") { v } else { i };
                (r.to_f32_vec(), r.shape().to_vec(), 0.0, 0.0)
            }
            n if n.starts_with("tril_") || n.starts_with("triu_") => {
                let dg = self.params["diagonal"].as_i64().unwrap();
                let r = if n.starts_with("tril") { x().tril::<b, c>(dg) } else { x().triu::<b, c>(dg) };
                ew(r.unwrap())
            }
            "broadcast_add" => {
                let v: T3 = self.t::<axes![c]>("v").broadcast_to(x().shape()).unwrap();
                ew(x().add(&v).unwrap())
            }
            n if n.starts_with("conv2d") => {
                let pair = |k: &str| -> [usize; 2] {
                    let v = self.params[k].as_array().unwrap();
                    [v[0].as_u64().unwrap() as usize, v[1].as_u64().unwrap() as usize]
                };
                let opts = Conv2dOptions {
                    stride: pair("stride"),
                    padding: pair("padding"),
                    dilation: pair("dilation"),
                    groups: self.u("groups"),
                };
                let w = self.t::<axes![out, channel, height, width]>("w");
                let bias = self.t::<axes![out]>("b");
                let img = self.t::<axes![batch, channel, height, width]>("x");
                let r = img.conv2d::<channel, height, width, out>(&w, Some(&bias), opts).unwrap();
                // The same convolution on a channels-last view names the same axes: same numbers.
                let nhwc = img.permute::<axes![batch, height, width, channel]>().unwrap();
                let r2 = nhwc.conv2d::<channel, height, width, out>(&w, Some(&bias), opts).unwrap();
                let r2 = r2.permute::<axes![batch, out, height, width]>().unwrap();
                assert_eq!(r2.to_f32_vec(), r.to_f32_vec(), "{n}: channels-last");
                red(r.to_f32_vec(), r.shape())
            }
            "max_pool2d" | "avg_pool2d" => {
                let pair = |k: &str| -> [usize; 2] {
                    let v = self.params[k].as_array().unwrap();
                    [v[0].as_u64().unwrap() as usize, v[1].as_u64().unwrap() as usize]
                };
                let opts = PoolOptions { kernel: pair("kernel"), stride: pair("stride"), padding: pair("padding") };
                let img = self.t::<axes![batch, channel, height, width]>("x");
                let r = if self.name == "max_pool2d" {
                    img.max_pool2d::<height, width>(opts)
                } else {
                    img.avg_pool2d::<height, width>(opts)
                };
                let r = r.unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            "max_pool1d" | "avg_pool1d" => {
                let xs = self.t::<axes![batch, channel, time]>("x");
                let (k, s, p) = (self.u("kernel"), self.u("stride"), self.u("padding"));
                let r = if self.name == "max_pool1d" {
                    xs.max_pool1d::<time>(k, s, p)
                } else {
                    xs.avg_pool1d::<time>(k, s, p)
                };
                let r = r.unwrap();
                red(r.to_f32_vec(), r.shape())
            }
            other => panic!("golden case `{other}` has no runner: add it here"),
        }
    }
}

#[test]
fn forward_ops_match_pytorch() {
    let cases = load();
    assert!(cases.len() >= 25, "too few golden cases: {}", cases.len());
    let (s, n) = contexts();
    for case in &cases {
        for ctx in [&s, &n] {
            let (got, shape, atol, rtol) = ctx.scope(|| case.run());
            assert_eq!(shape, case.out_shape, "{}: shape", case.name);
            assert_close(&format!("{} on {:?}", case.name, ctx.backend()), &got, &case.output, atol, rtol);
        }
    }
}
