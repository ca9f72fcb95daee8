//! Hyper-parameters of the decoder family (`llama`, `qwen2`, `qwen3`, `qwen3moe`, `glm4moe`),
//! read from GGUF metadata. The families differ as data: per-head q/k norms (Qwen3, GLM-4.5
//! where the file has them), q/k/v biases (Qwen2, GLM-4.5, and Llamas whose files have them),
//! the rotation layout (llama.cpp's converter permutes a `llama` file's q/k rows for
//! interleaved pairs), the rotated width (GLM-4.5 rotates half of each head), per-pair
//! frequency factors (Llama 3's `rope_freqs`), linear position scaling, and the experts:
//! softmax routing (Qwen3-MoE) or DeepSeek-V3's biased sigmoid with groups, shared experts
//! and leading dense layers (GLM-4.5).

use crate::llm::moe::{Gating, Routing};
use crate::llm::weights::{product, ModelFile};
use fucina::ops::RopeStyle;
use fucina::prelude::*;

/// The mixture-of-experts part of a config (Qwen3-MoE, GLM-4.5).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Routed experts per layer.
    pub experts: usize,
    /// SwiGLU inner width of one expert.
    pub expert_ffn: usize,
    /// Shared experts, run on every token as one SwiGLU of `shared_ffn` width.
    pub shared: usize,
    /// Inner width of the shared experts' SwiGLU (GLM-4.5: `shared * expert_ffn`; Qwen3.5-MoE:
    /// `expert_shared_feed_forward_length`).
    pub shared_ffn: usize,
    /// The shared experts' output is scaled by `sigmoid(x . g)` per token (Qwen3.5-MoE's
    /// `shared_expert_gate`, `ffn_gate_inp_shexp`).
    pub shared_gate: bool,
    /// Leading layers that keep a dense SwiGLU of width `ffn` (GLM-4.5's
    /// `first_k_dense_replace`).
    pub dense_lead: usize,
    /// How tokens choose their experts.
    pub routing: Routing,
}

/// The Gated DeltaNet layers of a hybrid model (Qwen3.5): their sizes and which layers they
/// are (the others are full attention).
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNetConfig {
    /// Taps of the causal depthwise convolution over queries, keys and values.
    pub conv_kernel: usize,
    /// Key (and query) heads.
    pub k_heads: usize,
    /// Value heads, a multiple of `k_heads` (tiled over the key heads, as llama.cpp's
    /// converter orders them).
    pub v_heads: usize,
    /// Width of a key head.
    pub head_k: usize,
    /// Width of a value head.
    pub head_v: usize,
    /// Per layer: whether it is a Gated DeltaNet layer.
    pub recurrent: Vec<bool>,
}

impl DeltaNetConfig {
    /// Channels of the convolution: queries, keys and values side by side.
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.head_k + self.v_heads * self.head_v
    }
}

/// The activation of a dense feed-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnAct {
    /// `down(silu(gate x) * up x)`: every family but nanochat.
    SwiGlu,
    /// `down(relu(up x)²)`, no gate: nanochat.
    Relu2,
}

