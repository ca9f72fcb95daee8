//! Hyper-parameters of the decoder family (`llama`, `qwen2`, `qwen3`, `qwen3moe`), read from
//! GGUF metadata. The families differ as data: per-head q/k norms (Qwen3), q/k/v biases
//! (Qwen2, and Llamas whose files have them), the rotation layout (llama.cpp's converter
//! permutes a `llama` file's q/k rows for interleaved pairs), per-pair frequency factors
//! (Llama 3's `rope_freqs`) and linear position scaling.

use crate::llm::weights::{product, ModelFile};
use fucina::ops::RopeStyle;
use fucina::prelude::*;

/// The mixture-of-experts part of a Qwen3-MoE config.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer.
    pub experts: usize,
    /// Experts each token is routed to.
    pub used: usize,
    /// SwiGLU inner width of one expert.
    pub expert_ffn: usize,
    /// Whether the chosen experts' softmax weights are renormalized to sum to 1.
    pub norm_topk: bool,
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
}

/// The architectures this config reads.
pub const DECODER_ARCHITECTURES: &[&str] = &["qwen3", "qwen3moe", "qwen2", "llama"];

impl Qwen3Config {
    /// Reads the config of a `qwen3`, `qwen3moe`, `qwen2` or `llama` GGUF, checking that the
    /// sizes agree and refusing what this decoder does not do (partial or YaRN-scaled RoPE).
    pub fn from_file(f: &ModelFile) -> Result<Qwen3Config> {
        if !DECODER_ARCHITECTURES.contains(&f.arch.as_str()) {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("`{}` is not a decoder architecture", f.arch),
            });
        }
        let qwen3 = f.arch.starts_with("qwen3");
        let heads = f.usize("attention.head_count")?;
        let hidden = f.usize("embedding_length")?;
        let head_dim = match f.opt_usize("attention.key_length")? {
            Some(d) => d,
            None if heads > 0 => hidden / heads,
            None => 0,
        };
        let emb = f.gguf.tensor_info("token_embd.weight")?.shape();
        let c = Qwen3Config {
            layers: f.usize("block_count")?,
            hidden,
            ffn: f.usize("feed_forward_length")?,
            heads,
            kv_heads: f.opt_usize("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            vocab: emb.first().copied().unwrap_or(0),
            context_length: f.opt_usize("context_length")?.unwrap_or(4096),
            // llama.cpp's defaults where a file has no value.
            rope_theta: f.f32_or("rope.freq_base", if qwen3 { 1_000_000.0 } else { 10_000.0 })?,
            rms_eps: f.f32_or("attention.layer_norm_rms_epsilon", if qwen3 { 1e-6 } else { 1e-5 })?,
            moe: if f.arch == "qwen3moe" {
                Some(MoeConfig {
                    experts: f.usize("expert_count")?,
                    used: f.usize("expert_used_count")?,
                    expert_ffn: f.usize("expert_feed_forward_length")?,
                    // llama.cpp renormalizes Qwen3-MoE's top-k weights unless told otherwise.
                    norm_topk: f.bool_or("expert_weights_norm", true)?,
                })
            } else {
                None
            },
            qk_norm: qwen3,
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
        };
        if let Some(d) = f.opt_usize("rope.dimension_count")? {
            if d != c.head_dim {
                return Err(FucinaError::Format {
                    format: "gguf",
                    msg: format!("RoPE over {d} of {} head dimensions is not supported here", c.head_dim),
                });
            }
        }
        if !(c.rope_linear.is_finite() && c.rope_linear > 0.0) {
            return Err(FucinaError::Format { format: "gguf", msg: format!("RoPE scaling factor {}", c.rope_linear) });
        }
        f.check_layers(c.layers)?;
        c.validate()?;
        Ok(c)
    }

    /// Checks the sizes: nonzero, heads divisible by kv heads, even head width.
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
            if m.experts == 0 || m.used == 0 || m.used > m.experts || m.expert_ffn == 0 {
                return bad(format!(
                    "qwen3moe routes to {} of {} experts of width {}: need 0 < used <= experts and a width",
                    m.used, m.experts, m.expert_ffn
                ));
            }
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
        Ok(())
    }
}
