//! The Neural Amp Modeler `.nam` format: a JSON object with `version`, `architecture`,
//! `config`, a flat `weights` array, an optional `sample_rate` and `metadata`.
//!
//! Parsed here: the WaveNet architecture in both schemas found in the wild (0.5.x, with
//! `head_size`/`head_bias`/`kernel_size`/`gated` per layer array, and 0.6+/0.7, with
//! `head {out_channels, kernel_size, bias}`, per-layer `kernel_sizes`, `activation` and
//! `gating_mode` lists, `bottleneck`, `layer1x1`/`head1x1`), and the LSTM architecture.
//! Features the runtime does not implement (FiLM, grouped convolutions, a 1x1 head, no
//! layer 1x1, blended gating, a post-head, a condition DSP, slimmable layers) are rejected
//! with an error naming them. The weight count is checked against the config, so a
//! truncated or padded `weights` array is an error, never a short read.

use crate::error::{FucinaError, Result};
use serde_json::Value;
use std::path::Path;

/// An activation function of a WaveNet layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `tanh(x)`.
    Tanh,
    /// `max(x, 0)`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `clamp(x, min, max)`.
    Hardtanh {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// `x` if positive, else `slope * x`.
    LeakyRelu {
        /// Slope below zero.
        slope: f32,
    },
    /// `x * sigmoid(x)`.
    Silu,
    /// `x / (1 + |x|)`.
    Softsign,
}

impl Activation {
    /// Applies the function to one value.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Tanh => x.tanh(),
            Activation::Relu => x.max(0.0),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Activation::Hardtanh { min, max } => x.clamp(min, max),
            Activation::LeakyRelu { slope } => {
                if x > 0.0 {
                    x
                } else {
                    slope * x
                }
            }
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::Softsign => x / (1.0 + x.abs()),
        }
    }
}

/// One layer array of a WaveNet: a 1x1 rechannel, `dilations.len()` dilated layers, and a
/// head rechannel convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerArray {
    /// Channels coming in (1 for the first array: the audio).
    pub input_size: usize,
    /// Channels of the condition (the audio) mixed into every layer.
    pub condition_size: usize,
    /// Residual channels.
    pub channels: usize,
    /// Channels after the activation (the layer 1x1 maps them back to `channels`).
    pub bottleneck: usize,
    /// Kernel size of each layer.
    pub kernel_sizes: Vec<usize>,
    /// Dilation of each layer.
    pub dilations: Vec<usize>,
    /// Activation of each layer.
    pub activations: Vec<Activation>,
    /// Per layer: `Some(secondary)` for gated layers (`primary(a) * secondary(b)` over the
    /// two halves of `2 * bottleneck` channels), `None` for plain ones.
    pub gating: Vec<Option<Activation>>,
    /// Output channels of the head rechannel.
    pub head_out: usize,
    /// Kernel size of the head rechannel.
    pub head_kernel: usize,
    /// Whether the head rechannel has a bias.
    pub head_bias: bool,
}

impl LayerArray {
    /// Channels the dilated convolution produces (`2 * bottleneck` when gated).
    pub fn mid(&self, layer: usize) -> usize {
        if self.gating[layer].is_some() {
            2 * self.bottleneck
        } else {
            self.bottleneck
        }
    }

    /// Number of weights this array takes from the flat array.
    pub fn weight_count(&self) -> usize {
        let mut n = self.input_size * self.channels; // rechannel, no bias
        for (l, &k) in self.kernel_sizes.iter().enumerate() {
            let mid = self.mid(l);
            n += mid * self.channels * k + mid; // dilated conv + bias
            n += mid * self.condition_size; // input mixer, no bias
            n += self.channels * self.bottleneck + self.channels; // layer 1x1 + bias
        }
        n + self.head_out * self.bottleneck * self.head_kernel + if self.head_bias { self.head_out } else { 0 }
    }

    /// Samples of history the array needs (its receptive field minus one).
    pub fn lookback(&self) -> usize {
        self.kernel_sizes.iter().zip(&self.dilations).map(|(k, d)| (k - 1) * d).sum::<usize>() + self.head_kernel - 1
    }
}