/// The shape of a Qwen3 model (dense, or MoE when `moe` is set).
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual stream width.
    pub hidden: usize,
    /// SwiGLU inner width.
    pub ffn: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding).
    pub vocab: usize,
    /// Longest context the model was trained for.
    pub context_length: usize,
    /// RoPE base.
    pub rope_theta: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Experts (`qwen3moe` files), or `None` for the dense model.
    pub moe: Option<MoeConfig>,
    /// Per-head RMSNorm of queries and keys (Qwen3, Qwen3-MoE).
    pub qk_norm: bool,
    /// Biases on the query, key and value projections (Qwen2; Llamas whose file has them).
    pub qkv_bias: bool,
    /// Which values RoPE rotates together: pairs in `llama` files, halves otherwise.
    pub rope_style: RopeStyle,
    /// Positions are divided by this (`rope.scaling.type = linear`; 1 otherwise).
    pub rope_linear: f32,
    /// The leading values of each head that RoPE rotates (`head_dim`, or less for a partial
    /// rotary embedding).
    pub rope_dims: usize,
    /// Multi-token-prediction layers the file carries after the `layers` blocks (GLM-4.5's
    /// `nextn` layer), not part of the decoder.
    pub nextn: usize,
    /// Each position attends to at most this many positions, itself included
    /// (`attention.sliding_window`: Mistral v0.1's sliding-window attention), or to all
    /// before it.
    pub sliding_window: Option<usize>,
    /// Whether the RMSNorms have weights (nanochat's have none: each is a plain RMSNorm).
    pub norm_weights: bool,
    /// An RMSNorm right after the embedding lookup (nanochat).
    pub embed_norm: bool,
    /// The dense feed-forward's activation.
    pub ffn_act: FfnAct,
    /// `cap · tanh(logits / cap)` on the output (nanochat's `final_logit_softcapping`).
    pub logit_softcap: Option<f32>,
    /// RoPE turns each pair by −θ (nanochat's `rotate_half` with flipped signs).
    pub rope_reversed: bool,
    /// The query projection also yields a gate per query value, and the attention output is
    /// multiplied by its sigmoid (Qwen3.5).
    pub attn_gate: bool,
    /// Gated DeltaNet layers in place of some attention layers (Qwen3.5).
    pub deltanet: Option<DeltaNetConfig>,
}

/// The architectures this config reads.
pub const DECODER_ARCHITECTURES: &[&str] =
    &["qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen2", "llama", "glm4moe", "nanochat"];

