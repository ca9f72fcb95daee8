//! Hyper-parameters of a `gemma4` GGUF (llama.cpp's keys): which layers attend through a
//! sliding window and which globally, each kind's head width, key/value heads and RoPE base,
//! the layers at the end that reuse earlier layers' keys and values, per-layer
//! feed-forward widths, the per-layer-embedding width, experts, and the logit soft-cap.

use crate::llm::weights::{product, ModelFile};
use fucina::formats::gguf::{Array, Value};
use fucina::prelude::*;

/// The routed experts of a Gemma 4 MoE layer (beside its dense GeGLU).
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Moe {
    /// Routed experts per layer.
    pub experts: usize,
    /// Experts each token uses.
    pub used: usize,
    /// GeGLU inner width of one expert.
    pub expert_ffn: usize,
}

/// The shape of a Gemma 4 model.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual stream width.
    pub hidden: usize,
    /// Per layer: the dense GeGLU's inner width (twice as wide in the KV-sharing layers of
    /// models with `use_double_wide_mlp`).
    pub ffn: Vec<usize>,
    /// Query heads (every layer).
    pub heads: usize,
    /// Per layer: key/value heads.
    pub kv_heads: Vec<usize>,
    /// Per layer: whether it attends through the sliding window (otherwise globally).
    pub sliding: Vec<bool>,
    /// Head width of the global layers.
    pub head_dim: usize,
    /// Head width of the sliding-window layers.
    pub head_dim_swa: usize,
    /// Each sliding-window position attends to at most this many positions, itself included.
    pub window: usize,
    /// RoPE base of the global layers (their rotation also divides each pair's frequency by
    /// the file's `rope_freqs`: "proportional" RoPE over part of the head).
    pub rope_theta: f32,
    /// RoPE base of the sliding-window layers.
    pub rope_theta_swa: f32,
    /// Rotated width of a global head.
    pub rope_dims: usize,
    /// Rotated width of a sliding-window head.
    pub rope_dims_swa: usize,
    /// The first layer that reuses an earlier layer's keys and values (`layers` when none
    /// does): each such layer attends over the cache of the last earlier layer of its kind.
    pub first_shared: usize,
    /// Width of each layer's slice of the per-layer embeddings (0: none).
    pub per_layer: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Longest context the model was trained for.
    pub context_length: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// `cap · tanh(logits / cap)` on the output.
    pub logit_softcap: Option<f32>,
    /// Routed experts (the MoE variant), or `None`.
    pub moe: Option<Gemma4Moe>,
}

/// A per-layer integer key that a file may hold as one value for every layer or as an array.
fn per_layer(f: &ModelFile, key: &str, layers: usize) -> Result<Vec<usize>> {
    let full = format!("{}.{key}", f.arch);
    let bad = |msg: String| FucinaError::Format { format: "gguf", msg };
    match f.gguf.header().get(&full) {
        Some(Value::Array(a)) => {
            let v = a.to_i64s().ok_or_else(|| bad(format!("`{full}` is not an array of integers")))?;
            if v.len() < layers {
                return Err(bad(format!("`{full}` lists {} layers of {layers}", v.len())));
            }
            v[..layers]
                .iter()
                .map(|&x| {
                    usize::try_from(x)
                        .ok()
                        .filter(|&x| x <= crate::llm::weights::MAX_META_SIZE)
                        .ok_or_else(|| bad(format!("`{full}` holds {x}")))
                })
                .collect()
        }
        Some(_) => Ok(vec![f.usize(key)?; layers]),
        None => Err(bad(format!("missing metadata `{full}`"))),
    }
}