/// The longest receptive field a `.nam` WaveNet may have, in samples (2^20: about 22 s at
/// 48 kHz; real captures use a few thousand). The streaming engine keeps and warms up that
/// much history, so a file must not be able to ask for millions.
pub const MAX_RECEPTIVE_FIELD: usize = 1 << 20;

/// A WaveNet model's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct WaveNetConfig {
    /// The layer arrays, first to last.
    pub layers: Vec<LayerArray>,
    /// Factor on the last array's head output.
    pub head_scale: f32,
}

impl WaveNetConfig {
    /// Number of weights the config takes (including the trailing head scale).
    pub fn weight_count(&self) -> usize {
        self.layers.iter().map(LayerArray::weight_count).sum::<usize>() + 1
    }

    /// The receptive field in samples.
    pub fn receptive_field(&self) -> usize {
        1 + self.layers.iter().map(LayerArray::lookback).sum::<usize>()
    }

    /// The receptive field, or `None` if computing it overflows.
    pub fn checked_receptive_field(&self) -> Option<usize> {
        self.layers.iter().try_fold(1usize, |acc, la| {
            let lb =
                la.kernel_sizes.iter().zip(&la.dilations).try_fold(la.head_kernel.checked_sub(1)?, |a, (k, d)| {
                    a.checked_add(k.checked_sub(1)?.checked_mul(*d)?)
                })?;
            acc.checked_add(lb)
        })
    }
}

/// An LSTM model's shape: `num_layers` stacked cells, then a linear head to one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LstmConfig {
    /// Input features (1: mono audio).
    pub input_size: usize,
    /// Hidden units per layer.
    pub hidden_size: usize,
    /// Stacked layers.
    pub num_layers: usize,
}

impl LstmConfig {
    /// Number of weights: per layer the `[4H, in + H]` matrix, the `4H` bias and the
    /// initial hidden and cell states; then the head's `H` weights and bias.
    pub fn weight_count(&self) -> usize {
        let h = self.hidden_size;
        (0..self.num_layers)
            .map(|l| {
                let input = if l == 0 { self.input_size } else { h };
                4 * h * (input + h) + 4 * h + 2 * h
            })
            .sum::<usize>()
            + h
            + 1
    }
}

/// The architecture of a `.nam` file.
#[derive(Debug, Clone, PartialEq)]
pub enum Architecture {
    /// WaveNet (dilated convolutions).
    WaveNet(WaveNetConfig),
    /// LSTM.
    Lstm(LstmConfig),
}

/// A parsed `.nam` file.
#[derive(Debug, Clone, PartialEq)]
pub struct NamFile {
    /// The file's `version` string.
    pub version: String,
    /// Architecture and shape.
    pub architecture: Architecture,
    /// The flat weights, checked against the shape.
    pub weights: Vec<f32>,
    /// Sample rate the model was trained at, if the file says.
    pub sample_rate: Option<f64>,
    /// The `metadata` object, if any (name, gear, loudness...).
    pub metadata: Option<Value>,
}

/// The FiLM switches of a 0.7 layer array (this runtime requires them all off).
const FILM_KEYS: [&str; 8] = [
    "conv_pre_film",
    "conv_post_film",
    "input_mixin_pre_film",
    "input_mixin_post_film",
    "activation_pre_film",
    "activation_post_film",
    "layer1x1_post_film",
    "head1x1_post_film",
];

fn bad(msg: impl Into<String>) -> FucinaError {
    FucinaError::Format { format: "nam", msg: msg.into() }
}

fn usize_at(v: &Value, key: &str, at: &str) -> Result<usize> {
    let x = v.get(key).ok_or_else(|| bad(format!("{at}: missing `{key}`")))?;
    let n = x.as_u64().ok_or_else(|| bad(format!("{at}: `{key}` must be a non-negative integer, got {x}")))?;
    // Shapes beyond this are not audio models; refusing them keeps every size product small.
    if n > 1 << 20 {
        return Err(bad(format!("{at}: `{key}` = {n} is implausibly large")));
    }
    Ok(n as usize)
}

fn positive(v: &Value, key: &str, at: &str) -> Result<usize> {
    match usize_at(v, key, at)? {
        0 => Err(bad(format!("{at}: `{key}` must be positive"))),
        n => Ok(n),
    }
}

