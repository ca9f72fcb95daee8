//! The language-model head shared by the decoder-only models: final RMSNorm and the output
//! projection (tied to the embedding when the file has no `output.weight`).

use fucina::prelude::*;
use fucina::quant::QWeight;

/// Logits from the last hidden states: only the last position unless `all_logits`, then the
/// final RMSNorm (`norm`, `eps`) and `output` (or the embedding `embed` when tied).
pub fn lm_head(
    x: Tensor<axes![seq, hidden]>,
    all_logits: bool,
    norm: &Tensor<axes![hidden]>,
    eps: f32,
    output: Option<&QWeight<vocab, hidden>>,
    embed: &QWeight<vocab, hidden>,
) -> Result<Tensor<axes![seq, vocab]>> {
    let n = x.size::<seq>();
    let x = if all_logits || n <= 1 { x } else { x.narrow::<seq>(n - 1, 1)?.contiguous()? };
    let x = x.rms_norm::<hidden>(Some(norm), eps)?;
    output.unwrap_or(embed).forward(&x)
}
