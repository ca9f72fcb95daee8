//! Writing a trained [`Gpt`] and its vocabulary as a GGUF file of architecture `nanochat`
//! (llama.cpp has no nanochat architecture; this one is documented in docs/LLM.md).
//!
//! Keys: `nanochat.{block_count, context_length, embedding_length, feed_forward_length,
//! attention.head_count, attention.head_count_kv, rope.freq_base,
//! attention.layer_norm_rms_epsilon, final_logit_softcapping}`. Tensors (f32, llama.cpp's
//! names): `token_embd`, `blk.L.{attn_q, attn_k, attn_v, attn_output, ffn_up, ffn_down}`,
//! `output`; there are no norm weights (nanochat's RMSNorm has none). The vocabulary is a
//! byte-level BPE (`tokenizer.ggml.model = gpt2`, pre-tokenizer `nanochat`) with the
//! special tokens as control tokens; `<|assistant_end|>` is the end-of-turn token.

use super::model::Gpt;
use super::train::{Vocab, SPECIALS};
use crate::llm::tokenizer::byte_chars;
use fucina::formats::gguf::{assign_offsets, write_gguf_to, Array, GgufHeader, TensorInfo, Value};
use fucina::prelude::*;
use fucina::quant::GgmlType;
use std::borrow::Cow;
use std::path::Path;

/// The chat template the file carries (nanochat's conversation format), for other tools.
pub const CHAT_TEMPLATE: &str = "<|bos|>{% for m in messages %}{% if m['role'] == 'user' %}<|user_start|>{{ m['content'] }}<|user_end|>{% elif m['role'] == 'assistant' %}<|assistant_start|>{{ m['content'] }}<|assistant_end|>{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant_start|>{% endif %}";

fn spell(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|b| table[*b as usize]).collect()
}

/// The GGUF image of `gpt` with `vocab` (f32 weights).
pub fn to_gguf(gpt: &Gpt, vocab: &Vocab, name: &str) -> Result<Vec<u8>> {
    let c = &gpt.config;
    if vocab.size() != c.vocab {
        return Err(FucinaError::InvalidArgument {
            op: "nanochat::export",
            msg: format!("the model has {} ids, the vocabulary {}", c.vocab, vocab.size()),
        });
    }
    let table = byte_chars();
    let mut tokens: Vec<Vec<u8>> = vocab.bpe.token_bytes.iter().map(|b| spell(b, &table).into_bytes()).collect();
    tokens.extend(SPECIALS.iter().map(|s| s.as_bytes().to_vec()));
    let mut types = vec![1i32; vocab.bpe.len()];
    types.extend([3i32; SPECIALS.len()]);
    let merges: Vec<Vec<u8>> = vocab
        .bpe
        .merges
        .iter()
        .map(|(l, r)| {
            let (l, r) = (&vocab.bpe.token_bytes[*l as usize], &vocab.bpe.token_bytes[*r as usize]);
            format!("{} {}", spell(l, &table), spell(r, &table)).into_bytes()
        })
        .collect();
    let s = vocab.specials();
    let a = |k: &str| format!("nanochat.{k}");
    let u = |x: usize| Value::U32(x as u32);
    let metadata = vec![
        ("general.architecture".to_string(), Value::String(b"nanochat".to_vec())),
        ("general.name".to_string(), Value::String(name.as_bytes().to_vec())),
        (a("block_count"), u(c.layers)),
        (a("context_length"), u(c.context)),
        (a("embedding_length"), u(c.hidden)),
        (a("feed_forward_length"), u(c.ffn)),
        (a("attention.head_count"), u(c.heads)),
        (a("attention.head_count_kv"), u(c.kv_heads)),
        (a("rope.freq_base"), Value::F32(c.rope_theta)),
        (a("attention.layer_norm_rms_epsilon"), Value::F32(c.eps)),
        (a("final_logit_softcapping"), Value::F32(c.softcap.unwrap_or(0.0))),
        ("tokenizer.ggml.model".to_string(), Value::String(b"gpt2".to_vec())),
        ("tokenizer.ggml.pre".to_string(), Value::String(b"nanochat".to_vec())),
        ("tokenizer.ggml.tokens".to_string(), Value::Array(Array::String(tokens))),
        ("tokenizer.ggml.token_type".to_string(), Value::Array(Array::I32(types))),
        ("tokenizer.ggml.merges".to_string(), Value::Array(Array::String(merges))),
        ("tokenizer.ggml.bos_token_id".to_string(), Value::U32(s.bos)),
        ("tokenizer.ggml.eos_token_id".to_string(), Value::U32(s.assistant_end)),
        ("tokenizer.ggml.add_bos_token".to_string(), Value::Bool(true)),
        ("tokenizer.chat_template".to_string(), Value::String(CHAT_TEMPLATE.as_bytes().to_vec())),
    ];
    let mut named: Vec<(String, Vec<usize>, Vec<f32>)> =
        vec![("token_embd.weight".into(), gpt.embed.weight.shape().to_vec(), gpt.embed.weight.to_f32_vec())];
    for (l, b) in gpt.blocks.iter().enumerate() {
        for (n, shape, data) in [
            ("attn_q", b.q.weight.shape().to_vec(), b.q.weight.to_f32_vec()),
            ("attn_k", b.k.weight.shape().to_vec(), b.k.weight.to_f32_vec()),
            ("attn_v", b.v.weight.shape().to_vec(), b.v.weight.to_f32_vec()),
            ("attn_output", b.o.weight.shape().to_vec(), b.o.weight.to_f32_vec()),
            ("ffn_up", b.up.weight.shape().to_vec(), b.up.weight.to_f32_vec()),
            ("ffn_down", b.down.weight.shape().to_vec(), b.down.weight.to_f32_vec()),
        ] {
            named.push((format!("blk.{l}.{n}.weight"), shape, data));
        }
    }
    named.push(("output.weight".into(), gpt.head.weight.shape().to_vec(), gpt.head.weight.to_f32_vec()));
    let tensors = named
        .iter()
        .map(|(n, shape, _)| TensorInfo {
            name: n.clone(),
            dims: shape.iter().rev().map(|d| *d as u64).collect(),
            ty: GgmlType::F32,
            offset: 0,
        })
        .collect();
    let mut header = GgufHeader { version: 3, metadata, tensors, alignment: 32, data_offset: 0 };
    assign_offsets(&mut header)?;
    let mut out = Vec::new();
    write_gguf_to(&mut out, &header, |i| {
        Ok(Cow::Owned(named[i].2.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()))
    })?;
    Ok(out)
}

/// Writes [`to_gguf`]'s image to `path` through a temporary file renamed into place, so an
/// existing file is never left half written.
pub fn write(gpt: &Gpt, vocab: &Vocab, name: &str, path: &Path) -> Result<()> {
    let bytes = to_gguf(gpt, vocab, name)?;
    let tmp = path.with_extension("gguf.partial");
    std::fs::write(&tmp, &bytes).map_err(|e| FucinaError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| FucinaError::io(format!("renaming into {}", path.display()), e))
}
