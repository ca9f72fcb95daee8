//! Qwen3 hyper-parameters, read from GGUF metadata.

use crate::llm::weights::{product, ModelFile};
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
}

impl Qwen3Config {
    /// Reads the config of a `qwen3` or `qwen3moe` GGUF, checking that the sizes agree.
    pub fn from_file(f: &ModelFile) -> Result<Qwen3Config> {
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
            rope_theta: f.f32_or("rope.freq_base", 1_000_000.0)?,
            rms_eps: f.f32_or("attention.layer_norm_rms_epsilon", 1e-6)?,
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
        };
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
