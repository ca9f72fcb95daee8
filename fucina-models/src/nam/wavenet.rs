//! NAM's WaveNet in the named-axes DSL: the whole-signal (block) forward, differentiable,
//! so the same code runs a `.nam` file and trains one.
//!
//! Per layer array: a 1x1 rechannel into `channel` residual channels; per layer a dilated
//! convolution to `mid` channels plus a 1x1 mix of the condition (the input audio), the
//! activation (or `primary * secondary` over the two halves when gated) down to `bneck`,
//! a 1x1 back to `channel` added to the residual, and the post-activation summed into the
//! head; then the head rechannel. Every convolution is "valid": the signal is padded with
//! `receptive_field - 1` zeros in front, as NAM does (`pad_start`), and each layer's output
//! is aligned to the end of its input.

use fucina::formats::nam::{Activation, LayerArray as ArrayConfig, WaveNetConfig};
use fucina::ops::{Conv1dOptions, Padding};
use fucina::prelude::*;

axis!(pub prev, pub mid, pub bneck, pub hout, pub cond);

/// One dilated layer.
#[derive(Module)]
pub struct Layer {
    /// Dilated convolution `[mid, channel, time]`.
    pub conv: Tensor<axes![mid, channel, time]>,
    /// Its bias.
    pub conv_bias: Tensor<axes![mid]>,
    /// Condition mix `[mid, cond, time]` (1x1, no bias).
    pub mixer: Tensor<axes![mid, cond, time]>,
    /// 1x1 back to the residual `[channel, bneck, time]`.
    pub out: Tensor<axes![channel, bneck, time]>,
    /// Its bias.
    pub out_bias: Tensor<axes![channel]>,
    /// Dilation.
    #[module(skip)]
    pub dilation: usize,
    /// Activation (primary when gated).
    #[module(skip)]
    pub activation: Activation,
    /// `Some(secondary)` when gated.
    #[module(skip)]
    pub gate: Option<Activation>,
}

/// One layer array.
#[derive(Module)]
pub struct Array {
    /// Rechannel `[channel, prev, time]` (1x1, no bias).
    pub rechannel: Tensor<axes![channel, prev, time]>,
    /// The layers.
    pub layers: Vec<Layer>,
    /// Head rechannel `[hout, bneck, time]`.
    pub head: Tensor<axes![hout, bneck, time]>,
    /// Its bias, if any.
    pub head_bias: Option<Tensor<axes![hout]>>,
    /// Bottleneck width (post-activation channels).
    #[module(skip)]
    pub bottleneck: usize,
}

/// A WaveNet amp model.
#[derive(Module)]
pub struct WaveNet {
    /// The layer arrays.
    pub arrays: Vec<Array>,
    /// Factor on the final head output.
    #[module(skip)]
    pub head_scale: f32,
    /// The shape (for export and the streaming engine).
    #[module(skip)]
    pub config: WaveNetConfig,
}

/// Reads consecutive weights off a flat array.
struct Cursor<'a> {
    w: &'a [f32],
    at: usize,
}

impl Cursor<'_> {
    fn take<A: fucina::tensor::axes::Axes>(&mut self, shape: &[usize]) -> Result<Tensor<A>> {
        let n: usize = shape.iter().product();
        let part = self.w.get(self.at..self.at + n).ok_or_else(|| FucinaError::Format {
            format: "nam",
            msg: format!("weights end at {} but {} more are needed", self.w.len(), self.at + n - self.w.len()),
        })?;
        self.at += n;
        Tensor::from_vec(part.to_vec(), shape)
    }
}

impl WaveNet {
    /// Builds the model from its shape and NAM's flat weight order (per array: rechannel;
    /// per layer conv weight, conv bias, mixer, 1x1 weight, 1x1 bias; head weight, head
    /// bias; at the end the head scale).
    pub fn from_weights(config: &WaveNetConfig, weights: &[f32]) -> Result<WaveNet> {
        let mut c = Cursor { w: weights, at: 0 };
        let mut arrays = Vec::with_capacity(config.layers.len());
        for a in &config.layers {
            let rechannel = c.take(&[a.channels, a.input_size, 1])?;
            let mut layers = Vec::with_capacity(a.dilations.len());
            for l in 0..a.dilations.len() {
                let m = a.mid(l);
                layers.push(Layer {
                    conv: c.take(&[m, a.channels, a.kernel_sizes[l]])?,
                    conv_bias: c.take(&[m])?,
                    mixer: c.take(&[m, a.condition_size, 1])?,
                    out: c.take(&[a.channels, a.bottleneck, 1])?,
                    out_bias: c.take(&[a.channels])?,
                    dilation: a.dilations[l],
                    activation: a.activations[l],
                    gate: a.gating[l],
                });
            }
            let head = c.take(&[a.head_out, a.bottleneck, a.head_kernel])?;
            let head_bias = if a.head_bias { Some(c.take(&[a.head_out])?) } else { None };
            arrays.push(Array { rechannel, layers, head, head_bias, bottleneck: a.bottleneck });
        }
        let scale: Tensor<axes![hout]> = c.take(&[1])?;
        if c.at != weights.len() {
            return Err(FucinaError::Format {
                format: "nam",
                msg: format!("{} weights left over after the model", weights.len() - c.at),
            });
        }
        let head_scale = scale.to_f32_vec()[0];
        Ok(WaveNet { arrays, head_scale, config: config.clone() })
    }

