//! Gemma 4 in the named-axes DSL, dense and MoE, from llama.cpp's `gemma4` files: the
//! embedding scaled by `sqrt(hidden)`; per-layer embeddings (a token's own slice for each
//! layer, mixed with a projection of the embedding) that each block gates into its residual
//! stream; blocks whose attention alternates between a sliding window and the whole context,
//! with each kind's own head width, key/value heads and RoPE (the global layers' rotation
//! "proportional", over part of each head, through the file's `rope_freqs`); RMSNorm on
//! queries and keys (weighted) and values (plain), attention scale 1; the last layers reusing
//! the keys and values of the last earlier layer of their kind; sandwich norms around
//! attention and the GELU-tanh GeGLU; in the MoE variant a GeGLU and routed experts side by
//! side; a per-layer output scalar; the tied head with logit soft-capping. Matrices stay in
//! the file's format ([`QWeight`]); norms are f32 tensors.

use super::config::Gemma4Config;
use crate::llm::batch::{self, LogitRows, Segment};
use crate::llm::head::lm_head;
use crate::llm::kv_cache::{KvCache, KvType, LayerShape, Values};
use crate::llm::moe::{assign, combine, route, Gating, Routing};
use crate::llm::rope::Rope;
use crate::llm::weights::ModelFile;
use fucina::ops::{Mask, RopeStyle};
use fucina::prelude::*;
use fucina::quant::QWeight;

axis!(pub q_flat, pub kv_flat, pub ple_flat, pub ple_layer, pub ple, pub exp_ffn);

/// The key and value projections of a layer that computes its own (the layers before the
/// KV-sharing ones).
#[derive(Module)]
pub struct KeyValue {
    /// `[kv_flat, hidden]` key projection.
    pub k: QWeight<kv_flat, hidden>,
    /// `[kv_flat, hidden]` value projection; `None`: the values are the keys before their
    /// norm and rotation (`attention_k_eq_v`).
    pub v: Option<QWeight<kv_flat, hidden>>,
    /// RMSNorm weight of each key head.
    pub k_norm: Tensor<axes![head_dim]>,
}

/// One block's attention.
#[derive(Module)]
pub struct Attention {
    /// `[q_flat, hidden]` query projection.
    pub q: QWeight<q_flat, hidden>,
    /// RMSNorm weight of each query head.
    pub q_norm: Tensor<axes![head_dim]>,
    /// Keys and values, or `None` in a layer that reuses an earlier layer's.
    pub kv: Option<KeyValue>,
    /// `[hidden, q_flat]` output projection.
    pub o: QWeight<hidden, q_flat>,
}

/// The GELU-tanh GeGLU: `down(gelu_tanh(gate x) * up x)`.
#[derive(Module)]
pub struct GeGlu {
    /// `[ffn, hidden]` gate projection.
    pub gate: QWeight<ffn, hidden>,
    /// `[ffn, hidden]` up projection.
    pub up: QWeight<ffn, hidden>,
    /// `[hidden, ffn]` down projection.
    pub down: QWeight<hidden, ffn>,
}

impl GeGlu {
    /// `down(gelu_tanh(gate x) * up x)`.
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>) -> Result<Tensor<axes![seq, hidden]>> {
        let g = self.gate.forward(x)?.gelu_tanh()?;
        self.down.forward(&g.mul(&self.up.forward(x)?)?)
    }
}

/// A routed expert: a GeGLU whose gate and up projections are one matrix (`exp_ffn` holds
/// the gate's rows, then the up's), as the converter fuses them.
#[derive(Module)]
pub struct Expert {
    /// `[2 width, hidden]`: gate rows, then up rows.
    pub gate_up: QWeight<exp_ffn, hidden>,
    /// `[hidden, width]` down projection.
    pub down: QWeight<hidden, exp_ffn>,
}

