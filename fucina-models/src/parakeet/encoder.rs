//! The FastConformer encoder of Parakeet, as `transformers`' `ParakeetEncoder` computes it: a convolutional subsampling (a strided 3x3 conv, then
//! depthwise-strided and pointwise pairs, ReLU after each, flattened and projected), then
//! Conformer blocks (half feed-forward, relative-position self-attention with Transformer-XL's
//! content and position biases, a convolution module with GLU, depthwise conv, batch norm and
//! SiLU, half feed-forward, layer norm). Weights are read by their `transformers` names
//! (`encoder.*`) from a safetensors file whose metadata `config` holds the model's config
//! (`ParakeetCTCConfig`, `ParakeetTDTConfig`, `ParakeetRNNTConfig`) as JSON; the batch norms
//! are folded into the depthwise convolutions at load. The heads that read the encoder live in
//! [`super::ctc`] and [`super::transducer`].

use super::{frame, mel};
use fucina::formats::safetensors::SafeTensors;
use fucina::nn::Linear;
use fucina::ops::Conv2dOptions;
use fucina::prelude::*;
use fucina::tensor::axes::{Axes, Axis};
use serde_json::Value;

axis!(pub att, pub rel, pub glu, pub hid_b, pub unit, pub sub_in, pub sub_a, pub sub_b, pub sub_feat);

/// The encoder's and head's sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct ParakeetConfig {
    /// Model width.
    pub hidden: usize,
    /// Conformer blocks.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Depthwise convolution taps (odd).
    pub conv_kernel: usize,
    /// Time (and frequency) reduction of the subsampling: a power of two.
    pub subsampling_factor: usize,
    /// Channels of the subsampling convolutions.
    pub subsampling_channels: usize,
    /// Taps of the subsampling convolutions (odd).
    pub subsampling_kernel: usize,
    /// Stride of each subsampling convolution.
    pub subsampling_stride: usize,
    /// Mel bands of the input features.
    pub mels: usize,
    /// Whether the subsampled input is scaled by `sqrt(hidden)`.
    pub scale_input: bool,
    /// Vocabulary (the blank included; a TDT's durations not).
    pub vocab: usize,
    /// The blank: `blank_token_id` where the config has one (transducers), else
    /// `pad_token_id` (CTC).
    pub blank: u32,
}

pub(super) fn bad(msg: String) -> FucinaError {
    FucinaError::Format { format: "parakeet", msg }
}

impl ParakeetConfig {
    /// Reads a Parakeet config (`ParakeetCTCConfig`, `ParakeetTDTConfig` or
    /// `ParakeetRNNTConfig`; its `encoder_config` inside) from JSON, checking every size.
    pub fn from_json(text: &str) -> Result<ParakeetConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("config: {e}")))?;
        let e = &v["encoder_config"];
        let u = |o: &Value, k: &str, max: usize| -> Result<usize> {
            let n = o[k].as_u64().ok_or_else(|| bad(format!("config: `{k}` is missing or not a count")))?;
            usize::try_from(n)
                .ok()
                .filter(|&n| (1..=max).contains(&n))
                .ok_or_else(|| bad(format!("config: `{k}` = {n} (need 1 to {max})")))
        };
        let c = ParakeetConfig {
            hidden: u(e, "hidden_size", 1 << 14)?,
            layers: u(e, "num_hidden_layers", 256)?,
            heads: u(e, "num_attention_heads", 256)?,
            ffn: u(e, "intermediate_size", 1 << 16)?,
            conv_kernel: u(e, "conv_kernel_size", 1023)?,
            subsampling_factor: u(e, "subsampling_factor", 64)?,
            subsampling_channels: u(e, "subsampling_conv_channels", 4096)?,
            subsampling_kernel: u(e, "subsampling_conv_kernel_size", 31)?,
            subsampling_stride: u(e, "subsampling_conv_stride", 8)?,
            mels: u(e, "num_mel_bins", 1024)?,
            scale_input: e["scale_input"].as_bool().unwrap_or(true),
            vocab: u(&v, "vocab_size", 1 << 20)?,
            blank: if v.get("blank_token_id").is_some_and(|b| !b.is_null()) {
                u(&v, "blank_token_id", 1 << 20)? as u32
            } else {
                u(&v, "pad_token_id", 1 << 20)? as u32
            },
        };
        if !c.hidden.is_multiple_of(c.heads)
            || c.conv_kernel.is_multiple_of(2)
            || c.subsampling_kernel.is_multiple_of(2)
        {
            return Err(bad(format!("config: {c:?} (need heads dividing the width and odd kernels)")));
        }
        if !c.subsampling_factor.is_power_of_two() || c.subsampling_factor < 2 || c.subsampling_stride != 2 {
            return Err(bad(format!(
                "config: subsampling by {} with stride {} (need a power of two, stride 2)",
                c.subsampling_factor, c.subsampling_stride
            )));
        }
        if e["hidden_act"].as_str().is_some_and(|a| a != "silu") {
            return Err(bad(format!("config: activation {} (only silu is built)", e["hidden_act"])));
        }
        if c.blank as usize >= c.vocab {
            return Err(bad(format!("config: blank {} outside a vocabulary of {}", c.blank, c.vocab)));
        }
        Ok(c)
    }

    /// Stages of the subsampling (`log2(factor)`).
    pub fn stages(&self) -> usize {
        self.subsampling_factor.trailing_zeros() as usize
    }

    /// Encoder positions for `frames` feature frames (each stage: `(n + 2 pad - k) / 2 + 1`).
    pub fn positions(&self, frames: usize) -> usize {
        let pad = (self.subsampling_kernel - 1) / 2;
        (0..self.stages())
            .fold(frames, |n, _| (n + 2 * pad).saturating_sub(self.subsampling_kernel) / self.subsampling_stride + 1)
    }
}