fn f32_param(v: &Value, key: &str, default: f32) -> Result<f32> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => {
            x.as_f64().map(|f| f as f32).ok_or_else(|| bad(format!("activation parameter `{key}` must be a number")))
        }
    }
}

/// An activation from a name (`"Tanh"`) or an object (`{"type": "LeakyReLU", "negative_slope": 0.1}`).
fn activation(v: &Value, at: &str) -> Result<Activation> {
    let (name, params) = match v {
        Value::String(s) => (s.as_str(), &Value::Null),
        Value::Object(o) => {
            let n = o.get("type").or_else(|| o.get("name")).and_then(Value::as_str);
            (n.ok_or_else(|| bad(format!("{at}: activation object without `type`")))?, v)
        }
        other => return Err(bad(format!("{at}: activation must be a name or an object, got {other}"))),
    };
    Ok(match name {
        "Tanh" | "Fasttanh" => Activation::Tanh,
        "ReLU" => Activation::Relu,
        "Sigmoid" => Activation::Sigmoid,
        "Hardtanh" => {
            Activation::Hardtanh { min: f32_param(params, "min_val", -1.0)?, max: f32_param(params, "max_val", 1.0)? }
        }
        "LeakyReLU" => Activation::LeakyRelu { slope: f32_param(params, "negative_slope", 0.01)? },
        "SiLU" => Activation::Silu,
        "Softsign" => Activation::Softsign,
        other => return Err(bad(format!("{at}: activation `{other}` is not supported"))),
    })
}

/// A per-layer list, or one value broadcast to `n` layers.
fn per_layer<'a>(v: &'a Value, n: usize, what: &str, at: &str) -> Result<Vec<&'a Value>> {
    match v {
        Value::Array(items) if items.len() == n => Ok(items.iter().collect()),
        Value::Array(items) => Err(bad(format!("{at}: {} {what} for {n} layers", items.len()))),
        other => Ok(vec![other; n]),
    }
}

fn reject_if_active(la: &Value, key: &str, at: &str, what: &str) -> Result<()> {
    if la.get(key).and_then(|v| v.get("active")).and_then(Value::as_bool) == Some(true) {
        return Err(bad(format!("{at}: {what} (`{key}`) is not supported")));
    }
    Ok(())
}

