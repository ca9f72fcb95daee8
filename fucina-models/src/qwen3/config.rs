//! Qwen3 hyper-parameters, read from GGUF metadata.

use crate::llm::weights::ModelFile;
use fucina::prelude::*;

/// The shape of a Qwen3 dense model.
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
}

impl Qwen3Config {
    /// Reads the config of a `qwen3` GGUF, checking that the sizes agree with each other.
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
        };
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
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!("{} query heads do not split into {} kv groups", self.heads, self.kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head width {} is odd, RoPE needs pairs", self.head_dim));
        }
        Ok(())
    }
}
