//! The language-model head shared by the decoder-only models: final RMSNorm and the output
//! projection (tied to the embedding when the file has no `output.weight`).

use fucina::prelude::*;
use fucina::quant::QWeight;

/// Logits of the hidden states `x` (the rows a batch wants, chosen by
/// [`super::batch::logits`]): the final RMSNorm (`norm`, `eps`) and `output` (or the
/// embedding `embed` when tied).
pub fn lm_head(
    x: Tensor<axes![seq, hidden]>,
    norm: Option<&Tensor<axes![hidden]>>,
    eps: f32,
    output: Option<&QWeight<vocab, hidden>>,
    embed: &QWeight<vocab, hidden>,
) -> Result<Tensor<axes![seq, vocab]>> {
    let x = x.rms_norm::<hidden>(norm, eps)?;
    output.unwrap_or(embed).forward(&x)
}