fn layer_array(la: &Value, at: &str) -> Result<LayerArray> {
    if !la.is_object() {
        return Err(bad(format!("{at}: a layer array must be an object")));
    }
    let input_size = positive(la, "input_size", at)?;
    let condition_size = positive(la, "condition_size", at)?;
    let channels = positive(la, "channels", at)?;
    let dil =
        la.get("dilations").and_then(Value::as_array).ok_or_else(|| bad(format!("{at}: missing `dilations` list")))?;
    if dil.is_empty() || dil.len() > 4096 {
        return Err(bad(format!("{at}: {} dilations (need 1..=4096)", dil.len())));
    }
    let n = dil.len();
    let dilations = dil
        .iter()
        .map(|d| match d.as_u64() {
            Some(d) if (1..=1 << 16).contains(&d) => Ok(d as usize),
            _ => Err(bad(format!("{at}: dilation {d} must be an integer in 1..=65536"))),
        })
        .collect::<Result<Vec<_>>>()?;
    let ks_value = la
        .get("kernel_sizes")
        .or_else(|| la.get("kernel_size"))
        .ok_or_else(|| bad(format!("{at}: missing `kernel_size`")))?;
    let kernel_sizes = per_layer(ks_value, n, "kernel sizes", at)?
        .into_iter()
        .map(|k| match k.as_u64() {
            Some(k) if (1..=1024).contains(&k) => Ok(k as usize),
            _ => Err(bad(format!("{at}: kernel size {k} must be an integer in 1..=1024"))),
        })
        .collect::<Result<Vec<_>>>()?;
    let act_value = la.get("activation").ok_or_else(|| bad(format!("{at}: missing `activation`")))?;
    let activations = per_layer(act_value, n, "activations", at)?
        .into_iter()
        .map(|a| activation(a, at))
        .collect::<Result<Vec<_>>>()?;
    // Gating: the 0.5 schema's `gated: true` is tanh * sigmoid; the 0.7 schema lists a
    // `gating_mode` and a `secondary_activation` per layer.
    let gating = if let Some(modes) = la.get("gating_mode") {
        let modes = per_layer(modes, n, "gating modes", at)?;
        let seconds = match la.get("secondary_activation") {
            Some(s) => per_layer(s, n, "secondary activations", at)?,
            None => vec![&Value::Null; n],
        };
        modes
            .into_iter()
            .zip(seconds)
            .map(|(m, s)| match m {
                Value::Null => Ok(None),
                Value::String(x) if x == "none" => Ok(None),
                Value::String(x) if x == "gated" => {
                    Ok(Some(if s.is_null() { Activation::Sigmoid } else { activation(s, at)? }))
                }
                Value::String(x) => Err(bad(format!("{at}: gating mode `{x}` is not supported"))),
                _ => Err(bad(format!("{at}: gating mode must be a string"))),
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        match la.get("gated").and_then(Value::as_bool) {
            Some(true) => vec![Some(Activation::Sigmoid); n],
            _ => vec![None; n],
        }
    };
    let bottleneck = match la.get("bottleneck") {
        None | Some(Value::Null) => channels,
        Some(_) => positive(la, "bottleneck", at)?,
    };
    // Head rechannel: the 0.7 `head` object, or the 0.5 `head_size`/`head_bias`.
    let (head_out, head_kernel, head_bias) = match la.get("head") {
        Some(h) if h.is_object() => (
            positive(h, "out_channels", at)?,
            positive(h, "kernel_size", at)?,
            h.get("bias")
                .and_then(Value::as_bool)
                .ok_or_else(|| bad(format!("{at}: head `bias` must be a boolean")))?,
        ),
        _ => (
            positive(la, "head_size", at)?,
            1,
            la.get("head_bias").and_then(Value::as_bool).ok_or_else(|| bad(format!("{at}: missing `head_bias`")))?,
        ),
    };
    for key in ["groups_input", "groups_input_mixin"] {
        if let Some(g) = la.get(key) {
            if g.as_u64() != Some(1) {
                return Err(bad(format!("{at}: grouped convolutions (`{key}` = {g}) are not supported")));
            }
        }
    }
    reject_if_active(la, "head1x1", at, "a head 1x1 convolution")?;
    reject_if_active(la, "head_1x1_config", at, "a head 1x1 convolution")?;
    for key in ["layer1x1", "layer_1x1_config"] {
        if let Some(c) = la.get(key) {
            if c.get("active").and_then(Value::as_bool) == Some(false) {
                return Err(bad(format!("{at}: layers without their 1x1 convolution (`{key}`) are not supported")));
            }
            if c.get("groups").is_some_and(|g| g.as_u64() != Some(1)) {
                return Err(bad(format!("{at}: a grouped layer 1x1 is not supported")));
            }
        }
    }
    for film in FILM_KEYS {
        reject_if_active(la, film, at, "FiLM conditioning")?;
    }
    if la.get("slimmable").is_some_and(|s| !s.is_null()) {
        return Err(bad(format!("{at}: slimmable layer arrays are not supported")));
    }
    Ok(LayerArray {
        input_size,
        condition_size,
        channels,
        bottleneck,
        kernel_sizes,
        dilations,
        activations,
        gating,
        head_out,
        head_kernel,
        head_bias,
    })
}

fn wavenet(config: &Value) -> Result<WaveNetConfig> {
    let arrays =
        config.get("layers").and_then(Value::as_array).ok_or_else(|| bad("WaveNet config: missing `layers` list"))?;
    if arrays.is_empty() || arrays.len() > 64 {
        return Err(bad(format!("WaveNet config: {} layer arrays (need 1..=64)", arrays.len())));
    }
    let layers = arrays
        .iter()
        .enumerate()
        .map(|(i, la)| layer_array(la, &format!("layer array {i}")))
        .collect::<Result<Vec<_>>>()?;
    if config.get("head").is_some_and(|h| !h.is_null()) {
        return Err(bad("WaveNet config: a post-head (`head`) is not supported"));
    }
    if config.get("condition_dsp").is_some_and(|h| !h.is_null()) {
        return Err(bad("WaveNet config: a condition DSP (`condition_dsp`) is not supported"));
    }
    let head_scale = config
        .get("head_scale")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad("WaveNet config: missing numeric `head_scale`"))? as f32;
    // The arrays must chain: each takes the previous one's residual channels, and its head
    // continues the previous head (same width as this array's bottleneck).
    let first = &layers[0];
    if first.input_size != 1 || first.condition_size != 1 {
        return Err(bad("layer array 0: mono models only (input_size and condition_size 1)"));
    }
    for (i, w) in layers.windows(2).enumerate() {
        let (a, b) = (&w[0], &w[1]);
        if b.input_size != a.channels {
            return Err(bad(format!(
                "layer array {}: input_size {} but the previous array has {} channels",
                i + 1,
                b.input_size,
                a.channels
            )));
        }
        if a.head_out != b.bottleneck {
            return Err(bad(format!(
                "layer array {}: its head ({} channels) does not continue the previous head ({} channels)",
                i + 1,
                b.bottleneck,
                a.head_out
            )));
        }
        if b.condition_size != 1 {
            return Err(bad(format!("layer array {}: condition_size must be 1", i + 1)));
        }
    }
    if layers.last().is_some_and(|l| l.head_out != 1) {
        return Err(bad("the last layer array's head must have 1 output channel (mono output)"));
    }
    Ok(WaveNetConfig { layers, head_scale })
}

fn lstm(config: &Value) -> Result<LstmConfig> {
    let at = "LSTM config";
    let c = LstmConfig {
        input_size: match config.get("input_size") {
            None => 1,
            Some(_) => positive(config, "input_size", at)?,
        },
        hidden_size: positive(config, "hidden_size", at)?,
        num_layers: positive(config, "num_layers", at)?,
    };
    if c.input_size != 1 {
        return Err(bad("LSTM config: mono models only (input_size 1)"));
    }
    if c.hidden_size > 4096 || c.num_layers > 64 {
        return Err(bad(format!("LSTM config: {} layers of {} units is too large", c.num_layers, c.hidden_size)));
    }
    Ok(c)
}

impl NamFile {
    /// Parses the JSON text of a `.nam` file.
    pub fn parse(text: &[u8]) -> Result<NamFile> {
        let v: Value = serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| bad("the top level must be a JSON object"))?;
        let version =
            obj.get("version").and_then(Value::as_str).ok_or_else(|| bad("missing `version` string"))?.to_string();
        let major_minor: Vec<u64> = version.split('.').take(2).filter_map(|p| p.parse().ok()).collect();
        if major_minor.len() != 2 || major_minor[0] != 0 || !(5..=7).contains(&major_minor[1]) {
            return Err(bad(format!("version `{version}` is not supported (0.5.x to 0.7.x are)")));
        }
        let arch =
            obj.get("architecture").and_then(Value::as_str).ok_or_else(|| bad("missing `architecture` string"))?;
        let config = obj.get("config").filter(|c| c.is_object()).ok_or_else(|| bad("missing `config` object"))?;
        let architecture = match arch {
            "WaveNet" => {
                let c = wavenet(config)?;
                match c.checked_receptive_field() {
                    Some(r) if r <= MAX_RECEPTIVE_FIELD => {}
                    r => {
                        return Err(bad(format!(
                            "the receptive field is {} samples; the limit is {MAX_RECEPTIVE_FIELD} (~22 s at 48 kHz)",
                            r.map_or_else(|| "more than 2^64".to_string(), |r| r.to_string())
                        )))
                    }
                }
                Architecture::WaveNet(c)
            }
            "LSTM" => Architecture::Lstm(lstm(config)?),
            other => return Err(bad(format!("architecture `{other}` is not supported (WaveNet and LSTM are)"))),
        };
        let raw = obj.get("weights").and_then(Value::as_array).ok_or_else(|| bad("missing `weights` array"))?;
        let weights = raw
            .iter()
            .enumerate()
            .map(|(i, w)| match w.as_f64().map(|x| x as f32) {
                // Checked after the conversion: 1e300 is a finite f64 but an infinite f32.
                Some(x) if x.is_finite() => Ok(x),
                _ => Err(bad(format!("weight {i} is not a finite 32-bit number: {w}"))),
            })
            .collect::<Result<Vec<f32>>>()?;
        let need = match &architecture {
            Architecture::WaveNet(c) => c.weight_count(),
            Architecture::Lstm(c) => c.weight_count(),
        };
        if weights.len() != need {
            return Err(bad(format!("the config needs {need} weights, the file has {}", weights.len())));
        }
        let sample_rate = match obj.get("sample_rate") {
            None | Some(Value::Null) => None,
            Some(r) => match r.as_f64() {
                Some(r) if r > 0.0 && r.is_finite() => Some(r),
                _ => return Err(bad(format!("`sample_rate` must be a positive number, got {r}"))),
            },
        };
        Ok(NamFile { version, architecture, weights, sample_rate, metadata: obj.get("metadata").cloned() })
    }

    /// Reads and parses a `.nam` file.
    pub fn open(path: impl AsRef<Path>) -> Result<NamFile> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|e| FucinaError::io(path.display().to_string(), e))?;
        NamFile::parse(&text)
    }
}

