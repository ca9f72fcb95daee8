//! Synthetic model files: random weights in real shapes, written as GGUF with llama.cpp's
//! names and metadata, for benchmarks (a Qwen3-0.6B-sized file that both fucina and
//! llama.cpp load) and for tests that need sizes the committed tiny model lacks.
//!
//! The tokenizer is the committed tiny model's byte-level BPE, padded with control tokens up
//! to the requested vocabulary size, so every file also tokenizes real text.

use fucina::formats::gguf::{assign_offsets, write_gguf_to, Array, GgufFile, GgufHeader, TensorInfo, Value};
use fucina::quant::GgmlType;
use fucina::rng::{box_muller, Philox};
use fucina::{FucinaError, Result};
use rayon::prelude::*;
use std::borrow::Cow;
use std::path::Path;

/// How a tensor's random values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Normal with this standard deviation (matrices, embeddings).
    Normal(f32),
    /// `1 + noise` (RMSNorm weights).
    NormWeight,
    /// Normal with this standard deviation, kept f32 (small vectors such as router biases).
    SmallF32(f32),
    /// `-(0.05 + |normal|)`, kept f32: Gated DeltaNet decay rates (`-exp(A_log)`, negative so
    /// the state decays).
    Decay,
    /// Proportional RoPE's per-pair factors, kept f32: 1 for the first `n`ths of the pairs,
    /// 1e30 (unrotated) for the rest, as llama.cpp's converter writes Gemma 4's `rope_freqs`.
    RopeFactors(usize),
}

/// One tensor of a synthetic file: GGUF name, row-major shape, initialisation.
#[derive(Debug, Clone)]
pub struct SynthTensor {
    /// GGUF name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Row-major sizes (slowest first).
    pub shape: Vec<usize>,
    /// Value distribution; matrices are stored in the file's target format.
    pub init: Init,
}

impl SynthTensor {
    /// A 2-D weight `[rows, cols]` stored in the target format.
    pub fn matrix(name: impl Into<String>, rows: usize, cols: usize) -> SynthTensor {
        SynthTensor { name: name.into(), shape: vec![rows, cols], init: Init::Normal(0.02) }
    }

    /// A 3-D stack of matrices `[n, rows, cols]` (MoE experts) in the target format.
    pub fn stack(name: impl Into<String>, n: usize, rows: usize, cols: usize) -> SynthTensor {
        SynthTensor { name: name.into(), shape: vec![n, rows, cols], init: Init::Normal(0.02) }
    }

    /// An RMSNorm weight of `n` values, kept f32.
    pub fn norm(name: impl Into<String>, n: usize) -> SynthTensor {
        SynthTensor { name: name.into(), shape: vec![n], init: Init::NormWeight }
    }
}

/// A synthetic model: metadata (architecture keys included) and its tensors.
#[derive(Debug, Clone)]
pub struct SynthModel {
    /// `general.architecture`.
    pub arch: String,
    /// Metadata besides the tokenizer, in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors in file order.
    pub tensors: Vec<SynthTensor>,
    /// Vocabulary size (rows of `token_embd`).
    pub vocab: usize,
    /// The chat tokens of the vocabulary.
    pub chat: SynthChat,
}

/// Which chat format a synthetic vocabulary carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynthChat {
    /// The tiny Qwen3's ChatML tokens, then `<tool_call>` / `</tool_call>`
    /// ([`padded_tokenizer`]).
    #[default]
    ChatMl,
    /// DeepSeek-R1's ([`deepseek_tokenizer`]).
    DeepSeekR1,
}

/// The dense Qwen3 shapes of [`qwen3`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qwen3Shape {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// MLP inner width (dense), or each expert's inner width (MoE).
    pub ffn: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length written to the metadata.
    pub context: usize,
    /// `Some((experts, experts_used))` for Qwen3-MoE.
    pub moe: Option<(usize, usize)>,
    /// Whether the output head is tied to the embedding (no `output.weight`).
    pub tied: bool,
}

impl Qwen3Shape {
    /// Qwen3-0.6B: 28 layers, hidden 1024, 16/8 heads of 128, MLP 3072, vocab 151936, tied.
    pub const QWEN3_0_6B: Qwen3Shape = Qwen3Shape {
        layers: 28,
        hidden: 1024,
        ffn: 3072,
        heads: 16,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        context: 40_960,
        moe: None,
        tied: true,
    };

    /// Llama-3.2-1B: 16 layers, hidden 2048, 32/8 heads of 64, MLP 8192, vocab 128256, tied.
    pub const LLAMA3_2_1B: Qwen3Shape = Qwen3Shape {
        layers: 16,
        hidden: 2048,
        ffn: 8192,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        vocab: 128_256,
        context: 131_072,
        moe: None,
        tied: true,
    };
}

/// The metadata every llama.cpp decoder carries: architecture, name, context and the widths.
fn common_metadata(
    arch: &str,
    context: usize,
    hidden: usize,
    ffn: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
) -> Vec<(String, Value)> {
    let k = |n: &str| format!("{arch}.{n}");
    vec![
        ("general.architecture".to_string(), Value::String(arch.as_bytes().to_vec())),
        ("general.name".to_string(), Value::String(b"fucina synthetic (random weights)".to_vec())),
        (k("context_length"), Value::U32(context as u32)),
        (k("embedding_length"), Value::U32(hidden as u32)),
        (k("feed_forward_length"), Value::U32(ffn as u32)),
        (k("block_count"), Value::U32(layers as u32)),
        (k("attention.head_count"), Value::U32(heads as u32)),
        (k("attention.head_count_kv"), Value::U32(kv_heads as u32)),
    ]
}