impl Qwen3Config {
    /// Reads the config of a `qwen3`, `qwen3moe`, `qwen2`, `llama` or `glm4moe` GGUF, checking
    /// that the sizes agree and refusing what this decoder does not do (YaRN-scaled RoPE).
    pub fn from_file(f: &ModelFile) -> Result<Qwen3Config> {
        if !DECODER_ARCHITECTURES.contains(&f.arch.as_str()) {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("`{}` is not a decoder architecture", f.arch),
            });
        }
        let qwen3 = f.arch.starts_with("qwen3");
        let nanochat = f.arch == "nanochat";
        let heads = f.usize("attention.head_count")?;
        let hidden = f.usize("embedding_length")?;
        let head_dim = match f.opt_usize("attention.key_length")? {
            Some(d) => d,
            None if heads > 0 => hidden / heads,
            None => 0,
        };
        let emb = f.gguf.tensor_info("token_embd.weight")?.shape();
        let bad = |msg: String| FucinaError::Format { format: "gguf", msg };
        let blocks = f.usize("block_count")?;
        let nextn = f.opt_usize("nextn_predict_layers")?.unwrap_or(0);
        if nextn >= blocks {
            return Err(bad(format!("{nextn} next-token-prediction layers of {blocks} blocks leave no decoder")));
        }
        let qwen35 = f.arch == "qwen35" || f.arch == "qwen35moe";
        let moe = if f.arch == "qwen3moe" || f.arch == "glm4moe" || f.arch == "qwen35moe" {
            let gating = match f.opt_usize("expert_gating_func")? {
                None | Some(0) | Some(1) => Gating::Softmax,
                Some(2) => Gating::Sigmoid,
                Some(other) => {
                    return Err(bad(format!("expert_gating_func {other} is not supported (1 softmax, 2 sigmoid)")))
                }
            };
            let expert_ffn = f.usize("expert_feed_forward_length")?;
            // Qwen3.5-MoE names its shared expert's width; GLM-4.5 counts expert-sized ones.
            let (shared, shared_ffn) = match f.opt_usize("expert_shared_feed_forward_length")? {
                Some(w) if w > 0 => (1, w),
                _ => {
                    let n = f.opt_usize("expert_shared_count")?.unwrap_or(0);
                    (n, n.checked_mul(expert_ffn).ok_or_else(|| bad(format!("{n} shared experts of {expert_ffn}")))?)
                }
            };
            Some(MoeConfig {
                experts: f.usize("expert_count")?,
                expert_ffn,
                shared,
                shared_ffn,
                shared_gate: f.arch == "qwen35moe",
                dense_lead: f.opt_usize("leading_dense_block_count")?.unwrap_or(0),
                routing: Routing {
                    used: f.usize("expert_used_count")?,
                    gating,
                    groups: f.opt_usize("expert_group_count")?.unwrap_or(1).max(1),
                    groups_used: f.opt_usize("expert_group_used_count")?.unwrap_or(1).max(1),
                    // llama.cpp renormalizes Qwen3-MoE's top-k weights unless told otherwise.
                    norm_topk: f.bool_or("expert_weights_norm", f.arch == "qwen3moe" || f.arch == "qwen35moe")?,
                    scale: f.f32_or("expert_weights_scale", 1.0)?,
                },
            })
        } else {
            None
        };
        let c = Qwen3Config {
            layers: blocks - nextn,
            hidden,
            // A model whose every layer routes to experts may have no dense width.
            ffn: match (&moe, f.opt_usize("feed_forward_length")?) {
                (_, Some(w)) => w,
                (Some(m), None) if m.dense_lead == 0 => m.expert_ffn,
                (_, None) => f.usize("feed_forward_length")?,
            },
            heads,
            kv_heads: f.opt_usize("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            vocab: emb.first().copied().unwrap_or(0),
            context_length: f.opt_usize("context_length")?.unwrap_or(4096),
            // llama.cpp's defaults where a file has no value.
            rope_theta: f.f32_or("rope.freq_base", if qwen3 { 1_000_000.0 } else { 10_000.0 })?,
            rms_eps: f.f32_or("attention.layer_norm_rms_epsilon", if qwen3 { 1e-6 } else { 1e-5 })?,
            moe,
            // Required in Qwen3 files; GLM-4.5 has them where its config says `use_qk_norm`.
            qk_norm: qwen3 || nanochat || f.has("blk.0.attn_q_norm.weight"),
            qkv_bias: f.has("blk.0.attn_q.bias"),
            rope_style: if f.arch == "llama" { RopeStyle::Pairs } else { RopeStyle::Halves },
            rope_linear: match f.gguf.header().get(&format!("{}.rope.scaling.type", f.arch)).and_then(|v| v.as_str()) {
                None | Some("none") => 1.0,
                Some("linear") => f.f32_or("rope.scaling.factor", 1.0)?,
                Some(other) => {
                    return Err(FucinaError::Format {
                        format: "gguf",
                        msg: format!(
                            "{} RoPE scaling `{other}` is not supported (linear and Llama 3's factors are)",
                            f.arch
                        ),
                    })
                }
            },
            rope_dims: f.opt_usize("rope.dimension_count")?.unwrap_or(head_dim),
            nextn,
            // 0 (as llama.cpp's converter writes to turn it off) means none.
            sliding_window: f.opt_usize("attention.sliding_window")?.filter(|&w| w > 0),
            norm_weights: !nanochat,
            embed_norm: nanochat,
            ffn_act: if nanochat { FfnAct::Relu2 } else { FfnAct::SwiGlu },
            // 0 or absent: no cap.
            logit_softcap: Some(f.f32_or("final_logit_softcapping", 0.0)?).filter(|c| *c != 0.0),
            rope_reversed: nanochat,
            attn_gate: qwen35,
            deltanet: if qwen35 { Some(deltanet_config(f, blocks - nextn)?) } else { None },
        };
        if let Some(cap) = c.logit_softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return Err(FucinaError::Format { format: "gguf", msg: format!("final_logit_softcapping {cap}") });
            }
        }
        if !(c.rope_linear.is_finite() && c.rope_linear > 0.0) {
            return Err(FucinaError::Format { format: "gguf", msg: format!("RoPE scaling factor {}", c.rope_linear) });
        }
        f.check_layers(c.layers)?;
        c.validate()?;
        Ok(c)
    }

    /// Whether layer `l` is a Gated DeltaNet layer.
    pub fn is_recurrent(&self, l: usize) -> bool {
        self.deltanet.as_ref().is_some_and(|d| d.recurrent.get(l).copied().unwrap_or(false))
    }

    /// Whether layer `l` routes to experts.
    pub fn is_moe(&self, l: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| l >= m.dense_lead)
    }

    /// Checks the sizes: nonzero, heads divisible by kv heads, even head and rotary widths,
    /// routing that can be satisfied.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(FucinaError::Format { format: "gguf", msg });
        for (name, v) in [
            ("block_count", self.layers),
            ("embedding_length", self.hidden),
            ("feed_forward_length", self.ffn),
            ("head_count", self.heads),
            ("head_count_kv", self.kv_heads),
            ("key_length", self.head_dim),
            ("vocabulary", self.vocab),
            ("context_length", self.context_length),
        ] {
            if v == 0 {
                return bad(format!("qwen3 `{name}` is 0"));
            }
        }
        if let Some(m) = &self.moe {
            if m.experts == 0 || m.expert_ffn == 0 {
                return bad(format!("{} experts of width {}", m.experts, m.expert_ffn));
            }
            m.routing.check(m.experts).or_else(bad)?;
            product("shared experts", &[m.shared_ffn, self.hidden])?;
        }
        if let Some(d) = &self.deltanet {
            if d.conv_kernel == 0 || d.k_heads == 0 || d.head_k == 0 || d.head_v == 0 {
                return bad(format!("Gated DeltaNet sizes {d:?}"));
            }
            if !d.v_heads.is_multiple_of(d.k_heads) || d.v_heads == 0 {
                return bad(format!("{} value heads do not tile over {} key heads", d.v_heads, d.k_heads));
            }
            if d.recurrent.len() != self.layers {
                return bad(format!("{} layer kinds for {} layers", d.recurrent.len(), self.layers));
            }
            product("Gated DeltaNet state", &[d.v_heads, d.head_k, d.head_v])?;
            product("Gated DeltaNet projections", &[d.conv_kernel, 2 * d.k_heads * d.head_k + d.v_heads * d.head_v])?;
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!("{} query heads do not split into {} kv groups", self.heads, self.kv_heads));
        }
        product("query width (heads x key_length)", &[self.heads, self.head_dim])?;
        product("key/value cache row", &[self.kv_heads, self.head_dim, self.context_length])?;
        product("embedding", &[self.vocab, self.hidden])?;
        product("feed-forward", &[self.ffn, self.hidden])?;
        if let Some(m) = &self.moe {
            product("experts", &[m.experts, m.expert_ffn, self.hidden])?;
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head width {} is odd, RoPE needs pairs", self.head_dim));
        }
        if self.rope_dims == 0 || !self.rope_dims.is_multiple_of(2) || self.rope_dims > self.head_dim {
            return bad(format!(
                "RoPE over {} of {} head dimensions: need an even width, at most the head",
                self.rope_dims, self.head_dim
            ));
        }
        Ok(())
    }
}