impl Expert {
    /// `down(gelu_tanh(gate x) * up x)`.
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>) -> Result<Tensor<axes![seq, hidden]>> {
        let w = self.down.cols();
        let gu = self.gate_up.forward(x)?;
        let g = gu.narrow::<exp_ffn>(0, w)?.gelu_tanh()?;
        self.down.forward(&g.mul(&gu.narrow::<exp_ffn>(w, w)?)?)
    }
}

/// The routed half of a MoE block. The router reads the block's residual stream through a
/// plain RMSNorm scaled by `router_scale / sqrt(hidden)`; softmax, top-k, renormalized, each
/// expert's output scaled by its own factor; the experts read the stream through their own
/// RMSNorm.
#[derive(Module)]
pub struct Moe {
    /// `[expert, hidden]` router.
    pub router: QWeight<expert, hidden>,
    /// Per-channel scale of the router's input.
    pub router_scale: Tensor<axes![hidden]>,
    /// Per-expert factor on its output.
    pub expert_scale: Tensor<axes![expert]>,
    /// RMSNorm weight of the experts' input (`pre_ffw_norm_2`).
    pub pre_norm: Tensor<axes![hidden]>,
    /// RMSNorm weight of the dense GeGLU's output (`post_ffw_norm_1`).
    pub dense_norm: Tensor<axes![hidden]>,
    /// RMSNorm weight of the experts' output (`post_ffw_norm_2`).
    pub routed_norm: Tensor<axes![hidden]>,
    /// The experts.
    pub experts: Vec<Expert>,
    /// Experts per token, softmax, renormalized.
    #[module(skip)]
    pub routing: Routing,
}

/// A block's per-layer-embedding input: `norm(proj(gelu_tanh(gate x) * e_l))` added to the
/// stream, `e_l` being the layer's slice of the per-layer embeddings.
#[derive(Module)]
pub struct PerLayerInput {
    /// `[ple, hidden]` gate.
    pub gate: QWeight<ple, hidden>,
    /// `[hidden, ple]` projection back to the stream.
    pub proj: QWeight<hidden, ple>,
    /// RMSNorm weight of the projection.
    pub norm: Tensor<axes![hidden]>,
}

/// The per-layer embeddings of the model: each token's row holds a slice per layer, mixed
/// with a projection of the scaled embedding.
#[derive(Module)]
pub struct PerLayerEmbedding {
    /// `[vocab, ple_flat]` (ple_flat = layers × ple).
    pub embed: QWeight<vocab, ple_flat>,
    /// `[ple_flat, hidden]` projection of the embedding.
    pub proj: QWeight<ple_flat, hidden>,
    /// RMSNorm weight of each layer's slice of the projection.
    pub norm: Tensor<axes![ple]>,
}

/// One Gemma 4 block.
#[derive(Module)]
pub struct Block {
    /// RMSNorm weight before attention.
    pub attn_norm: Tensor<axes![hidden]>,
    /// Attention.
    pub attn: Attention,
    /// RMSNorm weight of attention's output.
    pub post_attn_norm: Tensor<axes![hidden]>,
    /// RMSNorm weight before the feed-forward.
    pub ffn_norm: Tensor<axes![hidden]>,
    /// The dense GeGLU (the shared half of a MoE block).
    pub ffn: GeGlu,
    /// The routed experts of a MoE block.
    pub moe: Option<Moe>,
    /// RMSNorm weight of the feed-forward's output.
    pub post_ffn_norm: Tensor<axes![hidden]>,
    /// The per-layer-embedding input, if the model has them.
    pub per_layer: Option<PerLayerInput>,
    /// Factor on the block's output (`layer_output_scale`), 1 when the file has none.
    #[module(skip)]
    pub out_scale: f32,
    /// The cache slot the block's attention writes (its own) or reads (an earlier layer's).
    #[module(skip)]
    pub slot: usize,
    /// Sliding-window attention (otherwise global).
    #[module(skip)]
    pub sliding: bool,
}