/// A dense Llama in llama.cpp's `llama` layout with `s`'s shapes (no q/k norms, base 500000,
/// Llama 3's `rope_freqs` factors), the Qwen3 tokenizer padded to its vocabulary.
pub fn llama(s: &Qwen3Shape) -> SynthModel {
    let mut m = qwen3(&Qwen3Shape { moe: None, ..*s });
    m.arch = "llama".into();
    m.tensors.retain(|t| !t.name.ends_with("attn_q_norm.weight") && !t.name.ends_with("attn_k_norm.weight"));
    // Factors near 1 (random, positive): the same rotation work as real ones.
    m.tensors.insert(0, SynthTensor::norm("rope_freqs.weight", s.head_dim / 2));
    for (k, v) in &mut m.metadata {
        if let Some(rest) = k.strip_prefix("qwen3.") {
            *k = format!("llama.{rest}");
        }
        match k.as_str() {
            "general.architecture" => *v = Value::String(b"llama".to_vec()),
            "llama.rope.freq_base" => *v = Value::F32(500_000.0),
            "llama.attention.layer_norm_rms_epsilon" => *v = Value::F32(1e-5),
            _ => {}
        }
    }
    m
}

/// A Qwen3 (dense or MoE) in llama.cpp's `qwen3` / `qwen3moe` layout.
pub fn qwen3(s: &Qwen3Shape) -> SynthModel {
    let arch = if s.moe.is_some() { "qwen3moe" } else { "qwen3" };
    let k = |n: &str| format!("{arch}.{n}");
    let mut metadata = common_metadata(arch, s.context, s.hidden, s.ffn, s.layers, s.heads, s.kv_heads);
    metadata.extend([
        (k("attention.key_length"), Value::U32(s.head_dim as u32)),
        (k("attention.value_length"), Value::U32(s.head_dim as u32)),
        (k("rope.freq_base"), Value::F32(1_000_000.0)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
    ]);
    if let Some((n, used)) = s.moe {
        metadata.push((k("expert_count"), Value::U32(n as u32)));
        metadata.push((k("expert_used_count"), Value::U32(used as u32)));
        metadata.push((k("expert_feed_forward_length"), Value::U32(s.ffn as u32)));
    }
    let (h, qd, kvd) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let mut t = vec![SynthTensor::matrix("token_embd.weight", s.vocab, h)];
    for l in 0..s.layers {
        let n = |x: &str| format!("blk.{l}.{x}.weight");
        t.push(SynthTensor::norm(n("attn_norm"), h));
        t.push(SynthTensor::matrix(n("attn_q"), qd, h));
        t.push(SynthTensor::matrix(n("attn_k"), kvd, h));
        t.push(SynthTensor::matrix(n("attn_v"), kvd, h));
        t.push(SynthTensor::matrix(n("attn_output"), h, qd));
        t.push(SynthTensor::norm(n("attn_q_norm"), s.head_dim));
        t.push(SynthTensor::norm(n("attn_k_norm"), s.head_dim));
        t.push(SynthTensor::norm(n("ffn_norm"), h));
        match s.moe {
            None => {
                t.push(SynthTensor::matrix(n("ffn_gate"), s.ffn, h));
                t.push(SynthTensor::matrix(n("ffn_up"), s.ffn, h));
                t.push(SynthTensor::matrix(n("ffn_down"), h, s.ffn));
            }
            Some((e, _)) => {
                let mut router = SynthTensor::matrix(n("ffn_gate_inp"), e, h);
                // The router stays f32 (llama.cpp keeps it so too) and gets a wider spread so
                // that routing decisions are not near-ties.
                router.init = Init::SmallF32(0.5);
                t.push(router);
                t.push(SynthTensor::stack(n("ffn_gate_exps"), e, s.ffn, h));
                t.push(SynthTensor::stack(n("ffn_up_exps"), e, s.ffn, h));
                t.push(SynthTensor::stack(n("ffn_down_exps"), e, h, s.ffn));
            }
        }
    }
    t.push(SynthTensor::norm("output_norm.weight", h));
    if !s.tied {
        t.push(SynthTensor::matrix("output.weight", s.vocab, h));
    }
    SynthModel { arch: arch.into(), metadata, tensors: t, vocab: s.vocab, chat: SynthChat::ChatMl }
}

/// Qwen3.5 shapes for [`qwen35`]: a dense decoder whose layers are Gated DeltaNet ones
/// except every `full_every`-th, which is gated attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qwen35Shape {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// SwiGLU inner width.
    pub ffn: usize,
    /// Attention query heads.
    pub heads: usize,
    /// Attention key/value heads.
    pub kv_heads: usize,
    /// Width of an attention head (a quarter of it rotated).
    pub head_dim: usize,
    /// Gated DeltaNet key heads.
    pub lin_k_heads: usize,
    /// Gated DeltaNet value heads.
    pub lin_v_heads: usize,
    /// Width of a Gated DeltaNet key (and value) head.
    pub lin_head: usize,
    /// Convolution taps.
    pub conv: usize,
    /// Every this many layers one is full attention.
    pub full_every: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length written to the metadata.
    pub context: usize,
}

impl Qwen35Shape {
    /// Qwen3.5-0.8B's shapes (as its published config has them): 24 layers (every fourth
    /// full attention), hidden 1024, MLP 3584, 8/2 attention heads of 256, 16/16 Gated
    /// DeltaNet heads of 128, a 4-tap conv, vocab 248320, tied output.
    pub const QWEN3_5_0_8B: Qwen35Shape = Qwen35Shape {
        layers: 24,
        hidden: 1024,
        ffn: 3584,
        heads: 8,
        kv_heads: 2,
        head_dim: 256,
        lin_k_heads: 16,
        lin_v_heads: 16,
        lin_head: 128,
        conv: 4,
        full_every: 4,
        vocab: 248_320,
        context: 262_144,
    };
}

