//! The decoder of the Llama family in the named-axes DSL — Qwen3, Qwen3-MoE, Qwen2, Llama
//! (Mistral's files are `llama` ones, with sliding-window attention where the file has a
//! window), GLM-4.5 and Qwen3.5 (Gated DeltaNet layers between gated-attention ones) — with
//! what differs between them as config
//! data: RMSNorm, grouped-query attention (with per-head q/k RMSNorm for Qwen3, q/k/v biases
//! for Qwen2 and GLM-4.5) and RoPE (halves, or the pairs of a `llama` file, with Llama 3's
//! per-pair frequency factors or linear scaling; over the leading half of each head in
//! GLM-4.5), a SwiGLU MLP (dense) or a routed mixture of SwiGLU experts (Qwen3-MoE's softmax
//! routing; GLM-4.5's DeepSeek-V3 routing with shared experts after leading dense layers),
//! tied or untied output. Matrices stay in the GGUF's format ([`QWeight`]:
//! f32/f16/bf16 or a quantized block format) and run through its kernels; norms and biases
//! are f32 tensors.

use super::config::{FfnAct, Qwen3Config};
use super::nextn::NextN;
use crate::llm::batch::{self, LogitRows, Segment};
use crate::llm::head::lm_head;
use crate::llm::kv_cache::{KvCache, KvType, Values};
use crate::llm::moe::{self, route, Routing};
use crate::llm::rope::Rope;
use crate::llm::weights::ModelFile;
use fucina::ops::{causal_conv1d, gated_delta_rule, ConvState, DeltaForm, DeltaOptions, DeltaState, HeadMap, Mask};
use fucina::prelude::*;
use fucina::quant::{ProductGroup, QWeight};

axis!(pub q_flat, pub kv_flat, pub gate_out);
axis!(pub conv_ch, pub tap, pub lin_k_head, pub lin_v_head, pub lin_k_dim, pub lin_v_dim, pub lin_v_flat);

/// Attention projections and the per-head norms of one block.
#[derive(Module)]
pub struct Attention {
    /// `[q_flat, hidden]` query projection (`q_flat` = heads × head_dim; with an output gate,
    /// heads × 2 head_dim: each head's query, then its gate).
    pub q: QWeight<q_flat, hidden>,
    /// `[kv_flat, hidden]` key projection.
    pub k: QWeight<kv_flat, hidden>,
    /// `[kv_flat, hidden]` value projection.
    pub v: QWeight<kv_flat, hidden>,
    /// `[hidden, q_flat]` output projection.
    pub o: QWeight<hidden, q_flat>,
    /// RMSNorm weight applied to each query head (Qwen3).
    pub q_norm: Option<Tensor<axes![head_dim]>>,
    /// RMSNorm weight applied to each key head (Qwen3).
    pub k_norm: Option<Tensor<axes![head_dim]>>,
    /// Query, key and value biases (Qwen2).
    pub bias: Option<QkvBias>,
}

/// The biases of the query, key and value projections.
#[derive(Module)]
pub struct QkvBias {
    /// Added to the queries.
    pub q: Tensor<axes![q_flat]>,
    /// Added to the keys.
    pub k: Tensor<axes![kv_flat]>,
    /// Added to the values.
    pub v: Tensor<axes![kv_flat]>,
}

/// A Gated DeltaNet layer (Qwen3.5's linear attention): queries, keys and values projected
/// together and run through a causal depthwise convolution (SiLU), L2-normed queries and
/// keys, the gated delta rule with per-head decay `exp(a · softplus(alpha x + dt_bias))` and
/// update strength `sigmoid(beta x)`, then an RMSNorm of each value head gated by
/// `silu(gate x)`, and the output projection. Its convolution and delta-rule states live in
/// the cache.
#[derive(Module)]
pub struct DeltaNet {
    /// `[conv_ch, hidden]`: queries, keys and values side by side.
    pub qkv: QWeight<conv_ch, hidden>,
    /// `[lin_v_flat, hidden]` output gate.
    pub gate: QWeight<lin_v_flat, hidden>,
    /// `[lin_v_head, hidden]` update-strength projection.
    pub beta: QWeight<lin_v_head, hidden>,
    /// `[lin_v_head, hidden]` decay projection.
    pub alpha: QWeight<lin_v_head, hidden>,
    /// `[conv_ch, tap]` convolution kernel.
    pub conv: Tensor<axes![conv_ch, tap]>,
    /// Added to the decay projection before the softplus.
    pub dt_bias: Tensor<axes![lin_v_head]>,
    /// `-exp(A_log)`: the (negative) decay rate per value head.
    pub a: Tensor<axes![lin_v_head]>,
    /// RMSNorm weight of each value head's output.
    pub norm: Tensor<axes![lin_v_dim]>,
    /// `[hidden, lin_v_flat]` output projection.
    pub out: QWeight<hidden, lin_v_flat>,
}