impl Gemma4Config {
    /// Reads the config of a `gemma4` GGUF, checking that the sizes agree.
    pub fn from_file(f: &ModelFile) -> Result<Gemma4Config> {
        let bad = |msg: String| FucinaError::Format { format: "gguf", msg };
        if f.arch != "gemma4" {
            return Err(bad(format!("`{}` is not a gemma4 file", f.arch)));
        }
        let layers = f.usize("block_count")?;
        f.check_layers(layers)?;
        let key = "gemma4.attention.sliding_window_pattern";
        let sliding = match f.gguf.header().get(key) {
            Some(Value::Array(Array::Bool(v))) if v.len() >= layers => v[..layers].to_vec(),
            Some(_) => return Err(bad(format!("`{key}` is not an array of {layers} booleans"))),
            None => return Err(bad(format!("missing metadata `{key}`"))),
        };
        let head_dim = f.usize("attention.key_length")?;
        let head_dim_swa = f.usize("attention.key_length_swa")?;
        if f.opt_usize("attention.value_length")?.is_some_and(|v| v != head_dim)
            || f.opt_usize("attention.value_length_swa")?.is_some_and(|v| v != head_dim_swa)
        {
            return Err(bad("Gemma 4 needs values as wide as keys".into()));
        }
        let shared = f.opt_usize("attention.shared_kv_layers")?.unwrap_or(0);
        let moe = match f.opt_usize("expert_count")? {
            Some(e) if e > 0 => Some(Gemma4Moe {
                experts: e,
                used: f.usize("expert_used_count")?,
                expert_ffn: f.usize("expert_feed_forward_length")?,
            }),
            _ => None,
        };
        let emb = f.gguf.tensor_info("token_embd.weight")?.shape();
        let c = Gemma4Config {
            layers,
            hidden: f.usize("embedding_length")?,
            ffn: per_layer(f, "feed_forward_length", layers)?,
            heads: f.usize("attention.head_count")?,
            kv_heads: per_layer(f, "attention.head_count_kv", layers)?,
            sliding,
            head_dim,
            head_dim_swa,
            window: f.usize("attention.sliding_window")?,
            rope_theta: f.f32_or("rope.freq_base", 1_000_000.0)?,
            rope_theta_swa: f.f32_or("rope.freq_base_swa", 10_000.0)?,
            rope_dims: f.opt_usize("rope.dimension_count")?.unwrap_or(head_dim),
            rope_dims_swa: f.opt_usize("rope.dimension_count_swa")?.unwrap_or(head_dim_swa),
            first_shared: layers.checked_sub(shared).ok_or_else(|| bad(format!("{shared} shared of {layers}")))?,
            per_layer: f.opt_usize("embedding_length_per_layer_input")?.unwrap_or(0),
            vocab: emb.first().copied().unwrap_or(0),
            context_length: f.opt_usize("context_length")?.unwrap_or(131_072),
            rms_eps: f.f32_or("attention.layer_norm_rms_epsilon", 1e-6)?,
            logit_softcap: Some(f.f32_or("final_logit_softcapping", 0.0)?).filter(|c| *c != 0.0),
            moe,
        };
        c.validate()?;
        Ok(c)
    }

    /// Head width of layer `l`.
    pub fn head_dim_of(&self, l: usize) -> usize {
        if self.sliding[l] {
            self.head_dim_swa
        } else {
            self.head_dim
        }
    }

    /// The cache slot layer `l` attends over: its own for layers before
    /// [`Gemma4Config::first_shared`], else that of the last earlier layer of its kind.
    pub fn kv_slot(&self, l: usize) -> Result<usize> {
        if l < self.first_shared {
            return Ok(l);
        }
        (0..self.first_shared).rev().find(|&i| self.sliding[i] == self.sliding[l]).ok_or_else(|| FucinaError::Format {
            format: "gguf",
            msg: format!("layer {l} reuses keys and values, but no earlier layer of its kind has them"),
        })
    }

    /// Checks the sizes: nonzero, heads divisible by every layer's kv heads, even head and
    /// rotary widths, a window, experts that can be chosen.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(FucinaError::Format { format: "gguf", msg });
        for (name, v) in [
            ("block_count", self.layers),
            ("embedding_length", self.hidden),
            ("head_count", self.heads),
            ("key_length", self.head_dim),
            ("key_length_swa", self.head_dim_swa),
            ("sliding_window", self.window),
            ("vocabulary", self.vocab),
            ("context_length", self.context_length),
        ] {
            if v == 0 {
                return bad(format!("gemma4 `{name}` is 0"));
            }
        }
        for l in 0..self.layers {
            let kv = self.kv_heads[l];
            if kv == 0 || !self.heads.is_multiple_of(kv) {
                return bad(format!("layer {l}: {} query heads do not split into {kv} kv groups", self.heads));
            }
            if self.ffn[l] == 0 {
                return bad(format!("layer {l}: feed-forward width 0"));
            }
            product("feed-forward", &[self.ffn[l], self.hidden])?;
            product("key/value cache row", &[kv, self.head_dim_of(l), self.context_length])?;
            self.kv_slot(l)?;
        }
        for (what, d, r) in
            [("global", self.head_dim, self.rope_dims), ("sliding", self.head_dim_swa, self.rope_dims_swa)]
        {
            if !d.is_multiple_of(2) || r == 0 || !r.is_multiple_of(2) || r > d {
                return bad(format!("{what} heads of {d} rotated over {r}: need even widths, at most the head"));
            }
            product("query width", &[self.heads, d])?;
        }
        product("embedding", &[self.vocab, self.hidden])?;
        product("per-layer embedding", &[self.vocab, self.layers, self.per_layer])?;
        if let Some(m) = &self.moe {
            if m.experts == 0 || m.expert_ffn == 0 || m.used == 0 || m.used > m.experts {
                return bad(format!("{} of {} experts of width {}", m.used, m.experts, m.expert_ffn));
            }
            product("experts", &[m.experts, 2 * m.expert_ffn, self.hidden])?;
        }
        if let Some(cap) = self.logit_softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return bad(format!("final_logit_softcapping {cap}"));
            }
        }
        for (name, t) in [("rope.freq_base", self.rope_theta), ("rope.freq_base_swa", self.rope_theta_swa)] {
            if !(t.is_finite() && t > 1.0) {
                return bad(format!("`{name}` = {t}"));
            }
        }
        Ok(())
    }
}