/// A Qwen3.5 in llama.cpp's `qwen35` layout (`ssm.*` keys, `attn_qkv`/`attn_gate`/`ssm_*`
/// tensors for the Gated DeltaNet layers, a query projection twice as wide for the output
/// gate), tied output.
pub fn qwen35(s: &Qwen35Shape) -> SynthModel {
    let arch = "qwen35";
    let k = |n: &str| format!("{arch}.{n}");
    let mut metadata = common_metadata(arch, s.context, s.hidden, s.ffn, s.layers, s.heads, s.kv_heads);
    let (kd, vd) = (s.lin_k_heads * s.lin_head, s.lin_v_heads * s.lin_head);
    metadata.extend([
        (k("attention.key_length"), Value::U32(s.head_dim as u32)),
        (k("attention.value_length"), Value::U32(s.head_dim as u32)),
        (k("rope.freq_base"), Value::F32(10_000_000.0)),
        (k("rope.dimension_count"), Value::U32((s.head_dim / 4) as u32)),
        (k("rope.dimension_sections"), Value::Array(Array::I32(vec![11, 11, 10, 0]))),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("ssm.conv_kernel"), Value::U32(s.conv as u32)),
        (k("ssm.state_size"), Value::U32(s.lin_head as u32)),
        (k("ssm.group_count"), Value::U32(s.lin_k_heads as u32)),
        (k("ssm.time_step_rank"), Value::U32(s.lin_v_heads as u32)),
        (k("ssm.inner_size"), Value::U32(vd as u32)),
        (k("full_attention_interval"), Value::U32(s.full_every as u32)),
    ]);
    let (h, qd, kvd, conv) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim, 2 * kd + vd);
    let mut t = vec![SynthTensor::matrix("token_embd.weight", s.vocab, h)];
    for l in 0..s.layers {
        let n = |x: &str| format!("blk.{l}.{x}.weight");
        t.push(SynthTensor::norm(n("attn_norm"), h));
        if (l + 1) % s.full_every.max(1) != 0 {
            t.push(SynthTensor::matrix(n("attn_qkv"), conv, h));
            t.push(SynthTensor::matrix(n("attn_gate"), vd, h));
            t.push(SynthTensor { name: n("ssm_conv1d"), shape: vec![conv, s.conv], init: Init::SmallF32(0.3) });
            t.push(SynthTensor {
                name: format!("blk.{l}.ssm_dt.bias"),
                shape: vec![s.lin_v_heads],
                init: Init::SmallF32(1.0),
            });
            t.push(SynthTensor { name: format!("blk.{l}.ssm_a"), shape: vec![s.lin_v_heads], init: Init::Decay });
            t.push(SynthTensor::matrix(n("ssm_beta"), s.lin_v_heads, h));
            t.push(SynthTensor::matrix(n("ssm_alpha"), s.lin_v_heads, h));
            t.push(SynthTensor::norm(n("ssm_norm"), s.lin_head));
            t.push(SynthTensor::matrix(n("ssm_out"), h, vd));
        } else {
            t.push(SynthTensor::matrix(n("attn_q"), 2 * qd, h));
            t.push(SynthTensor::matrix(n("attn_k"), kvd, h));
            t.push(SynthTensor::matrix(n("attn_v"), kvd, h));
            t.push(SynthTensor::matrix(n("attn_output"), h, qd));
            t.push(SynthTensor::norm(n("attn_q_norm"), s.head_dim));
            t.push(SynthTensor::norm(n("attn_k_norm"), s.head_dim));
        }
        t.push(SynthTensor::norm(n("post_attention_norm"), h));
        t.push(SynthTensor::matrix(n("ffn_gate"), s.ffn, h));
        t.push(SynthTensor::matrix(n("ffn_up"), s.ffn, h));
        t.push(SynthTensor::matrix(n("ffn_down"), h, s.ffn));
    }
    t.push(SynthTensor::norm("output_norm.weight", h));
    SynthModel { arch: arch.into(), metadata, tensors: t, vocab: s.vocab, chat: SynthChat::ChatMl }
}

/// Gemma 4 shapes for [`gemma4`] (dense, with per-layer embeddings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemma4Shape {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// GeGLU inner width (twice this in the KV-sharing layers).
    pub ffn: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head width of the sliding-window layers.
    pub head_dim_swa: usize,
    /// Head width of the global layers.
    pub head_dim: usize,
    /// Every this many layers one is global.
    pub full_every: usize,
    /// The last this many layers reuse earlier layers' keys and values.
    pub shared_kv: usize,
    /// Width of each layer's per-layer embedding.
    pub per_layer: usize,
    /// Sliding window.
    pub window: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length written to the metadata.
    pub context: usize,
}

impl Gemma4Shape {
    /// Gemma 4 E2B-like shapes: 35 layers (every fifth global), hidden 1536, GeGLU 6144
    /// (12288 in the 20 KV-sharing layers), 8 query heads and 1 kv head of 256 (sliding) or
    /// 512 (global), per-layer embeddings of 256, a 512-position window, vocab 262144.
    pub const E2B: Gemma4Shape = Gemma4Shape {
        layers: 35,
        hidden: 1536,
        ffn: 6144,
        heads: 8,
        kv_heads: 1,
        head_dim_swa: 256,
        head_dim: 512,
        full_every: 5,
        shared_kv: 20,
        per_layer: 256,
        window: 512,
        vocab: 262_144,
        context: 131_072,
    };
}

