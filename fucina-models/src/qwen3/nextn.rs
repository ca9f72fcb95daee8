//! GLM-4.5's next-token-prediction (`nextn`) layer as the model's own draft model. The layer
//! (DeepSeek-V3's multi-token prediction, as GLM-4.5's checkpoints and llama.cpp's files carry
//! it after the decoder's blocks) reads, for position `p`, the main model's final hidden
//! state at `p` (after the output norm) and the embedding of the token at `p + 1`, joined as
//! `eh_proj([enorm(e); hnorm(h)])`, runs one more decoder block (attention over its own
//! cache, experts) and predicts the token at `p + 2` through its own head norm and head.
//!
//! As a drafter: every pass of the main model keeps its final hidden states in the cache's
//! [`DraftState`] and runs the layer on each position whose next token the pass knew (so the
//! layer's cache follows the sequence); [`Qwen3::draft`] then runs it on the last position
//! with the token about to be fed, and chains on its own output for further drafts. The
//! drafts are verified by the main model like any others, so the output is the same as
//! without them.

use super::config::Qwen3Config;
use super::model::{load_block, Block, Ffn, Mixer, Qwen3};
use crate::llm::batch::{LogitRows, Segment};
use crate::llm::kv_cache::{DraftState, KvCache, KvType};
use crate::llm::weights::ModelFile;
use fucina::prelude::*;
use fucina::quant::QWeight;

axis!(pub nextn_in);

/// The next-token layer's logits and its output after the head norm.
pub type NextnOut = (Tensor<axes![seq, vocab]>, Tensor<axes![seq, hidden]>);

/// The next-token-prediction layer.
#[derive(Module)]
pub struct NextN {
    /// `[hidden, nextn_in]` projection of the joined embedding and hidden state
    /// (`nextn_in` = 2 hidden: the normed embedding, then the normed hidden state).
    pub eh_proj: QWeight<hidden, nextn_in>,
    /// RMSNorm weight of the embedding.
    pub enorm: Tensor<axes![hidden]>,
    /// RMSNorm weight of the main model's hidden state.
    pub hnorm: Tensor<axes![hidden]>,
    /// The layer's decoder block (attention over the drafter's cache, experts).
    pub block: Block,
    /// RMSNorm weight before the head (`shared_head_norm`, else the model's output norm).
    pub head_norm: Tensor<axes![hidden]>,
    /// Its own head (`shared_head_head`), else the model's.
    pub head: Option<QWeight<vocab, hidden>>,
    /// Its own embedding (`embed_tokens`), else the model's.
    pub embed: Option<QWeight<vocab, hidden>>,
}

impl NextN {
    /// The layer of a `glm4moe` file (`blk.<layers>.nextn.*` and the block's tensors), or
    /// `None` when the file has none.
    pub fn load(f: &ModelFile, c: &Qwen3Config) -> Result<Option<NextN>> {
        let l = c.layers;
        let n = |s: &str| format!("blk.{l}.nextn.{s}.weight");
        if f.arch != "glm4moe" || c.nextn == 0 || !f.has(&n("eh_proj")) {
            return Ok(None);
        }
        let h = c.hidden;
        let mut block = load_block(f, c, l)?;
        if !matches!(block.mixer, Mixer::Attention(_)) {
            return Err(FucinaError::Format { format: "gguf", msg: "a next-token layer without attention".into() });
        }
        // The layer's attention writes the drafter's own one-layer cache.
        block.slot = 0;
        let head_norm = if f.has(&n("shared_head_norm")) {
            f.dense(&n("shared_head_norm"), &[h])?
        } else {
            f.dense("output_norm.weight", &[h])?
        };
        Ok(Some(NextN {
            eh_proj: f.matrix(&n("eh_proj"), h, 2 * h)?,
            enorm: f.dense(&n("enorm"), &[h])?,
            hnorm: f.dense(&n("hnorm"), &[h])?,
            block,
            head_norm,
            head: if f.has(&n("shared_head_head")) {
                Some(f.matrix(&n("shared_head_head"), c.vocab, h)?)
            } else {
                None
            },
            embed: if f.has(&n("embed_tokens")) { Some(f.matrix(&n("embed_tokens"), c.vocab, h)?) } else { None },
        }))
    }
}