/// The `.nam` schema to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// 0.7: what neural-amp-modeler 0.13 writes and reads (per-layer lists, `head` object,
    /// `layer1x1`/`head1x1`, FiLM switches).
    V0_7,
    /// 0.5: what NAM 0.5..0.12 and older plugins read (`head_size`, `kernel_size`, `gated`).
    V0_5,
}

/// A `.nam` document for a WaveNet or LSTM with the given flat weights.
pub fn to_json(
    architecture: &Architecture,
    weights: &[f32],
    sample_rate: Option<f64>,
    metadata: Option<&Value>,
    schema: Schema,
) -> Value {
    let (arch, config) = match architecture {
        Architecture::WaveNet(c) => {
            let layers: Vec<Value> = c.layers.iter().map(|la| array_json(la, schema)).collect();
            ("WaveNet", serde_json::json!({ "layers": layers, "head": Value::Null, "head_scale": c.head_scale }))
        }
        Architecture::Lstm(c) => (
            "LSTM",
            serde_json::json!({ "input_size": c.input_size, "hidden_size": c.hidden_size, "num_layers": c.num_layers }),
        ),
    };
    let version = match schema {
        Schema::V0_7 => "0.7.0",
        Schema::V0_5 => "0.5.4",
    };
    let mut out = serde_json::json!({
        "version": version,
        "architecture": arch,
        "config": config,
        "weights": weights,
        "metadata": metadata.cloned().unwrap_or_else(|| serde_json::json!({})),
    });
    if let Some(r) = sample_rate {
        out["sample_rate"] = serde_json::json!(r);
    }
    out
}