/// The sequence mixer of a block.
#[derive(Module)]
pub enum Mixer {
    /// Self-attention over the cache's keys and values.
    Attention(Attention),
    /// A Gated DeltaNet layer over the cache's recurrent states.
    DeltaNet(DeltaNet),
}

/// The SwiGLU feed-forward of one block: `down(silu(gate x) * up x)`.
#[derive(Module)]
pub struct Mlp {
    /// `[ffn, hidden]` gate projection.
    pub gate: QWeight<ffn, hidden>,
    /// `[ffn, hidden]` up projection.
    pub up: QWeight<ffn, hidden>,
    /// `[hidden, ffn]` down projection.
    pub down: QWeight<hidden, ffn>,
}

/// A routed mixture of SwiGLU experts: each token goes to the experts [`route`] chooses
/// from its router row, weighted by their scores, plus the shared experts if any.
#[derive(Module)]
pub struct Moe {
    /// `[expert, hidden]` router.
    pub router: QWeight<expert, hidden>,
    /// Per-expert selection bias (GLM-4.5's `e_score_correction_bias`).
    pub bias: Option<Tensor<axes![expert]>>,
    /// The experts.
    pub experts: Vec<Mlp>,
    /// The shared experts as one SwiGLU.
    pub shared: Option<Mlp>,
    /// `[gate_out = 1, hidden]`: the shared experts' output is scaled by `sigmoid(g x)`
    /// (Qwen3.5-MoE).
    pub shared_gate: Option<QWeight<gate_out, hidden>>,
    /// How each token picks its experts.
    #[module(skip)]
    pub routing: Routing,
}

/// nanochat's feed-forward: `down(relu(up x)²)`.
#[derive(Module)]
pub struct Relu2Mlp {
    /// `[ffn, hidden]` up projection.
    pub up: QWeight<ffn, hidden>,
    /// `[hidden, ffn]` down projection.
    pub down: QWeight<hidden, ffn>,
}

impl Relu2Mlp {
    /// `down(relu(up x)²)`.
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>) -> Result<Tensor<axes![seq, hidden]>> {
        let u = self.up.forward(x)?.relu()?;
        self.down.forward(&u.mul(&u)?)
    }
}

/// The feed-forward of a block.
#[derive(Module)]
pub enum Ffn {
    /// A SwiGLU MLP.
    Dense(Mlp),
    /// A squared-ReLU MLP (nanochat).
    Relu2(Relu2Mlp),
    /// A mixture of experts (boxed: it holds many more matrices than the dense variants).
    Moe(Box<Moe>),
}

/// One pre-norm transformer block.
#[derive(Module)]
pub struct Block {
    /// RMSNorm weight before attention (`None`: a plain RMSNorm).
    pub attn_norm: Option<Tensor<axes![hidden]>>,
    /// Self-attention, or a Gated DeltaNet layer.
    pub mixer: Mixer,
    /// Which of the cache's attention layers (or recurrent states) the mixer uses.
    #[module(skip)]
    pub slot: usize,
    /// RMSNorm weight before the feed-forward (`None`: a plain RMSNorm).
    pub ffn_norm: Option<Tensor<axes![hidden]>>,
    /// Feed-forward.
    pub ffn: Ffn,
}

/// A decoder of the Llama family (Qwen3 dense or MoE, Qwen2, Llama). The `Module` parameters
/// are the f32 norm weights and biases; the matrices are frozen data in the file's format
/// (listed by name with their formats by `Module::frozen_weights`).
#[derive(Module)]
pub struct Qwen3 {
    /// Hyper-parameters.
    #[module(skip)]
    pub config: Qwen3Config,
    /// `[vocab, hidden]` token embedding.
    pub embed: QWeight<vocab, hidden>,
    /// The blocks, first to last.
    pub blocks: Vec<Block>,
    /// Final RMSNorm weight (`None`: a plain RMSNorm).
    pub norm: Option<Tensor<axes![hidden]>>,
    /// `[vocab, hidden]` output projection, `None` when tied to the embedding.
    pub output: Option<QWeight<vocab, hidden>>,
    /// GLM-4.5's next-token-prediction layer, the model's own drafter
    /// ([`super::nextn`]), when the file has it.
    pub nextn: Option<NextN>,
    #[module(skip)]
    pub(crate) rope: Rope,
}