/// A half feed-forward: `linear2(silu(linear1(x)))`.
#[derive(Debug, Clone)]
struct FeedForward {
    up: Linear<ffn, hidden>,
    down: Linear<hidden, ffn>,
}

/// Relative-position multi-head self-attention.
#[derive(Debug, Clone)]
struct RelAttention {
    q: Linear<att, hidden>,
    k: Linear<att, hidden>,
    v: Linear<att, hidden>,
    o: Linear<hidden, att>,
    pos: Linear<att, hidden>,
    bias_u: Tensor<(head, head_dim)>,
    bias_v: Tensor<(head, head_dim)>,
}

/// The convolution module, its batch norm folded into the depthwise convolution.
#[derive(Debug, Clone)]
struct ConvModule {
    pw1: Linear<glu, hidden>,
    dw_weight: Tensor<(hid_b, hidden, seq, unit)>,
    dw_bias: Tensor<(hid_b,)>,
    pw2: Linear<hidden, hid_b>,
}

#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Tensor<(hidden,)>,
    bias: Tensor<(hidden,)>,
}

impl LayerNorm {
    fn forward(&self, x: &Tensor<(seq, hidden)>) -> Result<Tensor<(seq, hidden)>> {
        x.layer_norm::<hidden>(Some(&self.weight), Some(&self.bias), 1e-5)
    }
}

/// One Conformer block.
#[derive(Debug, Clone)]
struct Block {
    ff1: FeedForward,
    attn: RelAttention,
    conv: ConvModule,
    ff2: FeedForward,
    norm_ff1: LayerNorm,
    norm_attn: LayerNorm,
    norm_conv: LayerNorm,
    norm_ff2: LayerNorm,
    norm_out: LayerNorm,
}

/// One subsampling stage after the first: depthwise strided, then pointwise, then ReLU.
#[derive(Debug, Clone)]
struct SubStage {
    dw: Tensor<(sub_b, sub_a, frame, mel)>,
    dw_bias: Tensor<(sub_b,)>,
    pw: Tensor<(sub_a, sub_b, frame, mel)>,
    pw_bias: Tensor<(sub_a,)>,
}

/// Parakeet's FastConformer encoder.
#[derive(Debug, Clone)]
pub struct ParakeetEncoder {
    /// Sizes.
    pub config: ParakeetConfig,
    conv0: Tensor<(sub_a, sub_in, frame, mel)>,
    conv0_bias: Tensor<(sub_a,)>,
    stages: Vec<SubStage>,
    sub_linear: Linear<hidden, sub_feat>,
    blocks: Vec<Block>,
}

/// Reads tensor `name` with exactly `shape`.
pub(super) fn get<A: Axes>(st: &SafeTensors, name: &str, shape: &[usize]) -> Result<Tensor<A>> {
    let r = st.load(name)?;
    if r.shape() != shape {
        return Err(bad(format!("tensor `{name}` has shape {:?}, the config needs {shape:?}", r.shape())));
    }
    Tensor::from_raw(r)
}

