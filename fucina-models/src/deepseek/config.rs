//! DeepSeek-V2/V3 hyper-parameters from llama.cpp's `deepseek2` GGUF metadata.

use crate::llm::weights::{product, ModelFile};
use fucina::prelude::*;

pub use crate::llm::moe::Gating;
use crate::llm::moe::Routing;

/// The mixture-of-experts part.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Routed experts per layer.
    pub experts: usize,
    /// Experts each token is routed to.
    pub used: usize,
    /// Shared experts (one SwiGLU of `shared * expert_ffn` width).
    pub shared: usize,
    /// SwiGLU width of one expert.
    pub expert_ffn: usize,
    /// Factor on the routed experts' weights (`routed_scaling_factor`).
    pub scale: f32,
    /// Renormalize the chosen weights to sum to 1 before scaling.
    pub norm_topk: bool,
    /// Score function.
    pub gating: Gating,
    /// Expert groups (1: no group limit).
    pub groups: usize,
    /// Groups a token may use.
    pub groups_used: usize,
}

impl MoeConfig {
    /// The routing settings.
    pub fn routing(&self) -> Routing {
        Routing {
            used: self.used,
            gating: self.gating,
            groups: self.groups,
            groups_used: self.groups_used,
            norm_topk: self.norm_topk,
            scale: self.scale,
        }
    }
}

/// YaRN context extension of the rotary part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// Context extension factor.
    pub factor: f32,
    /// Context length the model was pretrained with.
    pub original_context: usize,
    /// `beta_fast` (extrapolation boundary).
    pub beta_fast: f32,
    /// `beta_slow` (interpolation boundary).
    pub beta_slow: f32,
    /// `mscale_all_dim` (0: none).
    pub mscale_all_dim: f32,
}

impl Yarn {
    /// YaRN's magnitude correction `0.1 m ln(factor) + 1`.
    pub fn mscale(&self, m: f32) -> f32 {
        if self.factor <= 1.0 {
            1.0
        } else {
            0.1 * m * self.factor.ln() + 1.0
        }
    }
}

/// The shape of a DeepSeek-V2/V3 model.
#[derive(Debug, Clone, PartialEq)]
pub struct DeepSeekConfig {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Attention heads.
    pub heads: usize,
    /// Rank of the query compression (`None`: a plain query projection, as V2-Lite).
    pub q_lora: Option<usize>,
    /// Rank of the compressed key/value latent.
    pub kv_lora: usize,
    /// Per-head query/key width without position.
    pub qk_nope: usize,
    /// Width of the decoupled rotary part (shared by all heads on the key side).
    pub qk_rope: usize,
    /// Per-head value width.
    pub v_head: usize,
    /// SwiGLU width of the dense layers.
    pub ffn: usize,
    /// Leading dense layers (the rest are MoE when `moe` is set).
    pub dense_lead: usize,
    /// Experts.
    pub moe: Option<MoeConfig>,
    /// RoPE base.
    pub rope_theta: f32,
    /// YaRN, if the file asks for it.
    pub yarn: Option<Yarn>,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Longest context.
    pub context_length: usize,
}