/// A dense Gemma 4 in llama.cpp's `gemma4` layout (sliding-window pattern, per-layer widths,
/// shared KV layers, per-layer embeddings, proportional RoPE factors over a quarter of the
/// global heads), tied output.
pub fn gemma4(s: &Gemma4Shape) -> SynthModel {
    let arch = "gemma4";
    let k = |n: &str| format!("{arch}.{n}");
    let first_shared = s.layers.saturating_sub(s.shared_kv);
    let sliding: Vec<bool> = (0..s.layers).map(|l| (l + 1) % s.full_every.max(1) != 0).collect();
    let ffn: Vec<i32> = (0..s.layers).map(|l| (if l < first_shared { s.ffn } else { 2 * s.ffn }) as i32).collect();
    let mut metadata = common_metadata(arch, s.context, s.hidden, s.ffn, s.layers, s.heads, s.kv_heads);
    metadata.retain(|(key, _)| key != &k("feed_forward_length"));
    metadata.extend([
        (k("feed_forward_length"), Value::Array(Array::I32(ffn.clone()))),
        (k("attention.key_length"), Value::U32(s.head_dim as u32)),
        (k("attention.value_length"), Value::U32(s.head_dim as u32)),
        (k("attention.key_length_swa"), Value::U32(s.head_dim_swa as u32)),
        (k("attention.value_length_swa"), Value::U32(s.head_dim_swa as u32)),
        (k("rope.freq_base"), Value::F32(1_000_000.0)),
        (k("rope.freq_base_swa"), Value::F32(10_000.0)),
        (k("rope.dimension_count"), Value::U32(s.head_dim as u32)),
        (k("rope.dimension_count_swa"), Value::U32(s.head_dim_swa as u32)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("attention.sliding_window"), Value::U32(s.window as u32)),
        (k("attention.sliding_window_pattern"), Value::Array(Array::Bool(sliding.clone()))),
        (k("attention.shared_kv_layers"), Value::U32(s.shared_kv as u32)),
        (k("embedding_length_per_layer_input"), Value::U32(s.per_layer as u32)),
        (k("final_logit_softcapping"), Value::F32(30.0)),
    ]);
    let h = s.hidden;
    let mut t = vec![
        SynthTensor { name: "rope_freqs.weight".into(), shape: vec![s.head_dim / 2], init: Init::RopeFactors(4) },
        SynthTensor::matrix("token_embd.weight", s.vocab, h),
        SynthTensor::matrix("per_layer_token_embd.weight", s.vocab, s.layers * s.per_layer),
        SynthTensor::matrix("per_layer_model_proj.weight", s.layers * s.per_layer, h),
        SynthTensor::norm("per_layer_proj_norm.weight", s.per_layer),
    ];
    for l in 0..s.layers {
        let n = |x: &str| format!("blk.{l}.{x}.weight");
        let hd = if sliding[l] { s.head_dim_swa } else { s.head_dim };
        let (qd, kvd, w) = (s.heads * hd, s.kv_heads * hd, ffn[l] as usize);
        t.push(SynthTensor::norm(n("attn_norm"), h));
        t.push(SynthTensor::matrix(n("attn_q"), qd, h));
        t.push(SynthTensor::norm(n("attn_q_norm"), hd));
        if l < first_shared {
            t.push(SynthTensor::matrix(n("attn_k"), kvd, h));
            t.push(SynthTensor::matrix(n("attn_v"), kvd, h));
            t.push(SynthTensor::norm(n("attn_k_norm"), hd));
        }
        t.push(SynthTensor::matrix(n("attn_output"), h, qd));
        t.push(SynthTensor::norm(n("post_attention_norm"), h));
        t.push(SynthTensor::norm(n("ffn_norm"), h));
        t.push(SynthTensor::matrix(n("ffn_gate"), w, h));
        t.push(SynthTensor::matrix(n("ffn_up"), w, h));
        t.push(SynthTensor::matrix(n("ffn_down"), h, w));
        t.push(SynthTensor::norm(n("post_ffw_norm"), h));
        t.push(SynthTensor::matrix(n("inp_gate"), s.per_layer, h));
        t.push(SynthTensor::matrix(n("proj"), h, s.per_layer));
        t.push(SynthTensor::norm(n("post_norm"), h));
        t.push(SynthTensor::norm(n("layer_output_scale"), 1));
    }
    t.push(SynthTensor::norm("output_norm.weight", h));
    SynthModel { arch: arch.into(), metadata, tensors: t, vocab: s.vocab, chat: SynthChat::ChatMl }
}

/// GLM-4.5 shapes for [`glm4moe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glm4MoeShape {
    /// Transformer blocks (the leading `dense_lead` dense, the rest MoE).
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head (half of it rotated).
    pub head_dim: usize,
    /// SwiGLU width of the dense layers.
    pub ffn: usize,
    /// Leading dense layers.
    pub dense_lead: usize,
    /// Routed experts per layer.
    pub experts: usize,
    /// Experts per token.
    pub used: usize,
    /// Shared experts.
    pub shared: usize,
    /// SwiGLU width of one expert.
    pub expert_ffn: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length written to the metadata.
    pub context: usize,
    /// Per-head q/k RMSNorm (GLM-4.5 has them, GLM-4.5-Air does not).
    pub qk_norm: bool,
}

impl Glm4MoeShape {
    /// GLM-4.5-Air: 46 layers (the first dense), hidden 4096, 96/8 heads of 128, dense MLP
    /// 10944, 128 experts of 1408 (8 used) plus one shared, vocab 151552, no q/k norms.
    pub const GLM4_5_AIR: Glm4MoeShape = Glm4MoeShape {
        layers: 46,
        hidden: 4096,
        heads: 96,
        kv_heads: 8,
        head_dim: 128,
        ffn: 10_944,
        dense_lead: 1,
        experts: 128,
        used: 8,
        shared: 1,
        expert_ffn: 1408,
        vocab: 151_552,
        context: 131_072,
        qk_norm: false,
    };