impl Qwen3 {
    /// Runs the next-token layer on the main model's final hidden states `h` (`[m, hidden]`,
    /// after the output norm) with the tokens that followed each (`next`), at positions
    /// `at..at + m`, appending their keys and values to the drafter's cache `dc` (whose
    /// entries are earlier positions). Returns the logits (each row predicts the token after
    /// the one in `next`) and the layer's own output after its head norm.
    pub(crate) fn nextn_rows(
        &self,
        nx: &NextN,
        h: &Tensor<axes![seq, hidden]>,
        next: &[u32],
        at: usize,
        dc: &mut KvCache,
    ) -> Result<NextnOut> {
        let c = &self.config;
        let (eps, m) = (c.rms_eps, next.len());
        let e: Tensor<axes![seq, hidden]> = nx.embed.as_ref().unwrap_or(&self.embed).lookup(next)?;
        let joined = Tensor::concat::<hidden>(&[
            &e.rms_norm::<hidden>(Some(&nx.enorm), eps)?,
            &h.rms_norm::<hidden>(Some(&nx.hnorm), eps)?,
        ])?
        .rename::<hidden, nextn_in>()?;
        let mut x = nx.eh_proj.forward(&joined)?;
        let b = &nx.block;
        let Mixer::Attention(a) = &b.mixer else {
            return Err(FucinaError::InvalidArgument {
                op: "nextn",
                msg: "a next-token layer without attention".into(),
            });
        };
        let (cos, sin) = self.rope.tables(at, m, 1.0)?;
        let hn = x.rms_norm::<hidden>(b.attn_norm.as_ref(), eps)?;
        let att = {
            let mut seg = [Segment { tokens: next, cache: &mut *dc, rows: LogitRows::All }];
            self.attention(0, a, &hn, &cos, &sin, &[(0, m)], &mut seg)?
        };
        dc.advance(m)?;
        x = x.add(&att)?;
        let hn = x.rms_norm::<hidden>(b.ffn_norm.as_ref(), eps)?;
        let f = match &b.ffn {
            Ffn::Moe(moe) => moe.forward(&hn)?.0,
            Ffn::Dense(mlp) => mlp.forward(&hn)?,
            Ffn::Relu2(mlp) => mlp.forward(&hn)?,
        };
        let out = x.add(&f)?.rms_norm::<hidden>(Some(&nx.head_norm), eps)?;
        let head = nx.head.as_ref().or(self.output.as_ref()).unwrap_or(&self.embed);
        Ok((head.forward(&out)?, out))
    }

    /// After a main pass over `seg` (its cache not yet advanced), whose final hidden states
    /// are `hrows` (after the output norm): keeps them, and runs the next-token layer on each
    /// position whose next token is now known (the last position of the previous pass, with
    /// this pass's first token, unless a draft already ran it; this pass's positions but the
    /// last).
    pub(crate) fn nextn_follow(
        &self,
        nx: &NextN,
        seg: &mut Segment<'_>,
        hrows: &Tensor<axes![seq, hidden]>,
    ) -> Result<()> {
        let start = seg.cache.len();
        let tokens = seg.tokens;
        let w = self.config.hidden;
        let Some(st) = seg.cache.draft_mut() else { return Ok(()) };
        let mut rows: Vec<f32> = Vec::new();
        let mut next = Vec::new();
        let mut first = start;
        if start > 0 && st.positions.last().is_none_or(|&p| p + 1 < start) {
            if let Some(row) = st.hidden_row(start - 1) {
                rows.extend_from_slice(row);
                next.push(tokens[0]);
                first = start - 1;
            }
        }
        let hv = hrows.to_f32_vec();
        for (i, &t) in tokens.iter().enumerate().skip(1) {
            rows.extend_from_slice(&hv[(i - 1) * w..i * w]);
            next.push(t);
        }
        st.hidden = hv;
        st.hidden_at = start;
        if next.is_empty() {
            return Ok(());
        }
        st.keep_before(first);
        let h = Tensor::from_vec(rows, &[next.len(), w])?;
        self.nextn_rows(nx, &h, &next, first, &mut st.cache)?;
        st.positions.extend(first..first + next.len());
        Ok(())
    }