fn activation_json(a: Activation) -> Value {
    match a {
        Activation::Hardtanh { min, max } => serde_json::json!({ "type": "Hardtanh", "min_val": min, "max_val": max }),
        Activation::LeakyRelu { slope } => serde_json::json!({ "type": "LeakyReLU", "negative_slope": slope }),
        other => serde_json::json!({ "type": activation_name(other) }),
    }
}

fn array_json(la: &LayerArray, schema: Schema) -> Value {
    match schema {
        Schema::V0_5 => serde_json::json!({
            "input_size": la.input_size,
            "condition_size": la.condition_size,
            "channels": la.channels,
            "head_size": la.head_out,
            "kernel_size": la.kernel_sizes[0],
            "dilations": la.dilations,
            "activation": activation_name(la.activations[0]),
            "gated": la.gating.first().copied().flatten().is_some(),
            "head_bias": la.head_bias,
        }),
        Schema::V0_7 => {
            let off = serde_json::json!({ "active": false, "shift": true, "groups": 1 });
            let mut v = serde_json::json!({
                "input_size": la.input_size,
                "condition_size": la.condition_size,
                "head": { "out_channels": la.head_out, "kernel_size": la.head_kernel, "bias": la.head_bias },
                "channels": la.channels,
                "kernel_sizes": la.kernel_sizes,
                "dilations": la.dilations,
                "activation": la.activations.iter().map(|a| activation_json(*a)).collect::<Vec<_>>(),
                "bottleneck": la.bottleneck,
                "head1x1": { "active": false, "out_channels": 1, "groups": 1 },
                "layer1x1": { "active": true, "groups": 1 },
                "groups_input": 1,
                "groups_input_mixin": 1,
                "gating_mode": la.gating.iter().map(|g| if g.is_some() { "gated" } else { "none" }).collect::<Vec<_>>(),
                "secondary_activation": la.gating.iter().map(|g| g.map_or(Value::Null, activation_json)).collect::<Vec<_>>(),
                "slimmable": Value::Null,
            });
            for film in FILM_KEYS {
                v[film] = off.clone();
            }
            v
        }
    }
}