    /// GLM-4.5-Air's structure scaled to about 0.9B parameters (for benchmarks): 12 layers,
    /// hidden 1024, 16/4 heads of 128, dense MLP 2816, 32 experts of 512 (4 used) plus one
    /// shared, the real vocabulary.
    pub const GLM4_5_MINI: Glm4MoeShape = Glm4MoeShape {
        layers: 12,
        hidden: 1024,
        heads: 16,
        kv_heads: 4,
        head_dim: 128,
        ffn: 2816,
        dense_lead: 1,
        experts: 32,
        used: 4,
        shared: 1,
        expert_ffn: 512,
        vocab: 151_552,
        context: 131_072,
        qk_norm: false,
    };
}

/// A GLM-4.5 in llama.cpp's `glm4moe` layout: q/k/v biases, RoPE over half of each head,
/// DeepSeek-V3 routing (sigmoid, selection bias, weights renormalized and scaled by 2.5)
/// with shared experts after the leading dense layers, untied output, no next-token
/// prediction layer.
pub fn glm4moe(s: &Glm4MoeShape) -> SynthModel {
    let k = |n: &str| format!("glm4moe.{n}");
    let mut metadata = common_metadata("glm4moe", s.context, s.hidden, s.ffn, s.layers, s.heads, s.kv_heads);
    metadata.extend([
        (k("attention.key_length"), Value::U32(s.head_dim as u32)),
        (k("attention.value_length"), Value::U32(s.head_dim as u32)),
        (k("rope.dimension_count"), Value::U32((s.head_dim / 2) as u32)),
        (k("rope.freq_base"), Value::F32(1_000_000.0)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (k("expert_count"), Value::U32(s.experts as u32)),
        (k("expert_used_count"), Value::U32(s.used as u32)),
        (k("expert_shared_count"), Value::U32(s.shared as u32)),
        (k("expert_feed_forward_length"), Value::U32(s.expert_ffn as u32)),
        (k("leading_dense_block_count"), Value::U32(s.dense_lead as u32)),
        (k("expert_gating_func"), Value::U32(2)),
        (k("expert_weights_scale"), Value::F32(2.5)),
        (k("expert_weights_norm"), Value::Bool(true)),
        (k("expert_group_count"), Value::U32(1)),
        (k("expert_group_used_count"), Value::U32(1)),
    ]);
    let (h, qd, kvd) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let bias = |name: String, n: usize| SynthTensor { name, shape: vec![n], init: Init::SmallF32(0.05) };
    let mut t = vec![SynthTensor::matrix("token_embd.weight", s.vocab, h)];
    for l in 0..s.layers {
        let n = |x: &str| format!("blk.{l}.{x}.weight");
        t.push(SynthTensor::norm(n("attn_norm"), h));
        t.push(SynthTensor::matrix(n("attn_q"), qd, h));
        t.push(bias(format!("blk.{l}.attn_q.bias"), qd));
        t.push(SynthTensor::matrix(n("attn_k"), kvd, h));
        t.push(bias(format!("blk.{l}.attn_k.bias"), kvd));
        t.push(SynthTensor::matrix(n("attn_v"), kvd, h));
        t.push(bias(format!("blk.{l}.attn_v.bias"), kvd));
        t.push(SynthTensor::matrix(n("attn_output"), h, qd));
        if s.qk_norm {
            t.push(SynthTensor::norm(n("attn_q_norm"), s.head_dim));
            t.push(SynthTensor::norm(n("attn_k_norm"), s.head_dim));
        }
        t.push(SynthTensor::norm(n("post_attention_norm"), h));
        if l < s.dense_lead {
            t.push(SynthTensor::matrix(n("ffn_gate"), s.ffn, h));
            t.push(SynthTensor::matrix(n("ffn_up"), s.ffn, h));
            t.push(SynthTensor::matrix(n("ffn_down"), h, s.ffn));
        } else {
            moe_tensors(&mut t, l, h, s.experts, s.expert_ffn, s.shared, true);
        }
    }
    t.push(SynthTensor::norm("output_norm.weight", h));
    t.push(SynthTensor::matrix("output.weight", s.vocab, h));
    SynthModel { arch: "glm4moe".into(), metadata, tensors: t, vocab: s.vocab, chat: SynthChat::ChatMl }
}

/// Layer `l`'s mixture of experts in llama.cpp's names: an f32 router (with a wider spread,
/// so routing decisions are not near-ties), the selection bias where `biased`, the stacked
/// experts, and the shared experts as one SwiGLU of `shared * expert_ffn`.
fn moe_tensors(
    t: &mut Vec<SynthTensor>,
    l: usize,
    h: usize,
    experts: usize,
    expert_ffn: usize,
    shared: usize,
    biased: bool,
) {
    let n = |x: &str| format!("blk.{l}.{x}.weight");
    let mut router = SynthTensor::matrix(n("ffn_gate_inp"), experts, h);
    router.init = Init::SmallF32(0.5);
    t.push(router);
    if biased {
        t.push(SynthTensor {
            name: format!("blk.{l}.exp_probs_b.bias"),
            shape: vec![experts],
            init: Init::SmallF32(0.05),
        });
    }
    t.push(SynthTensor::stack(n("ffn_gate_exps"), experts, expert_ffn, h));
    t.push(SynthTensor::stack(n("ffn_up_exps"), experts, expert_ffn, h));
    t.push(SynthTensor::stack(n("ffn_down_exps"), experts, h, expert_ffn));
    if shared > 0 {
        let w = shared * expert_ffn;
        t.push(SynthTensor::matrix(n("ffn_gate_shexp"), w, h));
        t.push(SynthTensor::matrix(n("ffn_up_shexp"), w, h));
        t.push(SynthTensor::matrix(n("ffn_down_shexp"), h, w));
    }
}

/// DeepSeek-V2/V3 shapes for [`deepseek`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepSeekShape {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual width.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
    /// Query compression rank (`None`: plain query projection).
    pub q_lora: Option<usize>,
    /// Latent rank.
    pub kv_lora: usize,
    /// Per-head query/key width without position.
    pub qk_nope: usize,
    /// Rotary width.
    pub qk_rope: usize,
    /// Per-head value width.
    pub v_head: usize,
    /// Dense SwiGLU width.
    pub ffn: usize,
    /// Leading dense layers.
    pub dense_lead: usize,
    /// Routed experts.
    pub experts: usize,
    /// Experts per token.
    pub used: usize,
    /// Shared experts.
    pub shared: usize,
    /// Expert SwiGLU width.
    pub expert_ffn: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length.
    pub context: usize,
    /// V3 routing (sigmoid, bias, 8 groups with 4 used, normalized, x2.5) instead of V2's.
    pub v3: bool,
}