impl DeepSeekConfig {
    /// Reads a `deepseek2` GGUF's config, checking that the sizes agree.
    pub fn from_file(f: &ModelFile) -> Result<DeepSeekConfig> {
        let bad = |msg: String| FucinaError::Format { format: "gguf", msg };
        let heads = f.usize("attention.head_count")?;
        let qk_rope = f.usize("rope.dimension_count")?;
        // MLA files (llama.cpp's current converter) carry the decompressed head sizes in the
        // *_mla keys (key_length/value_length then describe the latent); older files carry
        // them in key_length/value_length.
        let (k_len, v_len) =
            match (f.opt_usize("attention.key_length_mla")?, f.opt_usize("attention.value_length_mla")?) {
                (Some(k), Some(v)) => (k, v),
                _ => (f.usize("attention.key_length")?, f.usize("attention.value_length")?),
            };
        if k_len <= qk_rope {
            return Err(bad(format!("key length {k_len} leaves no room beside the rotary part of {qk_rope}")));
        }
        let emb = f.gguf.tensor_info("token_embd.weight")?.shape();
        let experts = f.opt_usize("expert_count")?.unwrap_or(0);
        let moe = if experts > 0 {
            let gating = match f.opt_usize("expert_gating_func")?.unwrap_or(1) {
                0 | 1 => Gating::Softmax,
                2 => Gating::Sigmoid,
                other => {
                    return Err(bad(format!("expert_gating_func {other} is not supported (1 softmax, 2 sigmoid)")))
                }
            };
            Some(MoeConfig {
                experts,
                used: f.usize("expert_used_count")?,
                shared: f.opt_usize("expert_shared_count")?.unwrap_or(0),
                expert_ffn: f.usize("expert_feed_forward_length")?,
                scale: f.f32_or("expert_weights_scale", 1.0)?,
                norm_topk: f.bool_or("expert_weights_norm", false)?,
                gating,
                groups: f.opt_usize("expert_group_count")?.unwrap_or(1).max(1),
                groups_used: f.opt_usize("expert_group_used_count")?.unwrap_or(1).max(1),
            })
        } else {
            None
        };
        let yarn = match f.gguf.header().get(&format!("{}.rope.scaling.type", f.arch)).and_then(|v| v.as_str()) {
            Some("yarn") => Some(Yarn {
                factor: f.f32_or("rope.scaling.factor", 1.0)?,
                original_context: f.usize("rope.scaling.original_context_length")?,
                beta_fast: f.f32_or("rope.scaling.yarn_beta_fast", 32.0)?,
                beta_slow: f.f32_or("rope.scaling.yarn_beta_slow", 1.0)?,
                // llama.cpp's converter stores 0.1 * mscale_all_dim here.
                mscale_all_dim: f.f32_or("rope.scaling.yarn_log_multiplier", 0.0)? / 0.1,
            }),
            None | Some("none") => None,
            Some(other) => return Err(bad(format!("rope scaling `{other}` is not supported (yarn is)"))),
        };
        let q_lora = f.opt_usize("attention.q_lora_rank")?.filter(|r| *r > 0);
        let c = DeepSeekConfig {
            layers: f.usize("block_count")?,
            hidden: f.usize("embedding_length")?,
            vocab: emb.first().copied().unwrap_or(0),
            heads,
            q_lora,
            kv_lora: f.usize("attention.kv_lora_rank")?,
            qk_nope: k_len - qk_rope,
            qk_rope,
            v_head: v_len,
            ffn: f.usize("feed_forward_length")?,
            dense_lead: f.opt_usize("leading_dense_block_count")?.unwrap_or(0),
            moe,
            rope_theta: f.f32_or("rope.freq_base", 10_000.0)?,
            yarn,
            rms_eps: f.f32_or("attention.layer_norm_rms_epsilon", 1e-6)?,
            context_length: f.opt_usize("context_length")?.unwrap_or(4096),
        };
        f.check_layers(c.layers)?;
        c.validate()?;
        Ok(c)
    }

    /// Checks sizes and routing settings.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(FucinaError::Format { format: "gguf", msg });
        for (n, v) in [
            ("block_count", self.layers),
            ("embedding_length", self.hidden),
            ("head_count", self.heads),
            ("kv_lora_rank", self.kv_lora),
            ("vocabulary", self.vocab),
            ("value length", self.v_head),
            ("rope dimension", self.qk_rope),
            ("context_length", self.context_length),
        ] {
            if v == 0 {
                return bad(format!("deepseek2 `{n}` is 0"));
            }
        }
        if !self.qk_rope.is_multiple_of(2) {
            return bad(format!("rotary width {} is odd", self.qk_rope));
        }
        let qk = self.qk_nope.saturating_add(self.qk_rope);
        product("query width (heads x key length)", &[self.heads, qk])?;
        product("value width (heads x value length)", &[self.heads, self.v_head])?;
        product("key and value decompression", &[self.heads, self.kv_lora, qk.max(self.v_head)])?;
        product("latent cache row", &[self.kv_lora.saturating_add(self.qk_rope), self.context_length])?;
        product("embedding", &[self.vocab, self.hidden])?;
        product("feed-forward", &[self.ffn, self.hidden])?;
        if let Some(q) = self.q_lora {
            product("query compression", &[q, self.hidden])?;
        }
        if let Some(m) = &self.moe {
            product("experts", &[m.experts, m.expert_ffn, self.hidden])?;
            product("shared experts", &[m.shared, m.expert_ffn, self.hidden])?;
        }
        if let Some(m) = &self.moe {
            if m.expert_ffn == 0 {
                return bad(format!("{} of {} experts of width {}", m.used, m.experts, m.expert_ffn));
            }
            m.routing().check(m.experts).or_else(bad)?;
        }
        if self.dense_lead < self.layers && self.moe.is_none() {
            // All layers dense is allowed (dense_lead may be absent then).
        }
        Ok(())
    }

    /// Whether layer `l` routes to experts.
    pub fn is_moe(&self, l: usize) -> bool {
        self.moe.is_some() && l >= self.dense_lead
    }

    /// Query/key width per head (`qk_nope + qk_rope`).
    pub fn qk_head(&self) -> usize {
        self.qk_nope + self.qk_rope
    }

    /// The softmax scale: `1/sqrt(qk_head)`, times YaRN's `mscale(mscale_all_dim)^2`.
    pub fn softmax_scale(&self) -> f32 {
        let base = 1.0 / (self.qk_head() as f32).sqrt();
        match &self.yarn {
            Some(y) if y.mscale_all_dim > 0.0 => {
                let m = y.mscale(y.mscale_all_dim);
                base * m * m
            }
            _ => base,
        }
    }
}