pub(super) fn linear<O: Axis + Send + Sync, I: Axis + Send + Sync>(
    st: &SafeTensors,
    name: &str,
    o: usize,
    i: usize,
    bias: bool,
) -> Result<Linear<O, I>> {
    let w = get::<(O, I)>(st, &format!("{name}.weight"), &[o, i])?;
    let b = if bias { Some(get::<(O,)>(st, &format!("{name}.bias"), &[o])?) } else { None };
    Ok(Linear::new(w, b))
}

/// A `[o, i, 1]` convolution's weight and its bias.
pub(super) type Pointwise<O, I> = (Tensor<(O, I, unit)>, Tensor<(O,)>);

/// A `[o, i, 1]` convolution's weight and bias (the caller drops the unit axis).
pub(super) fn pointwise<O: Axis + Send + Sync, I: Axis + Send + Sync>(
    st: &SafeTensors,
    name: &str,
    o: usize,
    i: usize,
) -> Result<Pointwise<O, I>> {
    Ok((get(st, &format!("{name}.weight"), &[o, i, 1])?, get(st, &format!("{name}.bias"), &[o])?))
}

fn norm(st: &SafeTensors, name: &str, h: usize) -> Result<LayerNorm> {
    Ok(LayerNorm { weight: get(st, &format!("{name}.weight"), &[h])?, bias: get(st, &format!("{name}.bias"), &[h])? })
}

/// The file's config text (its metadata `config`).
pub(super) fn config_text(st: &SafeTensors) -> Result<&str> {
    st.metadata().get("config").map(String::as_str).ok_or_else(|| bad("no `config` in the file's metadata".into()))
}