impl DeepSeekShape {
    /// DeepSeek-V2-Lite: 27 layers, hidden 2048, 16 heads, no query compression, latent 512 +
    /// 64 rotary, 64 experts (6 used) of 1408 plus 2 shared, a dense first layer of 10944.
    pub const V2_LITE: DeepSeekShape = DeepSeekShape {
        layers: 27,
        hidden: 2048,
        heads: 16,
        q_lora: None,
        kv_lora: 512,
        qk_nope: 128,
        qk_rope: 64,
        v_head: 128,
        ffn: 10944,
        dense_lead: 1,
        experts: 64,
        used: 6,
        shared: 2,
        expert_ffn: 1408,
        vocab: 102_400,
        context: 32_768,
        v3: false,
    };

    /// A MoE whose Q8_0 file is about 6 GB, nearly all of it routed experts (20 layers of 64
    /// experts of 1536, 4 used): for decoding under a memory limit smaller than the file.
    pub const MOE_6G: DeepSeekShape = DeepSeekShape {
        layers: 20,
        hidden: 1024,
        heads: 8,
        q_lora: None,
        kv_lora: 256,
        qk_nope: 64,
        qk_rope: 32,
        v_head: 64,
        ffn: 2816,
        dense_lead: 1,
        experts: 64,
        used: 4,
        shared: 1,
        expert_ffn: 1536,
        vocab: 32_000,
        context: 4096,
        v3: false,
    };
}

/// A DeepSeek-V2/V3 in llama.cpp's `deepseek2` layout (MLA split into `attn_k_b`/`attn_v_b`).
pub fn deepseek(s: &DeepSeekShape) -> SynthModel {
    let k = |n: &str| format!("deepseek2.{n}");
    let mut metadata = common_metadata("deepseek2", s.context, s.hidden, s.ffn, s.layers, s.heads, 1);
    metadata.extend([
        (k("rope.freq_base"), Value::F32(10_000.0)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (k("leading_dense_block_count"), Value::U32(s.dense_lead as u32)),
        (k("vocab_size"), Value::U32(s.vocab as u32)),
        (k("attention.kv_lora_rank"), Value::U32(s.kv_lora as u32)),
        (k("attention.key_length"), Value::U32((s.kv_lora + s.qk_rope) as u32)),
        (k("attention.value_length"), Value::U32(s.kv_lora as u32)),
        (k("attention.key_length_mla"), Value::U32((s.qk_nope + s.qk_rope) as u32)),
        (k("attention.value_length_mla"), Value::U32(s.v_head as u32)),
        (k("expert_feed_forward_length"), Value::U32(s.expert_ffn as u32)),
        (k("expert_count"), Value::U32(s.experts as u32)),
        (k("expert_used_count"), Value::U32(s.used as u32)),
        (k("expert_shared_count"), Value::U32(s.shared as u32)),
        (k("expert_weights_scale"), Value::F32(if s.v3 { 2.5 } else { 1.0 })),
        (k("expert_gating_func"), Value::U32(if s.v3 { 2 } else { 1 })),
        (k("rope.dimension_count"), Value::U32(s.qk_rope as u32)),
    ]);
    // 0 means "no query compression" (llama.cpp requires the key except for 26/27 layers).
    metadata.push((k("attention.q_lora_rank"), Value::U32(s.q_lora.unwrap_or(0) as u32)));
    if s.v3 {
        metadata.push((k("expert_weights_norm"), Value::Bool(true)));
        metadata.push((k("expert_group_count"), Value::U32(8)));
        metadata.push((k("expert_group_used_count"), Value::U32(4)));
    }
    let (h, nh) = (s.hidden, s.heads);
    let qd = nh * (s.qk_nope + s.qk_rope);
    let mut t = vec![SynthTensor::matrix("token_embd.weight", s.vocab, h)];
    for l in 0..s.layers {
        let n = |x: &str| format!("blk.{l}.{x}.weight");
        t.push(SynthTensor::norm(n("attn_norm"), h));
        match s.q_lora {
            Some(r) => {
                t.push(SynthTensor::matrix(n("attn_q_a"), r, h));
                t.push(SynthTensor::norm(n("attn_q_a_norm"), r));
                t.push(SynthTensor::matrix(n("attn_q_b"), qd, r));
            }
            None => t.push(SynthTensor::matrix(n("attn_q"), qd, h)),
        }
        t.push(SynthTensor::matrix(n("attn_kv_a_mqa"), s.kv_lora + s.qk_rope, h));
        t.push(SynthTensor::norm(n("attn_kv_a_norm"), s.kv_lora));
        t.push(SynthTensor::stack(n("attn_k_b"), nh, s.kv_lora, s.qk_nope));
        t.push(SynthTensor::stack(n("attn_v_b"), nh, s.v_head, s.kv_lora));
        t.push(SynthTensor::matrix(n("attn_output"), h, nh * s.v_head));
        t.push(SynthTensor::norm(n("ffn_norm"), h));
        if l < s.dense_lead {
            t.push(SynthTensor::matrix(n("ffn_gate"), s.ffn, h));
            t.push(SynthTensor::matrix(n("ffn_up"), s.ffn, h));
            t.push(SynthTensor::matrix(n("ffn_down"), h, s.ffn));
        } else {
            moe_tensors(&mut t, l, h, s.experts, s.expert_ffn, s.shared, s.v3);
        }
    }
    t.push(SynthTensor::norm("output_norm.weight", h));
    t.push(SynthTensor::matrix("output.weight", s.vocab, h));
    SynthModel { arch: "deepseek2".into(), metadata, tensors: t, vocab: s.vocab, chat: SynthChat::ChatMl }
}

/// The user-defined (not control) tokens the padding starts with, as Qwen3's vocabulary
/// has them: a model can write them, and a tool call opens with one token.
const USER_PADS: [&str; 2] = ["<tool_call>", "</tool_call>"];

/// The tokenizer metadata of the committed tiny Qwen3, its vocabulary padded to `vocab`
/// entries: first the user-defined tokens `<tool_call>` and `</tool_call>` (where they fit),
/// then control tokens `<|fucina_pad_N|>`.
pub fn padded_tokenizer(vocab: usize) -> Result<Vec<(String, Value)>> {
    let tiny = GgufFile::open(crate::llm::assets::default_model())?;
    let mut out = Vec::new();
    for (key, v) in &tiny.header().metadata {
        if !key.starts_with("tokenizer.") {
            continue;
        }
        let v = match (key.as_str(), v) {
            ("tokenizer.ggml.tokens", Value::Array(Array::String(items))) => {
                let mut items = items.clone();
                check_vocab(items.len(), vocab)?;
                let have = items.len();
                items.extend((have..vocab).map(|i| match USER_PADS.get(i - have) {
                    Some(t) => t.as_bytes().to_vec(),
                    None => format!("<|fucina_pad_{i}|>").into_bytes(),
                }));
                Value::Array(Array::String(items))
            }
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(items))) => {
                let mut items = items.clone();
                check_vocab(items.len(), vocab)?;
                let have = items.len();
                items.extend((have..vocab).map(|i| if i - have < USER_PADS.len() { 4 } else { 3 }));
                Value::Array(Array::I32(items))
            }
            _ => v.clone(),
        };
        out.push((key.clone(), v));
    }
    Ok(out)
}