impl Qwen3 {
    /// Loads a `qwen3`, `qwen3moe`, `qwen2`, `llama` or `glm4moe` GGUF (llama.cpp's tensor
    /// names), leaving the matrices in the map. A `glm4moe` file's next-token-prediction
    /// layer is loaded as the model's drafter ([`super::nextn`]).
    pub fn load(f: &ModelFile) -> Result<Qwen3> {
        let c = Qwen3Config::from_file(f)?;
        let h = c.hidden;
        let norm = |name: &str, width: usize| -> Result<Option<Tensor<axes![hidden]>>> {
            if c.norm_weights {
                Ok(Some(f.dense(name, &[width])?))
            } else {
                Ok(None)
            }
        };
        let blocks = (0..c.layers).map(|l| load_block(f, &c, l)).collect::<Result<Vec<_>>>()?;
        let output = if f.has("output.weight") { Some(f.matrix("output.weight", c.vocab, h)?) } else { None };
        // Llama 3's per-pair factors divide the frequencies (llama.cpp's `rope_freqs`), and
        // linear scaling divides the positions, which is the same as dividing every one.
        let factors = f.rope_factors(c.rope_dims / 2)?;
        // Frequencies run over the rotated width: a partial rotation is a whole-head rotation
        // of the leading `rope_dims` values.
        // A reversed rotation (nanochat) turns by −θ: the same tables with negated frequencies.
        let sign = if c.rope_reversed { -1.0 } else { 1.0 };
        let rope = Rope::new(c.rope_dims, c.rope_theta)?.map_freqs(|i, x| sign * x / factors[i] / c.rope_linear);
        Ok(Qwen3 {
            embed: f.matrix("token_embd.weight", c.vocab, h)?,
            blocks,
            norm: norm("output_norm.weight", h)?,
            output,
            nextn: NextN::load(f, &c)?,
            rope,
            config: c,
        })
    }