impl ParakeetEncoder {
    /// Loads the encoder's tensors (`encoder.*`) of a file whose config is `c`.
    pub fn load(st: &SafeTensors, c: ParakeetConfig) -> Result<ParakeetEncoder> {
        let (h, ch, k) = (c.hidden, c.subsampling_channels, c.subsampling_kernel);
        let sub = |i: usize| format!("encoder.subsampling.layers.{i}");
        let conv0 = get(st, &format!("{}.weight", sub(0)), &[ch, 1, k, k])?;
        let conv0_bias = get(st, &format!("{}.bias", sub(0)), &[ch])?;
        let mut stages = Vec::new();
        for s in 1..c.stages() {
            // Module indices: conv, ReLU, then (depthwise, pointwise, ReLU) per stage.
            let (dw, pw) = (2 + 3 * (s - 1), 3 + 3 * (s - 1));
            stages.push(SubStage {
                dw: get(st, &format!("{}.weight", sub(dw)), &[ch, 1, k, k])?,
                dw_bias: get(st, &format!("{}.bias", sub(dw)), &[ch])?,
                pw: get(st, &format!("{}.weight", sub(pw)), &[ch, ch, 1, 1])?,
                pw_bias: get(st, &format!("{}.bias", sub(pw)), &[ch])?,
            });
        }
        let freq_out = c.mels >> c.stages();
        let sub_linear = linear(st, "encoder.subsampling.linear", h, ch * freq_out, true)?;
        let dh = h / c.heads;
        let mut blocks = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let p = |s: &str| format!("encoder.layers.{l}.{s}");
            let ff = |n: &str| -> Result<FeedForward> {
                Ok(FeedForward {
                    up: linear(st, &p(&format!("{n}.linear1")), c.ffn, h, true)?,
                    down: linear(st, &p(&format!("{n}.linear2")), h, c.ffn, true)?,
                })
            };
            let attn = RelAttention {
                q: linear(st, &p("self_attn.q_proj"), h, h, true)?,
                k: linear(st, &p("self_attn.k_proj"), h, h, true)?,
                v: linear(st, &p("self_attn.v_proj"), h, h, true)?,
                o: linear(st, &p("self_attn.o_proj"), h, h, true)?,
                pos: linear(st, &p("self_attn.relative_k_proj"), h, h, false)?,
                bias_u: get(st, &p("self_attn.bias_u"), &[c.heads, dh])?,
                bias_v: get(st, &p("self_attn.bias_v"), &[c.heads, dh])?,
            };
            // Batch norm (eval) folded into the depthwise convolution: with s = gamma /
            // sqrt(var + eps), w' = w s and b' = (b - mean) s + beta.
            let dw: Tensor<(hid_b, hidden, seq)> = get(st, &p("conv.depthwise_conv.weight"), &[h, 1, c.conv_kernel])?;
            let dw_b: Tensor<(hid_b,)> = get(st, &p("conv.depthwise_conv.bias"), &[h])?;
            let gamma: Tensor<(hid_b,)> = get(st, &p("conv.norm.weight"), &[h])?;
            let beta: Tensor<(hid_b,)> = get(st, &p("conv.norm.bias"), &[h])?;
            let mean: Tensor<(hid_b,)> = get(st, &p("conv.norm.running_mean"), &[h])?;
            let var: Tensor<(hid_b,)> = get(st, &p("conv.norm.running_var"), &[h])?;
            let s = gamma.div(&var.add_scalar(1e-5)?.sqrt()?)?;
            let conv = ConvModule {
                pw1: {
                    let (w, b) = pointwise::<glu, hidden>(st, &p("conv.pointwise_conv1"), 2 * h, h)?;
                    Linear::new(w.sum::<unit>()?, Some(b))
                },
                dw_weight: dw.mul(&s)?.unsqueeze::<unit>()?,
                dw_bias: dw_b.sub(&mean)?.mul(&s)?.add(&beta)?,
                pw2: {
                    let (w, b) = pointwise::<hidden, hid_b>(st, &p("conv.pointwise_conv2"), h, h)?;
                    Linear::new(w.sum::<unit>()?, Some(b))
                },
            };
            blocks.push(Block {
                ff1: ff("feed_forward1")?,
                attn,
                conv,
                ff2: ff("feed_forward2")?,
                norm_ff1: norm(st, &p("norm_feed_forward1"), h)?,
                norm_attn: norm(st, &p("norm_self_att"), h)?,
                norm_conv: norm(st, &p("norm_conv"), h)?,
                norm_ff2: norm(st, &p("norm_feed_forward2"), h)?,
                norm_out: norm(st, &p("norm_out"), h)?,
            });
        }
        Ok(ParakeetEncoder { config: c, conv0, conv0_bias, stages, sub_linear, blocks })
    }

    /// The encoder's output `[seq, hidden]` for the valid frames of normalized features
    /// `[frame, mel]` ([`super::FeatureExtractor`]).
    pub fn encode(&self, features: &Tensor<(frame, mel)>) -> Result<Tensor<(seq, hidden)>> {
        let c = &self.config;
        if features.shape()[1] != c.mels || features.shape()[0] == 0 {
            return Err(FucinaError::InvalidArgument {
                op: "parakeet encode",
                msg: format!("features {:?}: need [frames >= 1, {}]", features.shape(), c.mels),
            });
        }
        // Attention holds a few [heads, T, T] score tensors at once: refuse audio whose scores
        // cannot fit instead of failing inside an allocation.
        let t = c.positions(features.shape()[0]);
        let scores = c.heads.checked_mul(t).and_then(|v| v.checked_mul(3 * t)).and_then(|v| v.checked_mul(4 * 4));
        fucina::storage::alloc::check_available(
            &format!("attention scores of {t} encoder positions (shorter audio, or more memory)"),
            scores.unwrap_or(usize::MAX),
        )?;
        let pad = (c.subsampling_kernel - 1) / 2;
        let strided = Conv2dOptions { stride: [2, 2], padding: [pad, pad], dilation: [1, 1], groups: 1 };
        let x = features.unsqueeze::<sub_in>()?;
        let mut x: Tensor<(frame, mel, sub_a)> =
            x.conv2d::<sub_in, frame, mel, sub_a>(&self.conv0, Some(&self.conv0_bias), strided)?.relu()?;
        for s in &self.stages {
            let depthwise = Conv2dOptions { groups: c.subsampling_channels, ..strided };
            let y = x.conv2d::<sub_a, frame, mel, sub_b>(&s.dw, Some(&s.dw_bias), depthwise)?;
            x = y.conv2d::<sub_b, frame, mel, sub_a>(&s.pw, Some(&s.pw_bias), Conv2dOptions::default())?.relu()?;
        }
        // [frame, channel, freq] flattened channel-major, as the reference's transpose + reshape.
        let flat: Tensor<(frame, sub_feat)> =
            x.permute::<(frame, sub_a, mel)>()?.merge_axes::<(sub_a, mel), sub_feat>()?;
        let mut x: Tensor<(seq, hidden)> = self.sub_linear.forward(&flat)?.rename::<frame, seq>()?;
        if c.scale_input {
            x = x.scale((c.hidden as f32).sqrt())?;
        }
        let pos = self.positions(x.shape()[0])?;
        for b in &self.blocks {
            x = b.forward(&x, &pos, c)?;
        }
        Ok(x)
    }

    /// The relative positions' sinusoids `[rel, hidden]` for `t` positions: row `k` is offset
    /// `t - 1 - k`, values `sin, cos` interleaved per frequency `10000^(-2i / hidden)`.
    fn positions(&self, t: usize) -> Result<Tensor<(rel, hidden)>> {
        let h = self.config.hidden;
        let n = 2 * t - 1;
        let inv: Vec<f32> = (0..h / 2).map(|i| 1.0 / 10000f32.powf((2 * i) as f32 / h as f32)).collect();
        let mut v = fucina::storage::alloc::try_vec("relative positions", n * h, 0.0f32)?;
        for (k, row) in v.chunks_exact_mut(h).enumerate() {
            let p = (t as f32 - 1.0) - k as f32;
            for (i, f) in inv.iter().enumerate() {
                let a = p * f;
                row[2 * i] = a.sin();
                row[2 * i + 1] = a.cos();
            }
        }
        Tensor::from_vec(v, &[n, h])
    }
}

