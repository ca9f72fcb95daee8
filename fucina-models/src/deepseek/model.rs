//! DeepSeek-V2/V3 in the DSL: multi-head latent attention (MLA) in its absorbed form over a
//! cache of compressed latents, dense SwiGLU layers first, then mixtures of experts with
//! shared experts and softmax (V2) or biased-sigmoid group-limited (V3) routing.
//!
//! Attention per layer, for queries `q = [q_nope, q_rope]` per head and the cached latent
//! `c` (`kv_lora` wide, RMS-normed) with the shared rotary key `k_rope`: the key of head `h`
//! is `[W_kb[h] c, k_rope]` and its value `W_vb[h] c`. Absorbing `W_kb` into the query
//! (`q_nope W_kb[h]`) and `W_vb` into the output makes attention a single-kv-head attention
//! over `[c, k_rope]`, so the cache holds `kv_lora + qk_rope` values per position for all
//! heads together, and keys and values are never decompressed.

use super::config::{DeepSeekConfig, MoeConfig};
use super::experts::{ExpertBudget, ExpertPlacement, ExpertStore};
use crate::llm::batch::{self, LogitRows, Segment};
use crate::llm::head::lm_head;
use crate::llm::kv_cache::{KvCache, KvType, Values};
use crate::llm::moe::route;
use crate::llm::rope::Rope;
use crate::llm::weights::ModelFile;
use crate::qwen3::model::Mlp;
use fucina::ops::RopeStyle;
use fucina::prelude::*;
use fucina::quant::{GgmlType, QWeight, QWeightStack};

axis!(pub latent, pub nope, pub rot, pub vdim, pub qlora, pub qk, pub q_flat, pub kv_flat, pub o_flat, pub lat_rot);

/// The query projection: plain, or through a normed low-rank bottleneck.
pub enum QProj {
    /// `[q_flat, hidden]`.
    Plain(QWeight<q_flat, hidden>),
    /// `b(norm(a x))`.
    LowRank {
        /// `[qlora, hidden]`.
        a: QWeight<qlora, hidden>,
        /// RMSNorm weight of the bottleneck.
        norm: Tensor<axes![qlora]>,
        /// `[q_flat, qlora]`.
        b: QWeight<q_flat, qlora>,
    },
}

/// One layer's attention.
pub struct Mla {
    /// Query projection.
    pub q: QProj,
    /// `[kv_lora + qk_rope, hidden]`: the latent and the rotary key.
    pub kv_a: QWeight<kv_flat, hidden>,
    /// RMSNorm weight of the latent.
    pub kv_norm: Tensor<axes![latent]>,
    /// `[head, latent, nope]`: the latent-to-key map, absorbed into the query (in the
    /// file's format, as llama.cpp keeps it: a Q8_0 file's map streams a quarter of the
    /// bytes of an f32 copy per token).
    pub k_b: QWeightStack<head, latent, nope>,
    /// `[head, vdim, latent]`: the latent-to-value map, absorbed into the output.
    pub v_b: QWeightStack<head, vdim, latent>,
    /// `[hidden, heads * v_head]`.
    pub o: QWeight<hidden, o_flat>,
}

/// A mixture-of-experts feed-forward.
pub struct Moe {
    /// `[expert, hidden]` router (f32 in the files).
    pub router: QWeight<expert, hidden>,
    /// V3's per-expert selection bias.
    pub bias: Option<Vec<f32>>,
    /// The routed experts (loaded on use).
    pub experts: ExpertStore,
    /// The shared experts as one SwiGLU.
    pub shared: Option<Mlp>,
    /// Routing settings.
    pub cfg: MoeConfig,
}

/// A block's feed-forward.
pub enum Ffn {
    /// Dense SwiGLU.
    Dense(Mlp),
    /// Experts.
    Moe(Box<Moe>),
}

/// One block.
pub struct Block {
    /// RMSNorm before attention.
    pub attn_norm: Tensor<axes![hidden]>,
    /// Attention.
    pub attn: Mla,
    /// RMSNorm before the feed-forward.
    pub ffn_norm: Tensor<axes![hidden]>,
    /// Feed-forward.
    pub ffn: Ffn,
}

/// A DeepSeek-V2/V3 model.
pub struct DeepSeek {
    /// Shape.
    pub config: DeepSeekConfig,
    /// `[vocab, hidden]`.
    pub embed: QWeight<vocab, hidden>,
    /// Blocks.
    pub blocks: Vec<Block>,
    /// Final RMSNorm.
    pub norm: Tensor<axes![hidden]>,
    /// `[vocab, hidden]`, or `None` when tied to the embedding.
    pub output: Option<QWeight<vocab, hidden>>,
    rope: Rope,
    rope_mscale: f32,
}