/// DeepSeek-R1's chat tokens: [`padded_tokenizer`]'s vocabulary with the ChatML tokens
/// renamed (`<|endoftext|>` to `<｜begin▁of▁sentence｜>`, `<|im_start|>` to `<｜User｜>`,
/// `<|im_end|>` to `<｜end▁of▁sentence｜>`, BOS and EOS set to them) and the padding starting
/// with `<｜Assistant｜>`, the tool-call and the tool-output tags (control tokens, as the
/// opening of R1's template: `tokenizer.chat_template` holds its generation prompt). For
/// tests of DeepSeek's chat and tool-call formats.
pub fn deepseek_tokenizer(vocab: usize) -> Result<Vec<(String, Value)>> {
    const RENAMED: [(&str, &str); 3] = [
        ("<|endoftext|>", "<｜begin▁of▁sentence｜>"),
        ("<|im_start|>", "<｜User｜>"),
        ("<|im_end|>", "<｜end▁of▁sentence｜>"),
    ];
    let pads = ["<｜Assistant｜>"].into_iter().chain(crate::llm::tools::DEEPSEEK_TAGS).chain([
        "<｜tool▁outputs▁begin｜>",
        "<｜tool▁outputs▁end｜>",
        "<｜tool▁output▁begin｜>",
        "<｜tool▁output▁end｜>",
    ]);
    let pads: Vec<&str> = pads.collect();
    let mut out = padded_tokenizer(vocab)?;
    let have = GgufFile::open(crate::llm::assets::default_model())?
        .header()
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array().map(Array::len))
        .unwrap_or(0);
    if have + pads.len() > vocab {
        return Err(FucinaError::InvalidArgument {
            op: "synth",
            msg: format!("a vocabulary of {vocab} has no room for DeepSeek's {} chat tokens", pads.len()),
        });
    }
    let (mut bos, mut eos) = (None, None);
    for (key, v) in &mut out {
        match (key.as_str(), v) {
            ("tokenizer.ggml.tokens", Value::Array(Array::String(items))) => {
                for (i, t) in items.iter_mut().enumerate() {
                    if let Some((_, to)) = RENAMED.iter().find(|(from, _)| from.as_bytes() == t.as_slice()) {
                        *t = to.as_bytes().to_vec();
                        bos = bos.or((*to == RENAMED[0].1).then_some(i));
                        eos = eos.or((*to == RENAMED[2].1).then_some(i));
                    }
                }
                for (t, name) in items[have..].iter_mut().zip(&pads) {
                    *t = name.as_bytes().to_vec();
                }
            }
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(items))) => {
                for t in &mut items[have..have + pads.len()] {
                    *t = 3;
                }
            }
            _ => {}
        }
    }
    let (Some(bos), Some(eos)) = (bos, eos) else {
        return Err(FucinaError::InvalidArgument {
            op: "synth",
            msg: "the tiny vocabulary lacks ChatML's tokens".into(),
        });
    };
    out.retain(|(k, _)| {
        !matches!(k.as_str(), "tokenizer.ggml.bos_token_id" | "tokenizer.ggml.eos_token_id" | "tokenizer.chat_template")
    });
    out.push(("tokenizer.ggml.bos_token_id".into(), Value::U32(bos as u32)));
    out.push(("tokenizer.ggml.eos_token_id".into(), Value::U32(eos as u32)));
    out.push((
        "tokenizer.chat_template".into(),
        Value::String("{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}".as_bytes().to_vec()),
    ));
    Ok(out)
}