/// The Gated DeltaNet part of a `qwen35` file: llama.cpp's `ssm.*` keys (state size = key
/// head width, group count = key heads, time-step rank = value heads, inner size = all value
/// heads' width) and which layers are recurrent (`attention.recurrent_layers`, else every
/// layer but each `full_attention_interval`-th).
fn deltanet_config(f: &ModelFile, layers: usize) -> Result<DeltaNetConfig> {
    let bad = |msg: String| FucinaError::Format { format: "gguf", msg };
    let v_heads = f.usize("ssm.time_step_rank")?;
    let inner = f.usize("ssm.inner_size")?;
    if v_heads == 0 || !inner.is_multiple_of(v_heads) {
        return Err(bad(format!("ssm.inner_size {inner} does not split into {v_heads} value heads")));
    }
    let key = format!("{}.attention.recurrent_layers", f.arch);
    let recurrent = match f.gguf.header().get(&key) {
        Some(fucina::formats::gguf::Value::Array(fucina::formats::gguf::Array::Bool(v))) => {
            if v.len() < layers {
                return Err(bad(format!("`{key}` lists {} layers of {layers}", v.len())));
            }
            v[..layers].to_vec()
        }
        Some(_) => return Err(bad(format!("`{key}` is not an array of booleans"))),
        None => {
            let every = f.opt_usize("full_attention_interval")?.unwrap_or(4);
            if every == 0 {
                return Err(bad("full_attention_interval is 0".into()));
            }
            (0..layers).map(|i| (i + 1) % every != 0).collect()
        }
    };
    Ok(DeltaNetConfig {
        conv_kernel: f.usize("ssm.conv_kernel")?,
        k_heads: f.usize("ssm.group_count")?,
        v_heads,
        head_k: f.usize("ssm.state_size")?,
        head_v: inner / v_heads,
        recurrent,
    })
}