impl FeedForward {
    fn forward(&self, x: &Tensor<(seq, hidden)>) -> Result<Tensor<(seq, hidden)>> {
        self.down.forward(&self.up.forward(x)?.silu()?)
    }
}

impl Block {
    fn forward(
        &self,
        x: &Tensor<(seq, hidden)>,
        pos: &Tensor<(rel, hidden)>,
        c: &ParakeetConfig,
    ) -> Result<Tensor<(seq, hidden)>> {
        let x = x.add(&self.ff1.forward(&self.norm_ff1.forward(x)?)?.scale(0.5)?)?;
        let x = x.add(&self.attn.forward(&self.norm_attn.forward(&x)?, pos, c)?)?;
        let x = x.add(&self.conv.forward(&self.norm_conv.forward(&x)?, c)?)?;
        let x = x.add(&self.ff2.forward(&self.norm_ff2.forward(&x)?)?.scale(0.5)?)?;
        self.norm_out.forward(&x)
    }
}

impl RelAttention {
    fn forward(
        &self,
        x: &Tensor<(seq, hidden)>,
        pos: &Tensor<(rel, hidden)>,
        c: &ParakeetConfig,
    ) -> Result<Tensor<(seq, hidden)>> {
        let dh = c.hidden / c.heads;
        let heads = |t: Tensor<(seq, att)>| t.split_axis::<att, (head, head_dim)>(&[c.heads, dh]);
        let q = heads(self.q.forward(x)?)?;
        let k = heads(self.k.forward(x)?)?.rename::<seq, kv_seq>()?;
        let v = heads(self.v.forward(x)?)?.rename::<seq, kv_seq>()?;
        let r = self.pos.forward(pos)?.split_axis::<att, (head, head_dim)>(&[c.heads, dh])?;
        let (qu, qv) = (q.add(&self.bias_u)?, q.add(&self.bias_v)?);
        // Content terms (a, c) and position terms (b, d), the latter shifted from offsets to keys.
        let ac: Tensor<(seq, head, kv_seq)> = einsum!(qu, k; head_dim ->)?;
        let bd: Tensor<(seq, head, rel)> = einsum!(qv, r; head_dim ->)?;
        let bd: Tensor<(head, seq, kv_seq)> =
            bd.permute::<(head, seq, rel)>()?.relative_to_absolute::<rel, kv_seq>()?;
        let p = ac.add(&bd)?.scale(1.0 / (dh as f32).sqrt())?.softmax::<kv_seq>()?;
        let o: Tensor<(seq, head, head_dim)> = einsum!(p, v; kv_seq ->)?;
        self.o.forward(&o.merge_axes::<(head, head_dim), att>()?)
    }
}

impl ConvModule {
    fn forward(&self, x: &Tensor<(seq, hidden)>, c: &ParakeetConfig) -> Result<Tensor<(seq, hidden)>> {
        let y = self.pw1.forward(x)?;
        let h = c.hidden;
        let a = y.narrow::<glu>(0, h)?.rename::<glu, hidden>()?;
        let gate = y.narrow::<glu>(h, h)?.rename::<glu, hidden>()?.sigmoid()?;
        let g = a.mul(&gate)?.unsqueeze::<unit>()?;
        let pad = (c.conv_kernel - 1) / 2;
        let opts = Conv2dOptions { stride: [1, 1], padding: [pad, 0], dilation: [1, 1], groups: h };
        let d: Tensor<(seq, hid_b, unit)> =
            g.conv2d::<hidden, seq, unit, hid_b>(&self.dw_weight, Some(&self.dw_bias), opts)?;
        self.pw2.forward(&d.sum::<unit>()?.silu()?)
    }
}