/// YaRN's inverse frequencies (as transformers computes them) from the plain ones.
fn yarn_rope(dim: usize, theta: f32, y: &super::config::Yarn) -> Result<Rope> {
    let find = |rot: f32| {
        (dim as f32 * (y.original_context as f32 / (rot * 2.0 * std::f32::consts::PI)).ln()) / (2.0 * theta.ln())
    };
    let low = find(y.beta_fast).floor().max(0.0);
    let high = find(y.beta_slow).ceil().min(dim as f32 - 1.0);
    let high = if low == high { high + 0.001 } else { high };
    Ok(Rope::new(dim, theta)?.map_freqs(|i, f| {
        let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
        let extrapolate = 1.0 - ramp;
        (f / y.factor) * (1.0 - extrapolate) + f * extrapolate
    }))
}

impl DeepSeek {
    /// Loads a `deepseek2` GGUF (llama.cpp's names; the split `attn_k_b`/`attn_v_b` of current
    /// converters or the older joint `attn_kv_b`). `expert_budget` bounds the bytes of
    /// routed experts kept resident: they then stay in the map until used and stream from it.
    /// Without a budget they are repacked at load for this CPU like every other matrix when
    /// they fit in four fifths of the memory available, and stay in the map otherwise
    /// ([`ExpertPlacement::choose`]).
    pub fn load(f: &ModelFile, expert_budget: Option<usize>) -> Result<DeepSeek> {
        let c = DeepSeekConfig::from_file(f)?;
        let mut expert_bytes = 0usize;
        for l in (0..c.layers).filter(|&l| c.is_moe(l)) {
            for w in ["gate", "up", "down"] {
                let name = format!("blk.{l}.ffn_{w}_exps.weight");
                if f.has(&name) {
                    expert_bytes = expert_bytes.saturating_add(f.gguf.tensor_info(&name)?.nbytes()?);
                }
            }
        }
        let placement =
            ExpertPlacement::choose(expert_budget, expert_bytes, fucina::storage::alloc::available_memory());
        let budget = ExpertBudget::new(f.gguf_shared(), placement);
        let (h, nh) = (c.hidden, c.heads);
        let qd = nh * c.qk_head();
        let mut blocks = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            let q = match c.q_lora {
                Some(r) => QProj::LowRank {
                    a: f.matrix(&n("attn_q_a"), r, h)?,
                    norm: f.dense(&n("attn_q_a_norm"), &[r])?,
                    b: f.matrix(&n("attn_q_b"), qd, r)?,
                },
                None => QProj::Plain(f.matrix(&n("attn_q"), qd, h)?),
            };
            let (k_b, v_b) = if f.has(&n("attn_k_b")) {
                (
                    QWeightStack::new(f.matrices(&n("attn_k_b"), nh, c.kv_lora, c.qk_nope)?)?.map(|w| f.prepare(w))?,
                    QWeightStack::new(f.matrices(&n("attn_v_b"), nh, c.v_head, c.kv_lora)?)?.map(|w| f.prepare(w))?,
                )
            } else {
                // [heads * (nope + v), kv_lora]: per head the key rows, then the value rows.
                let (shape, w) = f.gguf.tensor_f32(&n("attn_kv_b"))?;
                if shape != [nh * (c.qk_nope + c.v_head), c.kv_lora] {
                    return Err(FucinaError::Format {
                        format: "gguf",
                        msg: format!("tensor `{}` has shape {shape:?}", n("attn_kv_b")),
                    });
                }
                let (per, r) = (c.qk_nope + c.v_head, c.kv_lora);
                let mut kb = vec![0.0f32; nh * r * c.qk_nope];
                let mut vb = vec![0.0f32; nh * c.v_head * r];
                for hh in 0..nh {
                    for d in 0..c.qk_nope {
                        for j in 0..r {
                            kb[(hh * r + j) * c.qk_nope + d] = w[(hh * per + d) * r + j];
                        }
                    }
                    vb[hh * c.v_head * r..(hh + 1) * c.v_head * r]
                        .copy_from_slice(&w[(hh * per + c.qk_nope) * r..(hh + 1) * per * r]);
                }
                (
                    QWeightStack::from_f32(&kb, nh, r, c.qk_nope, GgmlType::F32)?,
                    QWeightStack::from_f32(&vb, nh, c.v_head, r, GgmlType::F32)?,
                )
            };
            let attn = Mla {
                q,
                kv_a: f.matrix(&n("attn_kv_a_mqa"), c.kv_lora + c.qk_rope, h)?,
                kv_norm: f.dense(&n("attn_kv_a_norm"), &[c.kv_lora])?,
                k_b,
                v_b,
                o: f.matrix(&n("attn_output"), h, nh * c.v_head)?,
            };
            let ffn = if c.is_moe(l) {
                let m =
                    c.moe.clone().ok_or_else(|| FucinaError::Format { format: "gguf", msg: "no experts".into() })?;
                let bias = if f.has(&format!("blk.{l}.exp_probs_b.bias")) {
                    // One selection bias per expert: the shape is checked like every weight's.
                    let b: Tensor<axes![expert]> = f.dense(&format!("blk.{l}.exp_probs_b.bias"), &[m.experts])?;
                    Some(b.to_f32_vec())
                } else {
                    None
                };
                let shared =
                    if m.shared > 0 { Some(Mlp::load(f, l, "_shexp", m.shared * m.expert_ffn, h)?) } else { None };
                Ffn::Moe(Box::new(Moe {
                    router: f.matrix(&n("ffn_gate_inp"), m.experts, h)?,
                    bias,
                    experts: ExpertStore::open(f, l, m.experts, m.expert_ffn, h, budget.clone())?,
                    shared,
                    cfg: m,
                }))
            } else {
                Ffn::Dense(Mlp::load(f, l, "", c.ffn, h)?)
            };
            blocks.push(Block {
                attn_norm: f.dense(&n("attn_norm"), &[h])?,
                attn,
                ffn_norm: f.dense(&n("ffn_norm"), &[h])?,
                ffn,
            });
        }
        let output = if f.has("output.weight") { Some(f.matrix("output.weight", c.vocab, h)?) } else { None };
        let (rope, rope_mscale) = match &c.yarn {
            Some(y) => {
                // With mscale == mscale_all_dim (DeepSeek's releases) the cos/sin factor is 1;
                // without mscale_all_dim it is YaRN's default 0.1 ln(factor) + 1.
                let m = if y.mscale_all_dim > 0.0 { 1.0 } else { y.mscale(1.0) };
                (yarn_rope(c.qk_rope, c.rope_theta, y)?, m)
            }
            None => (Rope::new(c.qk_rope, c.rope_theta)?, 1.0),
        };
        Ok(DeepSeek {
            embed: f.matrix("token_embd.weight", c.vocab, h)?,
            blocks,
            norm: f.dense("output_norm.weight", &[h])?,
            output,
            rope,
            rope_mscale,
            config: c,
        })
    }

    /// A latent KV cache for `capacity` positions: `kv_lora + qk_rope` values per position
    /// and layer, shared by all heads.
    pub fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context_length {
            return Err(FucinaError::InvalidArgument {
                op: "DeepSeek::new_cache",
                msg: format!("{capacity} positions exceed the model's context length of {}", c.context_length),
            });
        }
        KvCache::new(c.layers, 1, c.kv_lora + c.qk_rope, 0, capacity, kv)
    }

    /// Runs `tokens` after the cache's positions; logits `[seq, vocab]` (the rows `rows` asks
    /// for). `routes`, when given, receives per MoE layer the experts
    /// chosen for each token (ascending ids).
    pub fn forward_traced(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: LogitRows,
        routes: Option<&mut Vec<Vec<Vec<u32>>>>,
    ) -> Result<Tensor<axes![seq, vocab]>> {
        batch::single(tokens, cache, rows, |b| self.forward_batch_traced(b, routes))
    }

    /// One pass over several sequences (see [`crate::llm::batch`]): every matrix product and
    /// expert takes the rows of all of them, attention runs per sequence over its own latent
    /// cache. `routes` as in [`DeepSeek::forward_traced`], over the batch's rows in order.
    pub fn forward_batch_traced(
        &self,
        batch: &mut [Segment<'_>],
        mut routes: Option<&mut Vec<Vec<Vec<u32>>>>,
    ) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        let c = &self.config;
        let spans = batch::spans(batch, "DeepSeek::forward")?;
        let (cos, sin) = batch::rope_tables(&self.rope, batch, self.rope_mscale)?;
        let mut x: Tensor<axes![seq, hidden]> = self.embed.lookup(&batch::tokens(batch))?;
        for (l, b) in self.blocks.iter().enumerate() {
            self.prefetch_next_experts(l, &x)?;
            let h = x.rms_norm::<hidden>(Some(&b.attn_norm), c.rms_eps)?;
            let a = self.attention(l, &b.attn, &h, &cos, &sin, &spans, batch)?;
            x = x.add(&a)?;
            let h = x.rms_norm::<hidden>(Some(&b.ffn_norm), c.rms_eps)?;
            let m = match &b.ffn {
                Ffn::Dense(mlp) => mlp.forward(&h)?,
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
        let logits = batch::logits(x, &spans, batch, |x| {
            lm_head(x, Some(&self.norm), c.rms_eps, self.output.as_ref(), &self.embed)
        })?;
        batch::finish(batch, logits, c.vocab)
    }

    /// When experts stream under a budget: guesses layer `l + 1`'s experts from the residual
    /// stream entering layer `l` (its router on the normed state: consecutive layers route
    /// similar states alike) and starts reading their pages while layer `l` computes.
    fn prefetch_next_experts(&self, l: usize, x: &Tensor<axes![seq, hidden]>) -> Result<()> {
        let Some(Block { ffn_norm, ffn: Ffn::Moe(next), .. }) = self.blocks.get(l + 1) else { return Ok(()) };
        if !next.experts.streaming() {
            return Ok(());
        }
        let h = x.rms_norm::<hidden>(Some(ffn_norm), self.config.rms_eps)?;
        let logits = next.router.forward(&h)?.to_f32_vec();
        for lg in logits.chunks_exact(next.cfg.experts) {
            for e in route(&next.cfg.routing(), next.bias.as_deref(), lg).0 {
                next.experts.prefetch(e);
            }
        }
        Ok(())
    }

    /// Where the routed experts live (None: no MoE layer).
    pub fn expert_placement(&self) -> Option<ExpertPlacement> {
        self.blocks.iter().find_map(|b| match &b.ffn {
            Ffn::Moe(m) => Some(m.experts.placement()),
            Ffn::Dense(_) => None,
        })
    }

    /// Expert-store counters (all MoE layers share one budget).
    pub fn expert_stats(&self) -> super::experts::ExpertStats {
        self.blocks
            .iter()
            .find_map(|b| match &b.ffn {
                Ffn::Moe(m) => Some(m.experts.stats()),
                Ffn::Dense(_) => None,
            })
            .unwrap_or_default()
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        layer: usize,
        a: &Mla,
        x: &Tensor<axes![seq, hidden]>,
        cos: &Tensor<axes![seq, head_dim]>,
        sin: &Tensor<axes![seq, head_dim]>,
        spans: &[(usize, usize)],
        batch: &mut [Segment<'_>],
    ) -> Result<Tensor<axes![seq, hidden]>> {
        let c = &self.config;
        let (s, nh) = (x.size::<seq>(), c.heads);
        let q: Tensor<axes![seq, q_flat]> = match &a.q {
            QProj::Plain(w) => w.forward(x)?,
            QProj::LowRank { a: qa, norm, b } => {
                b.forward(&qa.forward(x)?.rms_norm::<qlora>(Some(norm), c.rms_eps)?)?
            }
        };
        let q: Tensor<axes![seq, head, qk]> = q.split_axis::<q_flat, axes![head, qk]>(&[nh, c.qk_head()])?;
        let q_nope: Tensor<axes![seq, head, nope]> = q.narrow::<qk>(0, c.qk_nope)?.rename::<qk, nope>()?;
        let (rcos, rsin) = (cos.rename::<head_dim, rot>()?, sin.rename::<head_dim, rot>()?);
        let q_rot: Tensor<axes![seq, head, rot]> = q
            .narrow::<qk>(c.qk_nope, c.qk_rope)?
            .rename::<qk, rot>()?
            .contiguous()?
            .rope(&rcos, &rsin, RopeStyle::Pairs)?;
        // The latent and the shared rotary key of each new position go into the cache.
        let kv: Tensor<axes![seq, kv_flat]> = a.kv_a.forward(x)?;
        let lat = kv.narrow::<kv_flat>(0, c.kv_lora)?.rename::<kv_flat, latent>()?.contiguous()?;
        let lat = lat.rms_norm::<latent>(Some(&a.kv_norm), c.rms_eps)?;
        let k_rot: Tensor<axes![seq, rot]> = kv
            .narrow::<kv_flat>(c.kv_lora, c.qk_rope)?
            .rename::<kv_flat, rot>()?
            .contiguous()?
            .rope(&rcos, &rsin, RopeStyle::Pairs)?;
        let row: Tensor<axes![seq, lat_rot]> =
            Tensor::concat::<lat_rot>(&[&lat.rename::<latent, lat_rot>()?, &k_rot.rename::<rot, lat_rot>()?])?;
        // Absorbed query: [q_nope W_kb, q_rope] per head, against [latent, k_rope] per position.
        let q_lat: Tensor<axes![seq, head, latent]> = a.k_b.forward(&q_nope)?;
        let qcat: Tensor<axes![seq, head, lat_rot]> =
            Tensor::concat::<lat_rot>(&[&q_lat.rename::<latent, lat_rot>()?, &q_rot.rename::<rot, lat_rot>()?])?;
        // One shared latent key for all heads: the heads are one group of a single kv head.
        let qcat: Tensor<axes![seq, kv_head, group, lat_rot]> =
            qcat.rename::<head, group>()?.broadcast_to(&[s, 1, nh, c.kv_lora + c.qk_rope])?;
        // Each sequence writes its positions' latents and rotary keys, and attends over its
        // own cache.
        let o = batch::per_segment(&qcat, spans, batch, |q, (at, n), cache| {
            let start = cache.len();
            let row = row.narrow::<seq>(at, n)?.contiguous()?;
            let row = row.rename::<lat_rot, head_dim>()?.broadcast_to::<axes![kv_head, seq, head_dim]>(&[
                1,
                n,
                c.kv_lora + c.qk_rope,
            ])?;
            cache.write_keys(layer, &row)?;
            // The values are the latent part of each cached row.
            cache.attend::<lat_rot, latent>(layer, q, Values::KeyPrefix(c.kv_lora), c.softmax_scale(), n, start)
        })?;
        let o: Tensor<axes![seq, latent, head]> = o.merge_axes::<axes![kv_head, group], head>()?;
        let o: Tensor<axes![seq, head, vdim]> = a.v_b.forward(&o.permute::<axes![seq, head, latent]>()?)?;
        let o: Tensor<axes![seq, o_flat]> = o.merge_axes::<axes![head, vdim], o_flat>()?;
        a.o.forward(&o)
    }
}

/// The output of an expert layer and, per row, the experts chosen (ascending ids).
pub type Routed = (Tensor<axes![seq, hidden]>, Vec<Vec<u32>>);

impl Moe {
    /// The routed experts of every row plus the shared experts. Returns the result and the
    /// chosen experts per row (ascending ids).
    pub fn forward(&self, x: &Tensor<axes![seq, hidden]>) -> Result<Routed> {
        let (s, h) = (x.size::<seq>(), x.size::<hidden>());
        let logits = self.router.forward(x)?.to_f32_vec();
        let (n, routing) = (self.cfg.experts, self.cfg.routing());
        let (assigned, chosen) =
            crate::llm::moe::assign(n, logits.chunks_exact(n).map(|lg| route(&routing, self.bias.as_deref(), lg)));
        if crate::llm::moe::few_rows(&assigned) {
            // Decode and short prompts: the used experts and the shared ones as one group.
            let y =
                Mlp::moe_grouped(x, &assigned, |e| self.experts.get(e), self.shared.as_ref(), |o| Ok(o.to_f32_vec()))?;
            return Ok((Tensor::from_vec(y, &[s, h])?, chosen));
        }
        let mut y = match &self.shared {
            Some(m) => m.forward(x)?.to_f32_vec(),
            None => vec![0.0f32; s * h],
        };
        crate::llm::moe::combine(x, &assigned, &mut y, |e, xe| self.experts.get(e)?.forward(xe))?;
        Ok((Tensor::from_vec(y, &[s, h])?, chosen))
    }
}

impl crate::llm::generate::CausalLm for DeepSeek {
    fn vocab_size(&self) -> usize {
        self.config.vocab
    }

    fn context_length(&self) -> usize {
        self.config.context_length
    }

    fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
        DeepSeek::new_cache(self, capacity, kv)
    }

    fn forward(&self, tokens: &[u32], cache: &mut KvCache, rows: LogitRows) -> Result<Tensor<axes![seq, vocab]>> {
        self.forward_traced(tokens, cache, rows, None)
    }

    fn forward_batch(&self, batch: &mut [Segment<'_>]) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        self.forward_batch_traced(batch, None)
    }
}