    /// The flat weights in NAM's order (the inverse of [`WaveNet::from_weights`]).
    pub fn to_weights(&self) -> Vec<f32> {
        let mut w = Vec::new();
        for a in &self.arrays {
            w.extend(a.rechannel.to_f32_vec());
            for l in &a.layers {
                for t in [l.conv.to_f32_vec(), l.conv_bias.to_f32_vec(), l.mixer.to_f32_vec()] {
                    w.extend(t);
                }
                w.extend(l.out.to_f32_vec());
                w.extend(l.out_bias.to_f32_vec());
            }
            w.extend(a.head.to_f32_vec());
            if let Some(b) = &a.head_bias {
                w.extend(b.to_f32_vec());
            }
        }
        w.push(self.head_scale);
        w
    }

    /// The receptive field in samples.
    pub fn receptive_field(&self) -> usize {
        self.config.receptive_field()
    }

    /// Runs the whole signal `x [batch, time]` from silence (NAM's `pad_start`): the
    /// output has the input's length, and sample `t` depends on inputs `t - rf + 1 ..= t`.
    pub fn forward(&self, x: &Tensor<axes![batch, time]>) -> Result<Tensor<axes![batch, time]>> {
        let (b, t) = (x.size::<batch>(), x.size::<time>());
        let pad = self.receptive_field() - 1;
        let x3: Tensor<axes![batch, cond, time]> = x.broadcast_to(&[b, 1, t])?;
        let cond: Tensor<axes![batch, cond, time]> = if pad > 0 {
            let zeros = Tensor::zeros(&[b, 1, pad])?;
            Tensor::concat::<time>(&[&zeros, &x3])?
        } else {
            x3
        };
        let valid = |d: usize| Conv1dOptions { dilation: d, padding: Padding::Valid };
        let mut input: Tensor<axes![batch, prev, time]> = cond.rename::<cond, prev>()?;
        let mut head_in: Option<Tensor<axes![batch, bneck, time]>> = None;
        for (ai, a) in self.arrays.iter().enumerate() {
            let cfg: &ArrayConfig = &self.config.layers[ai];
            let head_len = input.size::<time>() - (cfg.lookback() - (cfg.head_kernel - 1));
            let mut r: Tensor<axes![batch, channel, time]> =
                input.conv1d::<prev, time, channel>(&a.rechannel, None, valid(1))?;
            let mut head: Option<Tensor<axes![batch, bneck, time]>> = head_in.take();
            for l in &a.layers {
                let z: Tensor<axes![batch, mid, time]> =
                    r.conv1d::<channel, time, mid>(&l.conv, Some(&l.conv_bias), valid(l.dilation))?;
                let len = z.size::<time>();
                let mix: Tensor<axes![batch, mid, time]> = cond.conv1d::<cond, time, mid>(&l.mixer, None, valid(1))?;
                let z = z.add(&tail(&mix, len)?)?;
                let post: Tensor<axes![batch, bneck, time]> = match l.gate {
                    None => activate(&z, l.activation)?.rename::<mid, bneck>()?,
                    Some(g) => {
                        let p = activate(&z.narrow::<mid>(0, a.bottleneck)?, l.activation)?;
                        let s = activate(&z.narrow::<mid>(a.bottleneck, a.bottleneck)?, g)?;
                        p.mul(&s)?.rename::<mid, bneck>()?
                    }
                };
                let out: Tensor<axes![batch, channel, time]> =
                    post.conv1d::<bneck, time, channel>(&l.out, Some(&l.out_bias), valid(1))?;
                r = tail(&r, len)?.add(&out)?;
                let term = tail(&post, head_len)?;
                head = Some(match head {
                    None => term,
                    Some(h) => tail(&h, head_len)?.add(&term)?,
                });
            }
            let h =
                head.ok_or_else(|| FucinaError::Format { format: "nam", msg: "a layer array without layers".into() })?;
            let ho: Tensor<axes![batch, hout, time]> =
                h.conv1d::<bneck, time, hout>(&a.head, a.head_bias.as_ref(), valid(1))?;
            let out_len = ho.size::<time>();
            input = tail(&r, out_len)?.rename::<channel, prev>()?;
            head_in = Some(ho.rename::<hout, bneck>()?);
        }
        let y = head_in.ok_or_else(|| FucinaError::Format { format: "nam", msg: "no layer arrays".into() })?;
        let y = y.scale(self.head_scale)?;
        y.squeeze::<bneck>()
    }
}

/// The last `len` steps along `time`.
fn tail<A>(x: &Tensor<A>, len: usize) -> Result<Tensor<A>>
where
    A: fucina::tensor::axes::Axes + fucina::tensor::axes::HasAxes<time>,
{
    let t = x.size::<time>();
    if len > t {
        return Err(FucinaError::InvalidArgument { op: "WaveNet", msg: format!("need {len} steps, have {t}") });
    }
    x.narrow::<time>(t - len, len)
}

/// An activation as tensor ops (so it trains).
fn activate<A>(x: &Tensor<A>, a: Activation) -> Result<Tensor<A>>
where
    A: fucina::tensor::axes::Axes + fucina::tensor::axes::BroadcastFrom<A>,
{
    match a {
        Activation::Tanh => x.tanh(),
        Activation::Relu => x.relu(),
        Activation::Sigmoid => x.sigmoid(),
        Activation::Silu => x.silu(),
        // clamp(x, lo, hi) = lo + relu(x - lo) - relu(x - hi)
        Activation::Hardtanh { min, max } => {
            x.add_scalar(-min)?.relu()?.sub(&x.add_scalar(-max)?.relu()?)?.add_scalar(min)
        }
        // relu(x) - slope * relu(-x)
        Activation::LeakyRelu { slope } => x.relu()?.sub(&x.neg()?.relu()?.scale(slope)?),
        Activation::Softsign => x.div(&x.abs()?.add_scalar(1.0)?),
    }
}