fn check_vocab(have: usize, want: usize) -> Result<()> {
    if want < have {
        return Err(FucinaError::InvalidArgument {
            op: "synth",
            msg: format!("a vocabulary of {want} is smaller than the tokenizer's {have} tokens"),
        });
    }
    Ok(())
}

/// The storage format of tensor `t` in a file whose matrices are `ty`: matrices whose rows
/// are not whole blocks of `ty` fall back to F16 (llama-quantize does the same), norms and
/// f32-kept vectors stay F32.
pub fn format_of(t: &SynthTensor, ty: GgmlType) -> GgmlType {
    match t.init {
        Init::NormWeight | Init::SmallF32(_) | Init::Decay | Init::RopeFactors(_) => GgmlType::F32,
        Init::Normal(_) if t.shape.last().is_some_and(|c| c % ty.block_size() == 0) => ty,
        Init::Normal(_) => GgmlType::F16,
    }
}

/// Writes `m` to `path` with matrices in `ty`, values drawn from Philox(`seed`) per tensor
/// (tensor `i` uses stream `i`, so the values do not depend on the format). `progress(i, n)`
/// is called per tensor. The file is streamed; one tensor is in memory at a time.
pub fn write(
    m: &SynthModel,
    ty: GgmlType,
    seed: u64,
    path: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<()> {
    let mut metadata = m.metadata.clone();
    metadata.push(("general.file_type".into(), Value::U32(file_type(ty))));
    metadata.push(("general.alignment".into(), Value::U32(32)));
    metadata.extend(match m.chat {
        SynthChat::ChatMl => padded_tokenizer(m.vocab)?,
        SynthChat::DeepSeekR1 => deepseek_tokenizer(m.vocab)?,
    });
    let tensors = m
        .tensors
        .iter()
        .map(|t| TensorInfo {
            name: t.name.clone(),
            dims: t.shape.iter().rev().map(|&d| d as u64).collect(),
            ty: format_of(t, ty),
            offset: 0,
        })
        .collect();
    let mut header = GgufHeader { version: 3, metadata, tensors, alignment: 32, data_offset: 0 };
    assign_offsets(&mut header)?;
    let io = |e: std::io::Error| FucinaError::io(path.display().to_string(), e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let rng = Philox::new(seed);
    let n = m.tensors.len();
    write_gguf_to(&mut w, &header, |i| {
        progress(i, n);
        let t = &m.tensors[i];
        let values = draw(&rng, i as u64, t);
        let row = *t.shape.last().unwrap_or(&1);
        Ok(Cow::Owned(crate::quantize::quantize_rows(format_of(t, ty), &values, row)?))
    })?;
    std::io::Write::flush(&mut w).map_err(io)?;
    progress(n, n);
    Ok(())
}

/// llama.cpp's `general.file_type` for an all-`ty` file.
fn file_type(ty: GgmlType) -> u32 {
    crate::quantize::TARGETS.iter().find(|(_, t, _)| *t == ty).map_or(0, |(_, _, f)| *f)
}

/// The values of tensor `t`, from Philox stream `stream`.
fn draw(rng: &Philox, stream: u64, t: &SynthTensor) -> Vec<f32> {
    let n: usize = t.shape.iter().product();
    if let Init::RopeFactors(part) = t.init {
        return (0..n).map(|i| if i < n / part.max(1) { 1.0 } else { 1e30 }).collect();
    }
    let mut v = vec![0.0f32; n];
    v.par_chunks_mut(4096).enumerate().for_each(|(c, out)| {
        for (j, pair) in out.chunks_mut(4).enumerate() {
            let r = rng.at(stream, (c * 1024 + j) as u64);
            let (a, b) = box_muller(r[0], r[1]);
            let (x, y) = box_muller(r[2], r[3]);
            for (o, z) in pair.iter_mut().zip([a, b, x, y]) {
                *o = match t.init {
                    Init::Normal(s) | Init::SmallF32(s) => z * s,
                    Init::NormWeight => 1.0 + 0.1 * z,
                    Init::Decay => -(0.05 + z.abs()),
                    Init::RopeFactors(_) => 1.0, // drawn above
                };
            }
        }
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_loadable_padded_file() {
        let s = Qwen3Shape {
            layers: 1,
            hidden: 64,
            ffn: 96,
            heads: 2,
            kv_heads: 1,
            head_dim: 32,
            vocab: 800,
            context: 128,
            moe: None,
            tied: false,
        };
        let path = std::env::temp_dir().join(format!("fucina-synth-{}.gguf", std::process::id()));
        write(&qwen3(&s), GgmlType::Q8_0, 7, &path, |_, _| {}).unwrap();
        let f = GgufFile::open(&path).unwrap();
        let tok = crate::llm::Tokenizer::from_gguf(f.header()).unwrap();
        assert_eq!(tok.vocab_size(), 800);
        assert_eq!(tok.token_id("<|fucina_pad_799|>"), Some(799));
        let ty = |n: &str| f.header().tensors.iter().find(|t| t.name == n).unwrap().ty;
        assert_eq!(ty("blk.0.attn_q.weight"), GgmlType::Q8_0);
        assert_eq!(ty("blk.0.ffn_down.weight"), GgmlType::Q8_0);
        assert_eq!(ty("blk.0.attn_norm.weight"), GgmlType::F32);
        // Rows of 96 are not Q4_K blocks: that matrix falls back to F16.
        let w = qwen3(&s);
        let down = w.tensors.iter().find(|t| t.name == "blk.0.ffn_down.weight").unwrap();
        assert_eq!(format_of(down, GgmlType::Q4_K), GgmlType::F16);
        std::fs::remove_file(&path).ok();
        assert!(padded_tokenizer(10).is_err());
    }
}