    /// A KV cache for this model holding `capacity` positions (at most the context length).
    pub fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context_length {
            return Err(FucinaError::InvalidArgument {
                op: "Qwen3::new_cache",
                msg: format!("{capacity} positions exceed the model's context length of {}", c.context_length),
            });
        }
        let recurrent = (0..c.layers).filter(|&l| c.is_recurrent(l)).count();
        let cache = KvCache::new(c.layers - recurrent, c.kv_heads, c.head_dim, c.head_dim, capacity, kv)?;
        match &c.deltanet {
            None => Ok(cache),
            Some(d) => {
                let states = (0..recurrent)
                    .map(|_| {
                        Ok((
                            ConvState::new(d.conv_kernel, d.conv_dim())?,
                            DeltaState::new(d.v_heads, d.head_k, d.head_v)?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(cache.with_recurrent(states))
            }
        }
    }

    /// Runs `tokens` through the model after the positions already in `cache`, appends
    /// their keys and values, and returns the logits `[seq, vocab]`: of every position when
    /// `rows` is [`LogitRows::All`], of the last one for [`LogitRows::Last`].
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, rows: LogitRows) -> Result<Tensor<axes![seq, vocab]>> {
        self.forward_traced(tokens, cache, rows, None)
    }

    /// [`Qwen3::forward`], also recording into `routes` (MoE models) the experts each layer
    /// chose for each token: `routes[layer][token]`, ascending expert ids.
    pub fn forward_traced(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: LogitRows,
        routes: Option<&mut Vec<Vec<Vec<u32>>>>,
    ) -> Result<Tensor<axes![seq, vocab]>> {
        batch::single(tokens, cache, rows, |b| self.forward_batch_traced(b, routes))
    }

    /// One pass over several sequences (see [`crate::llm::batch`]): every matrix product
    /// takes the rows of all of them, attention runs per sequence over its own cache.
    /// Returns each sequence's logits rows; `routes` as in [`Qwen3::forward_traced`] over the
    /// batch's rows in order.
    /// A Qwen3.5 pass that fails after a Gated DeltaNet layer has moved the recurrent states
    /// clears the batch's caches (they would no longer match their positions).
    pub fn forward_batch_traced(
        &self,
        batch: &mut [Segment<'_>],
        routes: Option<&mut Vec<Vec<Vec<u32>>>>,
    ) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        let mut touched = false;
        let r = self.pass(batch, routes, &mut touched);
        if r.is_err() && touched {
            batch.iter_mut().for_each(|s| s.cache.clear());
        }
        r
    }

    fn pass(
        &self,
        batch: &mut [Segment<'_>],
        mut routes: Option<&mut Vec<Vec<Vec<u32>>>>,
        touched: &mut bool,
    ) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        let c = &self.config;
        let spans = batch::spans(batch, "Qwen3::forward")?;
        let (cos, sin) = batch::rope_tables(&self.rope, batch, 1.0)?;
        let mut x: Tensor<axes![seq, hidden]> = self.embed.lookup(&batch::tokens(batch))?;
        if c.embed_norm {
            x = x.rms_norm::<hidden>(None, c.rms_eps)?;
        }
        for b in &self.blocks {
            let h = x.rms_norm::<hidden>(b.attn_norm.as_ref(), c.rms_eps)?;
            let a = match &b.mixer {
                Mixer::Attention(a) => self.attention(b.slot, a, &h, &cos, &sin, &spans, batch)?,
                Mixer::DeltaNet(d) => {
                    *touched = true;
                    self.deltanet(b.slot, d, &h, &spans, batch)?
                }
            };
            x = x.add(&a)?;
            let h = x.rms_norm::<hidden>(b.ffn_norm.as_ref(), c.rms_eps)?;
            let m = match &b.ffn {
                Ffn::Dense(mlp) => mlp.forward(&h)?,
                Ffn::Relu2(mlp) => mlp.forward(&h)?,
                Ffn::Moe(moe) => {
                    let (y, chosen) = moe.forward(&h)?;
                    if let Some(r) = routes.as_deref_mut() {
                        r.push(chosen);
                    }
                    y
                }
            };
            x = x.add(&m)?;
        }
        // The model's own drafter follows every sequence that carries its state.
        if let Some(nx) = self.nextn.as_ref().filter(|_| batch.iter().any(|s| s.cache.has_draft())) {
            let xn = x.rms_norm::<hidden>(self.norm.as_ref(), c.rms_eps)?;
            for (s, &(at, n)) in batch.iter_mut().zip(&spans) {
                if s.cache.has_draft() {
                    self.nextn_follow(nx, s, &xn.narrow::<seq>(at, n)?)?;
                }
            }
        }
        let logits = batch::logits(x, &spans, batch, |x| {
            let logits = lm_head(x, self.norm.as_ref(), c.rms_eps, self.output.as_ref(), &self.embed)?;
            match c.logit_softcap {
                Some(cap) => logits.softcap(cap),
                None => Ok(logits),
            }
        })?;
        batch::finish(batch, logits, c.vocab)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
        &self,
        layer: usize,
        a: &Attention,
        x: &Tensor<axes![seq, hidden]>,
        cos: &Tensor<axes![seq, head_dim]>,
        sin: &Tensor<axes![seq, head_dim]>,
        spans: &[(usize, usize)],
        batch: &mut [Segment<'_>],
    ) -> Result<Tensor<axes![seq, hidden]>> {
        let c = &self.config;
        let (nkv, hd) = (c.kv_heads, c.head_dim);
        let g = c.heads / nkv;
        // Query head `kv * g + j` attends with kv head `kv`: split `heads` into (kv_head, group).
        // q, k and v as one group of products (one parallel region, one activation quantization).
        let mut group = ProductGroup::new();
        let (hq, hk, hv) = (group.push(&a.q, x)?, group.push(&a.k, x)?, group.push(&a.v, x)?);
        let mut out = group.run()?;
        let (mut q, mut k, mut v) = (out.take(hq)?, out.take(hk)?, out.take(hv)?);
        if let Some(b) = &a.bias {
            (q, k, v) = (q.add(&b.q)?, k.add(&b.k)?, v.add(&b.v)?);
        }
        // With an output gate each head's row holds its query, then its gate.
        let (mut q, gate) = if c.attn_gate {
            let qg = q.split_axis::<q_flat, axes![kv_head, group, head_dim]>(&[nkv, g, 2 * hd])?;
            (qg.narrow::<head_dim>(0, hd)?, Some(qg.narrow::<head_dim>(hd, hd)?.sigmoid()?))
        } else {
            (q.split_axis::<q_flat, axes![kv_head, group, head_dim]>(&[nkv, g, hd])?, None)
        };
        let mut k = k.split_axis::<kv_flat, axes![kv_head, head_dim]>(&[nkv, hd])?;
        let v = v.split_axis::<kv_flat, axes![kv_head, head_dim]>(&[nkv, hd])?;
        // Plain (weightless) q/k norms commute with the rotation (it keeps each head's
        // length), so nanochat's rotate-then-norm order is this norm-then-rotate one.
        if c.qk_norm {
            q = q.rms_norm::<head_dim>(a.q_norm.as_ref(), c.rms_eps)?;
            k = k.rms_norm::<head_dim>(a.k_norm.as_ref(), c.rms_eps)?;
        }
        let q = q.rope(cos, sin, c.rope_style)?;
        let k = k.rope(cos, sin, c.rope_style)?;
        // Each sequence writes its rows' keys and values and attends over its own cache.
        let o = batch::per_segment(&q, spans, batch, |q, (at, n), cache| {
            let start = cache.len();
            let (k, v) = (k.narrow::<seq>(at, n)?, v.narrow::<seq>(at, n)?);
            cache.write(layer, &k.permute()?, &v.permute()?)?;
            let mask = match c.sliding_window {
                Some(window) => Mask::Sliding { start, window },
                None => Mask::Causal(start),
            };
            cache.attend_masked::<head_dim, head_dim>(layer, q, Values::Own, 1.0 / (hd as f32).sqrt(), n, mask)
        })?;
        let o = match gate {
            Some(gate) => o.mul(&gate)?,
            None => o,
        };
        a.o.forward(&o.merge_axes::<axes![kv_head, group, head_dim], q_flat>()?)
    }

    /// A Gated DeltaNet layer over `x` (every row of the batch): the projections take all
    /// rows, the convolution and the delta rule run per sequence from its cache's states
    /// (`slot`: which recurrent layer).
    fn deltanet(
        &self,
        slot: usize,
        d: &DeltaNet,
        x: &Tensor<axes![seq, hidden]>,
        spans: &[(usize, usize)],
        batch: &mut [Segment<'_>],
    ) -> Result<Tensor<axes![seq, hidden]>> {
        let c = &self.config;
        let dn = c.deltanet.as_ref().ok_or(FucinaError::InvalidArgument {
            op: "Qwen3::forward",
            msg: "a Gated DeltaNet layer in a model without its config".into(),
        })?;
        let (nk, nv, dk, dv) = (dn.k_heads, dn.v_heads, dn.head_k, dn.head_v);
        let mixed = d.qkv.forward(x)?;
        let beta = d.beta.forward(x)?.sigmoid()?;
        let decay = d.alpha.forward(x)?.add(&d.dt_bias)?.softplus()?.mul(&d.a)?;
        let opts = DeltaOptions { scale: 1.0 / (dk as f32).sqrt(), map: HeadMap::Tiled, form: DeltaForm::Auto };
        let o = batch::per_segment(&mixed, spans, batch, |m, (at, n), cache| {
            let (conv, state) = cache.recurrent_mut(slot)?;
            let m = causal_conv1d(m, &d.conv, conv)?.silu()?;
            let heads = |at: usize, n: usize, width: usize| -> Result<Tensor<axes![seq, lin_k_head, lin_k_dim]>> {
                m.narrow::<conv_ch>(at, n * width)?
                    .split_axis::<conv_ch, axes![lin_k_head, lin_k_dim]>(&[n, width])?
                    .l2_norm::<lin_k_dim>(c.rms_eps)
            };
            let q = heads(0, nk, dk)?;
            let k = heads(nk * dk, nk, dk)?;
            let v = m
                .narrow::<conv_ch>(2 * nk * dk, nv * dv)?
                .split_axis::<conv_ch, axes![lin_v_head, lin_v_dim]>(&[nv, dv])?;
            let (g, b) = (decay.narrow::<seq>(at, n)?, beta.narrow::<seq>(at, n)?);
            gated_delta_rule(&q, &k, &v, &g, &b, opts, state)
        })?;
        let z = d.gate.forward(x)?.split_axis::<lin_v_flat, axes![lin_v_head, lin_v_dim]>(&[nv, dv])?;
        let y = o.rms_norm::<lin_v_dim>(Some(&d.norm), c.rms_eps)?.mul(&z.silu()?)?;
        d.out.forward(&y.merge_axes::<axes![lin_v_head, lin_v_dim], lin_v_flat>()?)
    }
}

/// Layer `l`'s block from `f` (llama.cpp's names): its norms, its mixer (attention or Gated
/// DeltaNet) and its feed-forward (dense, squared-ReLU or experts).
pub(crate) fn load_block(f: &ModelFile, c: &Qwen3Config, l: usize) -> Result<Block> {
    let (h, qd, kvd) = (c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim);
    // With an output gate the query projection yields each head's query and gate.
    let qd_full = if c.attn_gate { 2 * qd } else { qd };
    let norm = |name: &str, width: usize| -> Result<Option<Tensor<axes![hidden]>>> {
        if c.norm_weights {
            Ok(Some(f.dense(name, &[width])?))
        } else {
            Ok(None)
        }
    };
    let n = |s: &str| format!("blk.{l}.{s}.weight");
    let b = |s: &str| format!("blk.{l}.{s}.bias");
    Ok(Block {
        attn_norm: norm(&n("attn_norm"), h)?,
        mixer: if c.is_recurrent(l) {
            Mixer::DeltaNet(DeltaNet::load(f, c, l)?)
        } else {
            Mixer::Attention(Attention {
                q: f.matrix(&n("attn_q"), qd_full, h)?,
                k: f.matrix(&n("attn_k"), kvd, h)?,
                v: f.matrix(&n("attn_v"), kvd, h)?,
                o: f.matrix(&n("attn_output"), h, qd)?,
                q_norm: if c.qk_norm && c.norm_weights {
                    Some(f.dense(&n("attn_q_norm"), &[c.head_dim])?)
                } else {
                    None
                },
                k_norm: if c.qk_norm && c.norm_weights {
                    Some(f.dense(&n("attn_k_norm"), &[c.head_dim])?)
                } else {
                    None
                },
                bias: if c.qkv_bias {
                    Some(QkvBias {
                        q: f.dense(&b("attn_q"), &[qd_full])?,
                        k: f.dense(&b("attn_k"), &[kvd])?,
                        v: f.dense(&b("attn_v"), &[kvd])?,
                    })
                } else {
                    None
                },
            })
        },
        slot: (0..l).filter(|&i| c.is_recurrent(i) == c.is_recurrent(l)).count(),
        // GLM-4.5's pre-feed-forward norm keeps the name of its Hugging Face
        // weight (`post_attention_layernorm`) in llama.cpp's files.
        ffn_norm: if f.has(&n("post_attention_norm")) && !f.has(&n("ffn_norm")) {
            norm(&n("post_attention_norm"), h)?
        } else {
            norm(&n("ffn_norm"), h)?
        },
        ffn: match &c.moe {
            Some(m) if c.is_moe(l) => {
                let (e, w) = (m.experts, m.expert_ffn);
                // Every expert stays resident here (no streaming), so each is
                // repacked for this CPU like a dense matrix.
                let gates = f.matrices(&n("ffn_gate_exps"), e, w, h)?;
                let ups = f.matrices(&n("ffn_up_exps"), e, w, h)?;
                let downs = f.matrices(&n("ffn_down_exps"), e, h, w)?;
                let gates = gates.into_iter().map(|x| f.prepare(x)).collect::<Result<Vec<_>>>()?;
                let ups = ups.into_iter().map(|x| f.prepare(x)).collect::<Result<Vec<_>>>()?;
                let downs = downs.into_iter().map(|x| f.prepare(x)).collect::<Result<Vec<_>>>()?;
                let experts =
                    gates.into_iter().zip(ups).zip(downs).map(|((gate, up), down)| Mlp { gate, up, down }).collect();
                let shared = if m.shared > 0 { Some(Mlp::load(f, l, "_shexp", m.shared_ffn, h)?) } else { None };
                let shared_gate = if m.shared_gate { Some(f.matrix(&n("ffn_gate_inp_shexp"), 1, h)?) } else { None };
                let bias = format!("blk.{l}.exp_probs_b.bias");
                Ffn::Moe(Box::new(Moe {
                    router: f.matrix(&n("ffn_gate_inp"), e, h)?,
                    bias: if f.has(&bias) { Some(f.dense(&bias, &[e])?) } else { None },
                    experts,
                    shared,
                    shared_gate,
                    routing: m.routing,
                }))
            }
            _ if c.ffn_act == FfnAct::Relu2 => Ffn::Relu2(Relu2Mlp {
                up: f.matrix(&n("ffn_up"), c.ffn, h)?,
                down: f.matrix(&n("ffn_down"), h, c.ffn)?,
            }),
            _ => Ffn::Dense(Mlp::load(f, l, "", c.ffn, h)?),
        },
    })
}

impl DeltaNet {
    /// Layer `l`'s Gated DeltaNet from `f` (llama.cpp's `qwen35` names).
    pub fn load(f: &ModelFile, c: &Qwen3Config, l: usize) -> Result<DeltaNet> {
        let d = c.deltanet.as_ref().ok_or(FucinaError::Format {
            format: "gguf",
            msg: format!("layer {l} is recurrent in a file without Gated DeltaNet sizes"),
        })?;
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        let (h, vflat) = (c.hidden, d.v_heads * d.head_v);
        Ok(DeltaNet {
            qkv: f.matrix(&n("attn_qkv"), d.conv_dim(), h)?,
            gate: f.matrix(&n("attn_gate"), vflat, h)?,
            beta: f.matrix(&n("ssm_beta"), d.v_heads, h)?,
            alpha: f.matrix(&n("ssm_alpha"), d.v_heads, h)?,
            conv: f.dense(&n("ssm_conv1d"), &[d.conv_dim(), d.conv_kernel])?,
            dt_bias: f.dense(&format!("blk.{l}.ssm_dt.bias"), &[d.v_heads])?,
            a: f.dense(&format!("blk.{l}.ssm_a"), &[d.v_heads])?,
            norm: f.dense(&n("ssm_norm"), &[d.head_v])?,
            out: f.matrix(&n("ssm_out"), h, vflat)?,
        })
    }
}

impl Mlp {
    /// Layer `layer`'s SwiGLU of inner width `width` from `f`: `blk.L.ffn_{gate,up,down}<suffix>`
    /// (`""` for a dense layer, `"_shexp"` for shared experts).
    pub fn load(f: &ModelFile, layer: usize, suffix: &str, width: usize, hidden: usize) -> Result<Mlp> {
        let n = |s: &str| format!("blk.{layer}.ffn_{s}{suffix}.weight");
        Ok(Mlp {
            gate: f.matrix(&n("gate"), width, hidden)?,
            up: f.matrix(&n("up"), width, hidden)?,
            down: f.matrix(&n("down"), hidden, width)?,
        })
    }

    /// `down(silu(gate x) * up x)`, the gate and up projections as one group of products
    /// ([`Mlp::forward_group`] of this block alone).
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>) -> Result<Tensor<axes![seq, hidden]>> {
        Mlp::forward_group(&[self], &[x])?.pop().ok_or_else(|| FucinaError::InvalidArgument {
            op: "Mlp::forward",
            msg: "a group of one block gave no output".into(),
        })
    }

    /// [`forward`](Mlp::forward) of each block on its own input (`mlps[i]` on `xs[i]`), the
    /// products of all of them as two groups (every gate and up projection, then every down
    /// projection: [`ProductGroup`]): the same values as one `forward` each, with
    /// two parallel regions in all instead of three per block.
    pub fn forward_group(mlps: &[&Mlp], xs: &[&Tensor<axes![seq, hidden]>]) -> Result<Vec<Tensor<axes![seq, hidden]>>> {
        let mut group = ProductGroup::new();
        let gate_up = mlps
            .iter()
            .zip(xs)
            .map(|(m, x)| Ok((group.push(&m.gate, x)?, group.push(&m.up, x)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut out = group.run()?;
        let inner: Vec<Tensor<axes![seq, ffn]>> =
            gate_up.into_iter().map(|(g, u)| out.take(g)?.silu()?.mul(&out.take(u)?)).collect::<Result<_>>()?;
        let mut group = ProductGroup::new();
        let down = mlps.iter().zip(&inner).map(|(m, h)| group.push(&m.down, h)).collect::<Result<Vec<_>>>()?;
        let mut out = group.run()?;
        down.into_iter().map(|d| out.take(d)).collect()
    }

    /// A mixture-of-experts layer's blocks run as one group ([`Mlp::forward_group`]: two
    /// parallel regions for the layer): every routed expert with rows (`experts(e)`, on its
    /// rows of `x` gathered) and the `shared` block (on all of `x`). Returns `[seq, hidden]`
    /// row-major: the shared block's output passed through `shared_out` (zeros without one),
    /// plus each expert's output rows times their weights, expert after expert as
    /// [`moe::combine`] adds them.
    pub fn moe_grouped<'a>(
        x: &Tensor<axes![seq, hidden]>,
        assigned: &moe::Assignment,
        experts: impl Fn(usize) -> Result<&'a Mlp>,
        shared: Option<&'a Mlp>,
        shared_out: impl FnOnce(Tensor<axes![seq, hidden]>) -> Result<Vec<f32>>,
    ) -> Result<Vec<f32>> {
        let (s, h) = (x.size::<seq>(), x.size::<hidden>());
        let (active, xs) = moe::gather(x, assigned)?;
        let mut mlps: Vec<&Mlp> = active.iter().map(|&e| experts(e)).collect::<Result<_>>()?;
        let mut inputs: Vec<&Tensor<axes![seq, hidden]>> = xs.iter().collect();
        if let Some(m) = shared {
            mlps.push(m);
            inputs.push(x);
        }
        let mut outs = Mlp::forward_group(&mlps, &inputs)?;
        let shared = if shared.is_some() { outs.pop() } else { None };
        let mut y = match shared {
            Some(out) => shared_out(out)?,
            None => vec![0.0f32; s * h],
        };
        let outs: Vec<Vec<f32>> = outs.iter().map(|t| t.to_f32_vec()).collect();
        moe::scatter_add(&mut y, h, assigned, &active, &outs);
        Ok(y)
    }
}

/// The output of an expert layer and, per row, the experts chosen (ascending ids).
pub type Routed = (Tensor<axes![seq, hidden]>, Vec<Vec<u32>>);

impl Moe {
    /// Routes each row of `x` to its top experts and sums their outputs, weighted, with the
    /// shared experts' output. Returns the result and, per row, the chosen experts
    /// (ascending ids).
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>) -> Result<Routed> {
        let (s, h) = (x.size::<seq>(), x.size::<hidden>());
        let logits = self.router.forward(x)?.to_f32_vec();
        let bias = self.bias.as_ref().map(|b| b.to_f32_vec());
        let n = self.experts.len();
        let (assigned, chosen) =
            moe::assign(n, logits.chunks_exact(n).map(|lg| route(&self.routing, bias.as_deref(), lg)));
        let shared_out = |out: Tensor<axes![seq, hidden]>| -> Result<Vec<f32>> {
            Ok(match &self.shared_gate {
                Some(g) => out.mul(&g.forward(x)?.sigmoid()?.sum::<axes![gate_out]>()?)?.to_f32_vec(),
                None => out.to_f32_vec(),
            })
        };
        if moe::few_rows(&assigned) {
            let y = Mlp::moe_grouped(x, &assigned, |e| Ok(&self.experts[e]), self.shared.as_ref(), shared_out)?;
            return Ok((Tensor::from_vec(y, &[s, h])?, chosen));
        }
        let mut y = match &self.shared {
            Some(m) => shared_out(m.forward(x)?)?,
            None => vec![0.0f32; s * h],
        };
        moe::combine(x, &assigned, &mut y, |e, xe| self.experts[e].forward(xe))?;
        Ok((Tensor::from_vec(y, &[s, h])?, chosen))
    }
}

impl crate::llm::generate::CausalLm for Qwen3 {
    fn vocab_size(&self) -> usize {
        self.config.vocab
    }

    fn context_length(&self) -> usize {
        self.config.context_length
    }

    fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
        Qwen3::new_cache(self, capacity, kv)
    }

    fn forward(&self, tokens: &[u32], cache: &mut KvCache, rows: LogitRows) -> Result<Tensor<axes![seq, vocab]>> {
        Qwen3::forward(self, tokens, cache, rows)
    }

    fn forward_batch(&self, batch: &mut [Segment<'_>]) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        self.forward_batch_traced(batch, None)
    }

    fn enable_drafts(&self, cache: &mut KvCache) -> Result<bool> {
        self.attach_drafter(cache)
    }

    fn draft(&self, cache: &mut KvCache, history: &[u32], max: usize) -> Result<Vec<u32>> {
        Qwen3::draft(self, cache, history, max)
    }
}