fn activation_name(a: Activation) -> &'static str {
    match a {
        Activation::Tanh => "Tanh",
        Activation::Relu => "ReLU",
        Activation::Sigmoid => "Sigmoid",
        Activation::Hardtanh { .. } => "Hardtanh",
        Activation::LeakyRelu { .. } => "LeakyReLU",
        Activation::Silu => "SiLU",
        Activation::Softsign => "Softsign",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(extra: &str, weights: usize) -> String {
        format!(
            r#"{{"version": "0.5.4", "architecture": "WaveNet", "config": {{"layers": [{{"input_size": 1,
            "condition_size": 1, "channels": 2, "head_size": 1, "kernel_size": 3, "dilations": [1, 2],
            "activation": "Tanh", "gated": false, "head_bias": true {extra}}}], "head": null, "head_scale": 0.02}},
            "weights": [{}], "sample_rate": 48000}}"#,
            vec!["0.1"; weights].join(",")
        )
    }

    #[test]
    fn parses_and_counts_weights() {
        // rechannel 2 + per layer (conv 2*2*3 + 2, mixer 2, 1x1 2*2 + 2 = 22) * 2 + head 2 + 1 + scale 1
        let f = NamFile::parse(tiny("", 50).as_bytes()).unwrap();
        let Architecture::WaveNet(c) = &f.architecture else { panic!() };
        assert_eq!(c.weight_count(), 50);
        assert_eq!(c.receptive_field(), 1 + 2 + 4);
        assert_eq!(f.sample_rate, Some(48000.0));
        let e = NamFile::parse(tiny("", 49).as_bytes()).unwrap_err().to_string();
        assert!(e.contains("needs 50 weights, the file has 49"), "{e}");
    }

    #[test]
    fn both_schemas_round_trip() {
        let f = NamFile::parse(tiny("", 50).as_bytes()).unwrap();
        for schema in [Schema::V0_7, Schema::V0_5] {
            let doc = to_json(&f.architecture, &f.weights, f.sample_rate, None, schema);
            let back = NamFile::parse(doc.to_string().as_bytes()).unwrap();
            assert_eq!(back.architecture, f.architecture, "{schema:?}");
            assert_eq!(back.weights, f.weights);
        }
    }

    #[test]
    fn malformed_files_are_errors_that_say_why() {
        for (text, want) in [
            ("", "not valid JSON"),
            ("[]", "JSON object"),
            (r#"{"version": "0.5.4"}"#, "architecture"),
            (r#"{"version": "9.0.0", "architecture": "WaveNet", "config": {}, "weights": []}"#, "version"),
            (r#"{"version": "0.5.4", "architecture": "Transformer", "config": {}, "weights": []}"#, "Transformer"),
            (
                r#"{"version": "0.5.4", "architecture": "LSTM", "config": {"hidden_size": 0, "num_layers": 1}, "weights": []}"#,
                "positive",
            ),
        ] {
            let e = NamFile::parse(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let e = NamFile::parse(tiny(r#", "conv_pre_film": {"active": true}"#, 50).as_bytes()).unwrap_err().to_string();
        assert!(e.contains("FiLM"), "{e}");
        let text = tiny("", 50).replace("\"dilations\": [1, 2]", "\"dilations\": [1, 99999999]");
        assert!(NamFile::parse(text.as_bytes()).unwrap_err().to_string().contains("dilation"));
        let text = tiny("", 50).replace("0.1]", "1e999]");
        assert!(NamFile::parse(text.as_bytes()).is_err());
    }
}