    /// The next-token layer's logits for `tokens` as a prompt: row `p` predicts the token at
    /// `p + 2` from the main model's state at `p` and the token at `p + 1` (`[n - 1, vocab]`).
    /// For checking the layer against a reference; drafting goes through [`Qwen3::draft`].
    pub fn nextn_logits(&self, tokens: &[u32]) -> Result<Tensor<axes![seq, vocab]>> {
        let nx = self.nextn.as_ref().ok_or(FucinaError::InvalidArgument {
            op: "nextn_logits",
            msg: "this model has no next-token-prediction layer".into(),
        })?;
        let n = tokens.len();
        if n < 2 {
            return Err(FucinaError::InvalidArgument { op: "nextn_logits", msg: format!("{n} tokens (at least 2)") });
        }
        let mut cache = self.new_cache(n, KvType::F32)?;
        self.attach_drafter(&mut cache)?;
        self.forward(tokens, &mut cache, LogitRows::None)?;
        let w = self.config.hidden;
        let st =
            cache.draft_mut().ok_or(FucinaError::InvalidArgument { op: "nextn_logits", msg: "no state".into() })?;
        let h = Tensor::from_vec(st.hidden[..(n - 1) * w].to_vec(), &[n - 1, w])?;
        let mut dc = self.drafter_cache(n, KvType::F32)?;
        Ok(self.nextn_rows(nx, &h, &tokens[1..], 0, &mut dc)?.0)
    }

    fn drafter_cache(&self, capacity: usize, kind: KvType) -> Result<KvCache> {
        let c = &self.config;
        KvCache::new(1, c.kv_heads, c.head_dim, c.head_dim, capacity, kind)
    }

    /// Attaches the drafter's state to `cache`; false when the model has no next-token layer.
    pub(crate) fn attach_drafter(&self, cache: &mut KvCache) -> Result<bool> {
        if self.nextn.is_none() {
            return Ok(false);
        }
        let dc = self.drafter_cache(cache.capacity(), cache.kind())?;
        let hidden_width = self.config.hidden;
        cache.set_draft(DraftState {
            cache: dc,
            positions: Vec::new(),
            hidden: Vec::new(),
            hidden_at: 0,
            hidden_width,
        });
        Ok(true)
    }

    /// Up to `max` tokens drafted by the next-token layer after `history` (whose last token
    /// is fed next, at the cache's length): the layer on the last cached position with that
    /// token gives the first draft (greedy), and each further one comes from the layer run
    /// again on its own output and the draft before. Empty without the layer or its state.
    pub fn draft(&self, cache: &mut KvCache, history: &[u32], max: usize) -> Result<Vec<u32>> {
        let Some(nx) = &self.nextn else { return Ok(Vec::new()) };
        let len = cache.len();
        let (Some(&last), true) = (history.last(), len > 0 && max > 0) else { return Ok(Vec::new()) };
        let w = self.config.hidden;
        let Some(st) = cache.draft_mut() else { return Ok(Vec::new()) };
        let p = len - 1;
        let Some(row) = st.hidden_row(p).map(<[f32]>::to_vec) else { return Ok(Vec::new()) };
        st.keep_before(p);
        let mut h = Tensor::from_vec(row, &[1, w])?;
        let (mut token, mut drafts) = (last, Vec::with_capacity(max));
        for k in 0..max {
            let (logits, out) = self.nextn_rows(nx, &h, &[token], p + k, &mut st.cache)?;
            st.positions.push(p + k);
            let v = logits.to_f32_vec();
            let best = v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b });
            token = best.0 as u32;
            drafts.push(token);
            h = out;
        }
        // The entry at `p` read real inputs and stays; the chained ones read drafts.
        st.keep_before(p + 1);
        Ok(drafts)
    }
}