/// A Gemma 4 decoder. The `Module` parameters are the f32 norm weights and scales; the
/// matrices are frozen data in the file's format.
#[derive(Module)]
pub struct Gemma4 {
    /// Hyper-parameters.
    #[module(skip)]
    pub config: Gemma4Config,
    /// `[vocab, hidden]` token embedding (also the output projection when tied).
    pub embed: QWeight<vocab, hidden>,
    /// Per-layer embeddings, if the model has them.
    pub per_layer: Option<PerLayerEmbedding>,
    /// The blocks, first to last.
    pub blocks: Vec<Block>,
    /// Final RMSNorm weight.
    pub norm: Tensor<axes![hidden]>,
    /// `[vocab, hidden]` output projection, `None` when tied to the embedding.
    pub output: Option<QWeight<vocab, hidden>>,
    #[module(skip)]
    rope: Rope,
    #[module(skip)]
    rope_swa: Rope,
}

impl Gemma4 {
    /// Loads a `gemma4` GGUF (llama.cpp's tensor names), leaving the matrices in the map.
    pub fn load(f: &ModelFile) -> Result<Gemma4> {
        let c = Gemma4Config::from_file(f)?;
        let h = c.hidden;
        let bad = |msg: String| FucinaError::Format { format: "gguf", msg };
        let blocks = (0..c.layers)
            .map(|l| -> Result<Block> {
                let n = |s: &str| format!("blk.{l}.{s}.weight");
                let hd = c.head_dim_of(l);
                let slot = c.kv_slot(l)?;
                let kv_heads = c.kv_heads[slot];
                let (qd, kvd) = (c.heads * hd, kv_heads * hd);
                let kv = if l < c.first_shared {
                    Some(KeyValue {
                        k: f.matrix(&n("attn_k"), kvd, h)?,
                        v: if f.has(&n("attn_v")) { Some(f.matrix(&n("attn_v"), kvd, h)?) } else { None },
                        k_norm: f.dense(&n("attn_k_norm"), &[hd])?,
                    })
                } else {
                    None
                };
                let moe = match &c.moe {
                    Some(m) => {
                        let (e, w) = (m.experts, m.expert_ffn);
                        let gate_up = if f.has(&n("ffn_gate_up_exps")) {
                            f.matrices(&n("ffn_gate_up_exps"), e, 2 * w, h)?
                        } else {
                            return Err(bad(format!(
                                "layer {l}: experts with separate gate and up matrices (only the fused \
                                 `ffn_gate_up_exps` of llama.cpp's converter is read)"
                            )));
                        };
                        let downs = f.matrices(&n("ffn_down_exps"), e, h, w)?;
                        let experts = gate_up
                            .into_iter()
                            .zip(downs)
                            .map(|(gu, d)| Ok(Expert { gate_up: f.prepare(gu)?, down: f.prepare(d)? }))
                            .collect::<Result<Vec<_>>>()?;
                        Some(Moe {
                            router: f.matrix(&n("ffn_gate_inp"), e, h)?,
                            router_scale: f.dense(&format!("blk.{l}.ffn_gate_inp.scale"), &[h])?,
                            expert_scale: f.dense(&format!("blk.{l}.ffn_down_exps.scale"), &[e])?,
                            pre_norm: f.dense(&n("pre_ffw_norm_2"), &[h])?,
                            dense_norm: f.dense(&n("post_ffw_norm_1"), &[h])?,
                            routed_norm: f.dense(&n("post_ffw_norm_2"), &[h])?,
                            experts,
                            routing: Routing {
                                used: m.used,
                                gating: Gating::Softmax,
                                groups: 1,
                                groups_used: 1,
                                norm_topk: true,
                                scale: 1.0,
                            },
                        })
                    }
                    None => None,
                };
                let per_layer = if c.per_layer > 0 {
                    Some(PerLayerInput {
                        gate: f.matrix(&n("inp_gate"), c.per_layer, h)?,
                        proj: f.matrix(&n("proj"), h, c.per_layer)?,
                        norm: f.dense(&n("post_norm"), &[h])?,
                    })
                } else {
                    None
                };
                let out_scale = if f.has(&n("layer_output_scale")) {
                    let s: Tensor<axes![hidden]> = f.dense(&n("layer_output_scale"), &[1])?;
                    let s = s.to_f32_vec()[0];
                    if !s.is_finite() {
                        return Err(bad(format!("layer {l}: output scale {s}")));
                    }
                    s
                } else {
                    1.0
                };
                Ok(Block {
                    attn_norm: f.dense(&n("attn_norm"), &[h])?,
                    attn: Attention {
                        q: f.matrix(&n("attn_q"), qd, h)?,
                        q_norm: f.dense(&n("attn_q_norm"), &[hd])?,
                        kv,
                        o: f.matrix(&n("attn_output"), h, qd)?,
                    },
                    post_attn_norm: f.dense(&n("post_attention_norm"), &[h])?,
                    ffn_norm: f.dense(&n("ffn_norm"), &[h])?,
                    ffn: GeGlu {
                        gate: f.matrix(&n("ffn_gate"), c.ffn[l], h)?,
                        up: f.matrix(&n("ffn_up"), c.ffn[l], h)?,
                        down: f.matrix(&n("ffn_down"), h, c.ffn[l])?,
                    },
                    moe,
                    post_ffn_norm: f.dense(&n("post_ffw_norm"), &[h])?,
                    per_layer,
                    out_scale,
                    slot,
                    sliding: c.sliding[l],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let per_layer = if c.per_layer > 0 {
            let flat = c.layers * c.per_layer; // checked by the config
            Some(PerLayerEmbedding {
                // Read a row per token: the file's bytes, not a repacked copy.
                embed: f.table("per_layer_token_embd.weight", c.vocab, flat)?,
                proj: f.matrix("per_layer_model_proj.weight", flat, h)?,
                norm: f.dense("per_layer_proj_norm.weight", &[c.per_layer])?,
            })
        } else {
            None
        };
        // The global layers' "proportional" RoPE: frequencies over the whole head, each pair's
        // divided by its `rope_freqs` factor (huge for the pairs left unrotated).
        let factors = f.rope_factors(c.rope_dims / 2)?;
        let rope = Rope::new(c.rope_dims, c.rope_theta)?.map_freqs(|i, x| x / factors[i]);
        let rope_swa = Rope::new(c.rope_dims_swa, c.rope_theta_swa)?;
        Ok(Gemma4 {
            embed: f.matrix("token_embd.weight", c.vocab, h)?,
            per_layer,
            blocks,
            norm: f.dense("output_norm.weight", &[h])?,
            output: if f.has("output.weight") { Some(f.matrix("output.weight", c.vocab, h)?) } else { None },
            rope,
            rope_swa,
            config: c,
        })
    }

    /// A KV cache for this model holding `capacity` positions (at most the context length):
    /// one slot per layer that computes keys and values, each with its layer's heads and
    /// width.
    pub fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context_length {
            return Err(FucinaError::InvalidArgument {
                op: "Gemma4::new_cache",
                msg: format!("{capacity} positions exceed the model's context length of {}", c.context_length),
            });
        }
        let shapes: Vec<LayerShape> = (0..c.first_shared)
            .map(|l| LayerShape { heads: c.kv_heads[l], key_dim: c.head_dim_of(l), value_dim: c.head_dim_of(l) })
            .collect();
        KvCache::with_shapes(&shapes, capacity, kv)
    }

    /// Runs `tokens` through the model after the positions already in `cache`, appends
    /// their keys and values, and returns the logits `[seq, vocab]` the `rows` ask for.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, rows: LogitRows) -> Result<Tensor<axes![seq, vocab]>> {
        batch::single(tokens, cache, rows, |b| self.forward_batch(b))
    }

    /// One pass over several sequences (see [`crate::llm::batch`]): every matrix product
    /// takes the rows of all of them, attention runs per sequence over its own cache.
    pub fn forward_batch(&self, batch: &mut [Segment<'_>]) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        let c = &self.config;
        let spans = batch::spans(batch, "Gemma4::forward")?;
        let global = batch::rope_tables(&self.rope, batch, 1.0)?;
        let local = batch::rope_tables(&self.rope_swa, batch, 1.0)?;
        let tokens = batch::tokens(batch);
        let mut x: Tensor<axes![seq, hidden]> = self.embed.lookup(&tokens)?.scale((c.hidden as f32).sqrt())?;
        let per_layer = match &self.per_layer {
            Some(p) => Some(self.per_layer_inputs(p, &tokens, &x)?),
            None => None,
        };
        for (l, b) in self.blocks.iter().enumerate() {
            let (cos, sin) = if b.sliding { (&local.0, &local.1) } else { (&global.0, &global.1) };
            let h = x.rms_norm::<hidden>(Some(&b.attn_norm), c.rms_eps)?;
            let a = self.attention(b, &h, cos, sin, &spans, batch)?;
            x = x.add(&a.rms_norm::<hidden>(Some(&b.post_attn_norm), c.rms_eps)?)?;
            let h = x.rms_norm::<hidden>(Some(&b.ffn_norm), c.rms_eps)?;
            let mut m = b.ffn.forward(&h)?;
            if let Some(moe) = &b.moe {
                let routed = moe.forward(&x, c.rms_eps)?.0;
                m = m
                    .rms_norm::<hidden>(Some(&moe.dense_norm), c.rms_eps)?
                    .add(&routed.rms_norm::<hidden>(Some(&moe.routed_norm), c.rms_eps)?)?;
            }
            x = x.add(&m.rms_norm::<hidden>(Some(&b.post_ffn_norm), c.rms_eps)?)?;
            if let (Some(p), Some(inputs)) = (&b.per_layer, &per_layer) {
                let e = inputs.narrow::<ple_layer>(l, 1)?.sum::<axes![ple_layer]>()?;
                let g = p.gate.forward(&x)?.gelu_tanh()?.mul(&e)?;
                x = x.add(&p.proj.forward(&g)?.rms_norm::<hidden>(Some(&p.norm), c.rms_eps)?)?;
            }
            if b.out_scale != 1.0 {
                x = x.scale(b.out_scale)?;
            }
        }
        let logits = batch::logits(x, &spans, batch, |x| {
            let logits = lm_head(x, Some(&self.norm), c.rms_eps, self.output.as_ref(), &self.embed)?;
            match c.logit_softcap {
                Some(cap) => logits.softcap(cap),
                None => Ok(logits),
            }
        })?;
        batch::finish(batch, logits, c.vocab)
    }

    /// Every layer's per-layer input for the rows: the tokens' own slices (scaled by
    /// `sqrt(ple)`) plus the RMSNormed slices of the projected embedding `x` (scaled by
    /// `1/sqrt(hidden)`), the sum scaled by `1/sqrt(2)`.
    fn per_layer_inputs(
        &self,
        p: &PerLayerEmbedding,
        tokens: &[u32],
        x: &Tensor<axes![seq, hidden]>,
    ) -> Result<Tensor<axes![seq, ple_layer, ple]>> {
        let c = &self.config;
        let split = [c.layers, c.per_layer];
        let own = p
            .embed
            .lookup::<seq>(tokens)?
            .scale((c.per_layer as f32).sqrt())?
            .split_axis::<ple_flat, axes![ple_layer, ple]>(&split)?;
        let mixed = p
            .proj
            .forward(x)?
            .scale(1.0 / (c.hidden as f32).sqrt())?
            .split_axis::<ple_flat, axes![ple_layer, ple]>(&split)?
            .rms_norm::<ple>(Some(&p.norm), c.rms_eps)?;
        mixed.add(&own)?.scale(std::f32::consts::FRAC_1_SQRT_2)
    }

    /// Block `b`'s attention over `x` (every row of the batch), writing its keys and values
    /// into each sequence's cache unless it reuses an earlier layer's.
    fn attention(
        &self,
        b: &Block,
        x: &Tensor<axes![seq, hidden]>,
        cos: &Tensor<axes![seq, head_dim]>,
        sin: &Tensor<axes![seq, head_dim]>,
        spans: &[(usize, usize)],
        batch: &mut [Segment<'_>],
    ) -> Result<Tensor<axes![seq, hidden]>> {
        let c = &self.config;
        let a = &b.attn;
        let hd = if b.sliding { c.head_dim_swa } else { c.head_dim };
        let nkv = c.kv_heads[b.slot];
        let g = c.heads / nkv;
        let q =
            a.q.forward(x)?
                .split_axis::<q_flat, axes![kv_head, group, head_dim]>(&[nkv, g, hd])?
                .rms_norm::<head_dim>(Some(&a.q_norm), c.rms_eps)?
                .rope(cos, sin, RopeStyle::Halves)?;
        let kv = match &a.kv {
            Some(p) => {
                let k = p.k.forward(x)?;
                let v = match &p.v {
                    Some(v) => v.forward(x)?,
                    None => k.clone(),
                };
                let k = k
                    .split_axis::<kv_flat, axes![kv_head, head_dim]>(&[nkv, hd])?
                    .rms_norm::<head_dim>(Some(&p.k_norm), c.rms_eps)?
                    .rope(cos, sin, RopeStyle::Halves)?;
                let v = v
                    .split_axis::<kv_flat, axes![kv_head, head_dim]>(&[nkv, hd])?
                    .rms_norm::<head_dim>(None, c.rms_eps)?;
                Some((k, v))
            }
            None => None,
        };
        let o = batch::per_segment(&q, spans, batch, |q, (at, n), cache| {
            let start = cache.len();
            if let Some((k, v)) = &kv {
                let (k, v) = (k.narrow::<seq>(at, n)?, v.narrow::<seq>(at, n)?);
                cache.write(b.slot, &k.permute()?, &v.permute()?)?;
            }
            let mask = if b.sliding { Mask::Sliding { start, window: c.window } } else { Mask::Causal(start) };
            cache.attend_masked::<head_dim, head_dim>(b.slot, q, Values::Own, 1.0, n, mask)
        })?;
        a.o.forward(&o.merge_axes::<axes![kv_head, group, head_dim], q_flat>()?)
    }
}

/// The output of a MoE block's routed experts and, per row, the experts chosen (ascending
/// ids).
pub type Routed = (Tensor<axes![seq, hidden]>, Vec<Vec<u32>>);

impl Moe {
    /// Routes each row of the residual stream `x` and sums its experts' outputs, weighted.
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>, eps: f32) -> Result<Routed> {
        let (s, h) = (x.size::<seq>(), x.size::<hidden>());
        let r = x.rms_norm::<hidden>(None, eps)?.mul(&self.router_scale)?.scale(1.0 / (h as f32).sqrt())?;
        let logits = self.router.forward(&r)?.to_f32_vec();
        let n = self.experts.len();
        let (assigned, chosen) = assign(n, logits.chunks_exact(n).map(|lg| route(&self.routing, None, lg)));
        let scale = self.expert_scale.to_f32_vec();
        let xe = x.rms_norm::<hidden>(Some(&self.pre_norm), eps)?;
        let mut y = vec![0.0f32; s * h];
        combine(&xe, &assigned, &mut y, |e, xe| self.experts[e].forward(xe)?.scale(scale[e]))?;
        Ok((Tensor::from_vec(y, &[s, h])?, chosen))
    }
}

impl crate::llm::generate::CausalLm for Gemma4 {
    fn vocab_size(&self) -> usize {
        self.config.vocab
    }

    fn context_length(&self) -> usize {
        self.config.context_length
    }

    fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
        Gemma4::new_cache(self, capacity, kv)
    }

    fn forward(&self, tokens: &[u32], cache: &mut KvCache, rows: LogitRows) -> Result<Tensor<axes![seq, vocab]>> {
        Gemma4::forward(self, tokens, cache, rows)
    }

    fn forward_batch(&self, batch: &mut [Segment<'_>]) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        Gemma4::forward_batch(self, batch)
    }
}
