//! The shape of a nanochat GPT and its GGUF keys (architecture `nanochat`).

use fucina::{FucinaError, Result};

/// Hyper-parameters of a nanochat GPT: rotary embeddings, parameter-free RMSNorm (after the
/// embedding, before attention and MLP, on queries and keys, and at the end), a ReLU² MLP,
/// no biases, an untied head and a tanh soft-cap on the logits.
#[derive(Debug, Clone, PartialEq)]
pub struct GptConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Residual stream width.
    pub hidden: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// MLP inner width (nanochat: 4 × hidden).
    pub ffn: usize,
    /// Longest sequence (the rotary tables and the KV cache).
    pub context: usize,
    /// RoPE base.
    pub rope_theta: f32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// `cap · tanh(logits / cap)`, or raw logits.
    pub softcap: Option<f32>,
}

impl GptConfig {
    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }

    /// Checks that the sizes fit together: nonzero, heads divide the width and split into
    /// the kv heads, an even head width for RoPE, a positive finite soft-cap.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(FucinaError::InvalidArgument { op: "GptConfig", msg });
        for (name, v) in [
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn", self.ffn),
            ("context", self.context),
        ] {
            if v == 0 {
                return bad(format!("`{name}` is 0"));
            }
        }
        if !self.hidden.is_multiple_of(self.heads) || !self.head_dim().is_multiple_of(2) {
            return bad(format!("{} heads do not split width {} into even heads", self.heads, self.hidden));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!("{} query heads do not split into {} kv groups", self.heads, self.kv_heads));
        }
        if let Some(c) = self.softcap {
            if !(c.is_finite() && c > 0.0) {
                return bad(format!("soft-cap {c}"));
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0 && self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return bad(format!("eps {} / rope theta {}", self.eps, self.rope_theta));
        }
        crate::llm::weights::product("embedding", &[self.vocab, self.hidden])?;
        crate::llm::weights::product("mlp", &[self.ffn, self.hidden])?;
        Ok(())
    }
}
