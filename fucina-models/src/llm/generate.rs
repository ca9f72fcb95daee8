//! The generation loop shared by the language models: prefill the prompt (whole, or in
//! chunks that share passes with other sequences), then decode a token at a time (with
//! drafts verified in one pass when speculating), sampling, streaming text out as whole
//! UTF-8 characters, and stopping on an end token or the token budget. One sequence runs as
//! a [`Decoding`] of steps, so several can share each forward pass ([`generate_batch`],
//! the server's slots).

use super::batch::{LogitRows, Segment};
use super::kv_cache::{KvCache, KvType};
use super::sampling::Sampler;
use super::tokenizer::Tokenizer;
use fucina::prelude::*;
use std::time::Instant;

/// A decoder-only language model with a KV cache.
pub trait CausalLm: Sync {
    /// Vocabulary size (length of a logits row).
    fn vocab_size(&self) -> usize;
    /// The longest context the model takes.
    fn context_length(&self) -> usize;
    /// A cache for `capacity` positions.
    fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache>;
    /// Logits `[seq, vocab]` for `tokens` after the cache's positions (the rows `rows` asks
    /// for: every position's, the last one's, or none), appending to the cache.
    fn forward(&self, tokens: &[u32], cache: &mut KvCache, rows: LogitRows) -> Result<Tensor<axes![seq, vocab]>>;
    /// Lets the model draft tokens for speculative decoding from its own layers (GLM-4.5's
    /// next-token-prediction layer) on the sequence of `cache`: attaches the state it needs
    /// and returns true (positions already in the cache stay unseen by the drafter, which
    /// only makes its drafts worse); false (the default) when the model has no drafter, and
    /// drafts then come from the sequence's own n-grams.
    fn enable_drafts(&self, _cache: &mut KvCache) -> Result<bool> {
        Ok(false)
    }

    /// Up to `max` tokens the model drafts after `history` (the sequence so far, whose last
    /// token is fed next) from the state [`CausalLm::enable_drafts`] attached to `cache`;
    /// none by default.
    fn draft(&self, _cache: &mut KvCache, _history: &[u32], _max: usize) -> Result<Vec<u32>> {
        Ok(Vec::new())
    }

    /// One pass over several sequences, each after its own cache's positions (see
    /// [`crate::llm::batch`]): each sequence's logits rows, in order. Every sequence is
    /// checked before anything runs. The models read each weight once for the whole batch;
    /// this default runs the sequences one after another.
    fn forward_batch(&self, batch: &mut [Segment<'_>]) -> Result<Vec<Tensor<axes![seq, vocab]>>> {
        crate::llm::batch::spans(batch, "forward_batch")?;
        batch
            .iter_mut()
            .map(|s| {
                let t = self.forward(s.tokens, s.cache, s.rows)?;
                if s.rows == LogitRows::None {
                    t.narrow::<seq>(0, 0)
                } else {
                    Ok(t)
                }
            })
            .collect()
    }
}

/// Makes up to `n` drafts after a history (n-grams, or the model's own drafter).
type Drafter<'a> = dyn FnMut(&[u32], usize) -> Result<Vec<u32>> + 'a;

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end token.
    EndToken,
    /// `max_tokens` were generated.
    Length,
    /// The cache (context) is full.
    ContextFull,
    /// The callback asked to stop.
    Cancelled,
}

/// Timings and counts of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationStats {
    /// Prompt tokens processed.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Seconds spent on the prompt.
    pub prefill_seconds: f64,
    /// Seconds spent generating after the first token.
    pub decode_seconds: f64,
    /// Why it stopped.
    pub stop: StopReason,
    /// Speculation: tokens drafted.
    pub drafted: usize,
    /// Drafted tokens the sampler kept.
    pub accepted: usize,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_seconds.max(1e-9)
    }

    /// Generated tokens per second (the first token comes with the prefill).
    pub fn decode_tok_s(&self) -> f64 {
        self.generated_tokens.saturating_sub(1) as f64 / self.decode_seconds.max(1e-9)
    }
}

/// What to generate.
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// Tokens that end the answer (not emitted).
    pub stop_tokens: Vec<u32>,
    /// Speculative decoding without a draft model: up to this many tokens drafted per step
    /// from the conversation itself (0: off). See [`ngram_draft`].
    pub speculate: usize,
    /// The tokens the cache already holds before the prompt (a conversation fed only its new
    /// suffix): the penalties and the drafts see them as history. Empty: none, or unknown.
    pub context: Vec<u32>,
}

/// The shortest and longest n-gram matched for a draft.
const DRAFT_NGRAM: std::ops::RangeInclusive<usize> = 2..=4;

/// Drafts `max` tokens from `history` itself: the tokens that followed the most recent
/// earlier occurrence of its last n tokens (the longest n of 4, 3, 2 that occurs), read on
/// periodically past the end of the history (a loop drafts as far as asked). Text that
/// repeats what came before (quotes, code edits, lists, the prompt's own phrases) drafts
/// well; free text rarely finds a match, and then there is no draft and no cost.
///
/// ```
/// use fucina_models::llm::generate::ngram_draft;
/// // "... 5 6 7 8 9 ... 5 6" -> "7 8"
/// assert_eq!(ngram_draft(&[1, 5, 6, 7, 8, 9, 2, 5, 6], 2), vec![7, 8]);
/// // A loop "3 4 3 4 3" goes on: "4 3 4 3 4".
/// assert_eq!(ngram_draft(&[9, 3, 4, 3, 4, 3], 5), vec![4, 3, 4, 3, 4]);
/// assert!(ngram_draft(&[1, 2, 3, 4], 4).is_empty());
/// ```
pub fn ngram_draft(history: &[u32], max: usize) -> Vec<u32> {
    let len = history.len();
    if max == 0 {
        return Vec::new();
    }
    for n in DRAFT_NGRAM.rev() {
        if len <= n {
            continue;
        }
        let key = &history[len - n..];
        // The most recent earlier occurrence that has a continuation.
        if let Some(i) = (0..len - n).rev().find(|&i| &history[i..i + n] == key) {
            // The continuation, read on past the end of the history into the draft itself:
            // a stretch that repeats with period len - (i + n) drafts as far as `max`.
            let from = i + n;
            let mut draft = Vec::with_capacity(max);
            for j in from..from + max {
                let t = if j < len { history[j] } else { draft[j - len] };
                draft.push(t);
            }
            return draft;
        }
    }
    Vec::new()
}

/// Turns speculation off where it does not pay. Every `WINDOW` verified drafts it compares
/// the rate of the verification steps (tokens they produced, drafts kept plus the one token
/// any step gives, per second) with the rate of plain one-token steps (their moving
/// average); when drafting was slower it rests for `REST` generated tokens, doubling the rest
/// after each window that did not pay (up to `REST << MAX_BACKOFF`) and starting over after
/// one that did. Untimed (before any plain step was timed, and always when sampling, whose
/// seeded output must not depend on timing) it rests when fewer than half a draft was kept
/// per try.
///
/// It also sets the draft length: drafts start at [`DraftGate::FIRST_LEN`] tokens (with the
/// last token, four rows: one weight pass of the four-row kernels, so a short verification
/// costs little more than a plain step), double after a window that kept three quarters of
/// what it drafted and halve after one that kept under a quarter.
#[derive(Debug, Default)]
struct DraftGate {
    tries: usize,
    kept: usize,
    drafted: usize,
    verify_secs: f64,
    plain_secs: Option<f64>,
    rest: usize,
    backoff: u32,
    /// The current draft length (0: not set yet, [`DraftGate::FIRST_LEN`]).
    len: usize,
}

impl DraftGate {
    const WINDOW: usize = 8;
    const REST: usize = 32;
    const MAX_BACKOFF: u32 = 4;
    const FIRST_LEN: usize = 3;

    /// How many tokens to draft, at most `max`.
    fn draft_len(&mut self, max: usize) -> usize {
        if self.len == 0 {
            self.len = Self::FIRST_LEN;
        }
        self.len = self.len.min(max.max(1));
        self.len
    }

    fn open(&mut self) -> bool {
        if self.rest > 0 {
            self.rest -= 1;
            return false;
        }
        true
    }

    /// A plain one-token step took `secs`.
    fn record_plain(&mut self, secs: f64) {
        self.plain_secs = Some(self.plain_secs.map_or(secs, |p| 0.8 * p + 0.2 * secs));
    }

    /// A verification step of `drafted` drafts kept `kept` and took `secs`.
    fn record(&mut self, drafted: usize, kept: usize, secs: f64) {
        self.tries += 1;
        self.kept += kept;
        self.drafted += drafted;
        self.verify_secs += secs;
        if self.tries >= Self::WINDOW {
            let pays = match self.plain_secs {
                Some(plain) => (self.kept + self.tries) as f64 * plain > self.verify_secs,
                None => self.kept * 2 >= self.tries,
            };
            if pays {
                self.backoff = 0;
            } else {
                self.rest = Self::REST << self.backoff;
                self.backoff = (self.backoff + 1).min(Self::MAX_BACKOFF);
            }
            if 4 * self.kept >= 3 * self.drafted {
                self.len = (2 * self.len.max(1)).min(64);
            } else if 4 * self.kept < self.drafted {
                self.len = (self.len / 2).max(1);
            }
            self.tries = 0;
            self.kept = 0;
            self.drafted = 0;
            self.verify_secs = 0.0;
        }
    }
}

/// Accumulates token bytes and releases only complete UTF-8 text.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds bytes and returns the text that is now complete. An invalid byte becomes one
    /// U+FFFD and decoding goes on right after it, so a valid character that follows (even
    /// one still cut across tokens) is kept whole.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut at = 0;
        loop {
            match std::str::from_utf8(&self.pending[at..]) {
                Ok(s) => {
                    out.push_str(s);
                    at = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = at + e.valid_up_to();
                    // `valid_up_to` bytes from `at` were checked to be UTF-8.
                    out.push_str(std::str::from_utf8(&self.pending[at..valid]).unwrap_or_default());
                    match e.error_len() {
                        // Cut at the end: keep the start of the character for the next push.
                        None => {
                            at = valid;
                            break;
                        }
                        Some(bad) => {
                            out.push('\u{fffd}');
                            at = valid + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..at);
        out
    }

    /// Whatever is left, lossily.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// One sequence's generation as a sequence of steps, so that several sequences can share
/// each forward pass ([`CausalLm::forward_batch`]): [`Decoding::input`] says what the
/// sequence feeds next (a chunk of its prompt, or its last token and perhaps drafts after
/// it), [`Decoding::absorb`] takes the logits of that feed, samples, and emits text. A
/// single sequence run this way is [`generate`]; many in lockstep are [`generate_batch`]; the
/// server's slots are many that come and go.
#[derive(Debug)]
pub struct Decoding {
    max_tokens: usize,
    stop_tokens: Vec<u32>,
    speculate: usize,
    /// The cache's length before the prompt.
    base: usize,
    prompt: Vec<u32>,
    /// Prompt tokens fed so far.
    prompt_fed: usize,
    history: Vec<u32>,
    /// Tokens decided but not yet emitted, each with the logits row it was picked from.
    decided: std::collections::VecDeque<(u32, Vec<f32>)>,
    out: Vec<u32>,
    text: Utf8Stream,
    gate: DraftGate,
    timed_gate: bool,
    /// The feed in flight: the cache length before it, its drafts, whether it ran alone, and
    /// when it was handed out.
    pending: Option<Pending>,
    drafted: usize,
    accepted: usize,
    started: Instant,
    decode_started: Option<Instant>,
    prefill_seconds: f64,
    stop: Option<StopReason>,
}

#[derive(Debug)]
struct Pending {
    start: usize,
    drafts: Vec<u32>,
    prompt_chunk: usize,
    alone: bool,
    at: Instant,
}

/// What a sequence feeds in its next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The tokens, after the cache's positions.
    pub tokens: Vec<u32>,
    /// The logits rows the step needs back.
    pub rows: LogitRows,
}

impl Decoding {
    /// Starts generating after `prompt`, into a cache that holds `cache_len` positions
    /// already (`opts.context`, when given, are those positions' tokens). The sampler's
    /// state (grammar, seed) belongs to the caller and is passed to every step.
    pub fn new(prompt: &[u32], cache: &KvCache, sampler: &Sampler, opts: &GenerateOptions) -> Result<Decoding> {
        if prompt.is_empty() {
            return Err(FucinaError::InvalidArgument { op: "generate", msg: "the prompt has no tokens".into() });
        }
        cache.check_room(prompt.len())?;
        let base = cache.len();
        if !opts.context.is_empty() && opts.context.len() != base {
            return Err(FucinaError::InvalidArgument {
                op: "generate",
                msg: format!("{} context tokens for a cache holding {base}", opts.context.len()),
            });
        }
        Ok(Decoding {
            max_tokens: opts.max_tokens,
            stop_tokens: opts.stop_tokens.clone(),
            // Drafts are cut where the sampler's grammar (if any) would refuse them and
            // verified by its acceptance rule, which the grammar masks too.
            speculate: opts.speculate,
            base,
            prompt: prompt.to_vec(),
            prompt_fed: 0,
            history: opts.context.iter().chain(prompt).copied().collect(),
            decided: std::collections::VecDeque::new(),
            out: Vec::new(),
            text: Utf8Stream::default(),
            gate: DraftGate::default(),
            // The gate's decisions change which random numbers a sampled answer draws, so a
            // seeded sampled run must not depend on timing: only greedy decoding (whose
            // output drafts never change) lets the gate time its steps; sampled decoding
            // uses its counting rule.
            timed_gate: sampler.params().temperature == 0.0,
            pending: None,
            drafted: 0,
            accepted: 0,
            started: Instant::now(),
            decode_started: None,
            prefill_seconds: 0.0,
            stop: None,
        })
    }

    /// Whether generation has ended.
    pub fn is_done(&self) -> bool {
        self.stop.is_some()
    }

    /// Whether the prompt is still being fed.
    pub fn in_prefill(&self) -> bool {
        self.prompt_fed < self.prompt.len()
    }

    /// Prompt tokens not fed yet.
    pub fn prompt_left(&self) -> usize {
        self.prompt.len() - self.prompt_fed
    }

    /// The tokens generated so far.
    pub fn generated(&self) -> &[u32] {
        &self.out
    }

    /// What to feed next: at most `prompt_chunk` (at least 1) tokens of the prompt while it
    /// lasts, then the last token, with drafts after it when speculating and `alone` (the
    /// only sequence of its step: drafts pay where one sequence leaves the machine idle).
    /// The drafts stop where `sampler`'s grammar (if any) would refuse one (it is asked,
    /// not moved). `None` once generation has ended.
    pub fn input(&mut self, cache: &KvCache, sampler: &mut Sampler, prompt_chunk: usize, alone: bool) -> Option<Input> {
        let mut ngrams = |history: &[u32], n: usize| Ok(ngram_draft(history, n));
        // n-gram drafts cannot fail.
        self.input_drafted(cache.len(), cache.capacity(), cache.rewinds(), sampler, prompt_chunk, alone, &mut ngrams)
            .unwrap_or(None)
    }

    /// [`Decoding::input`] with `model`'s own drafts when it drafts for this cache
    /// ([`CausalLm::enable_drafts`] attached its state), the sequence's n-grams otherwise.
    pub fn input_with(
        &mut self,
        model: &dyn CausalLm,
        cache: &mut KvCache,
        sampler: &mut Sampler,
        prompt_chunk: usize,
        alone: bool,
    ) -> Result<Option<Input>> {
        let (len, capacity, rewinds) = (cache.len(), cache.capacity(), cache.rewinds());
        if !cache.has_draft() {
            let mut ngrams = |history: &[u32], n: usize| Ok(ngram_draft(history, n));
            return self.input_drafted(len, capacity, rewinds, sampler, prompt_chunk, alone, &mut ngrams);
        }
        let mut own = |history: &[u32], n: usize| model.draft(cache, history, n);
        self.input_drafted(len, capacity, rewinds, sampler, prompt_chunk, alone, &mut own)
    }

    #[allow(clippy::too_many_arguments)]
    fn input_drafted(
        &mut self,
        cache_len: usize,
        capacity: usize,
        rewinds: bool,
        sampler: &mut Sampler,
        prompt_chunk: usize,
        alone: bool,
        drafter: &mut Drafter<'_>,
    ) -> Result<Option<Input>> {
        if self.stop.is_some() {
            return Ok(None);
        }
        let at = Instant::now();
        if self.in_prefill() {
            let n = prompt_chunk.max(1).min(self.prompt_left());
            let tokens = self.prompt[self.prompt_fed..self.prompt_fed + n].to_vec();
            let rows = if self.prompt_fed + n == self.prompt.len() { LogitRows::Last } else { LogitRows::None };
            self.pending = Some(Pending { start: cache_len, drafts: Vec::new(), prompt_chunk: n, alone, at });
            return Ok(Some(Input { tokens, rows }));
        }
        // The last emitted token is not in the cache yet: feed it, with the drafts after it.
        let last = *self.history.last().unwrap_or(&0);
        let room = (capacity - cache_len - 1).min(self.max_tokens - self.out.len());
        // A cache that cannot go back (recurrent states) cannot drop rejected drafts.
        let mut drafts = if self.speculate > 0 && alone && rewinds && self.gate.open() {
            drafter(&self.history, self.gate.draft_len(self.speculate).min(room))?
        } else {
            Vec::new()
        };
        if !drafts.is_empty() {
            // A grammar that cannot check them gets no drafts this step (the verification
            // would report what is wrong with it).
            let valid = sampler.valid_drafts(&drafts).unwrap_or(0);
            drafts.truncate(valid);
        }
        let mut tokens = Vec::with_capacity(drafts.len() + 1);
        tokens.push(last);
        tokens.extend_from_slice(&drafts);
        let rows = if drafts.is_empty() { LogitRows::Last } else { LogitRows::All };
        self.pending = Some(Pending { start: cache_len, drafts, prompt_chunk: 0, alone, at });
        Ok(Some(Input { tokens, rows }))
    }

    /// Takes the logits rows of the last [`Decoding::input`] (fed to the model, which
    /// appended to `cache`), samples, and emits what was decided: `on_token` gets each token
    /// and the logits row it came from, `on_text` the complete text (returning `false`
    /// stops).
    #[allow(clippy::too_many_arguments)]
    pub fn absorb(
        &mut self,
        logits: &[f32],
        cache: &mut KvCache,
        sampler: &mut Sampler,
        tokenizer: &Tokenizer,
        on_text: &mut dyn FnMut(&str) -> bool,
        on_token: &mut dyn FnMut(u32, &[f32]),
    ) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Err(FucinaError::InvalidArgument { op: "Decoding::absorb", msg: "no step in flight".into() });
        };
        if p.prompt_chunk > 0 {
            self.prompt_fed += p.prompt_chunk;
            if self.in_prefill() {
                return Ok(());
            }
            let first = sampler.next(logits, &self.history)?;
            self.decided.push_back((first, logits.to_vec()));
            self.prefill_seconds = self.started.elapsed().as_secs_f64();
            self.decode_started = Some(Instant::now());
        } else if p.drafts.is_empty() {
            if self.timed_gate && p.alone {
                self.gate.record_plain(p.at.elapsed().as_secs_f64());
            }
            let next = sampler.next(logits, &self.history)?;
            self.decided.push_back((next, logits.to_vec()));
        } else {
            let verify_secs = p.at.elapsed().as_secs_f64();
            let rows = p.drafts.len() + 1;
            if !logits.len().is_multiple_of(rows) {
                return Err(FucinaError::InvalidArgument {
                    op: "Decoding::absorb",
                    msg: format!("{} logits for {rows} rows", logits.len()),
                });
            }
            let vocab = logits.len() / rows;
            // Row i predicts the token after feed[i]: keep drafts while the sampler's own
            // distribution accepts them (greedy: while they are the argmax), then the token
            // it draws instead. The kept drafts join the history while later rows are
            // verified, and leave it again: they are emitted (and pushed for good) below.
            let mark = self.history.len();
            let mut kept = 0;
            for (i, row) in logits.chunks_exact(vocab).enumerate() {
                let Some(&draft) = p.drafts.get(i) else {
                    // Every draft kept: the last row gives one more token.
                    let t = sampler.next(row, &self.history)?;
                    self.decided.push_back((t, row.to_vec()));
                    break;
                };
                let (t, keep) = sampler.verify_draft(row, &self.history, draft)?;
                self.decided.push_back((t, row.to_vec()));
                if !keep {
                    break;
                }
                self.history.push(t);
                kept += 1;
                if sampler.is_done() {
                    // A kept draft that completes the grammar ends the answer: later rows
                    // are not verified (their positions leave the cache below).
                    break;
                }
            }
            self.history.truncate(mark);
            self.gate.record(p.drafts.len(), kept, verify_secs);
            self.drafted += p.drafts.len();
            self.accepted += kept;
            // The cache keeps the fed token and the drafts that were kept.
            cache.truncate(p.start + 1 + kept);
        }
        self.emit(cache, sampler, tokenizer, on_text, on_token)
    }

    fn emit(
        &mut self,
        cache: &KvCache,
        sampler: &Sampler,
        tokenizer: &Tokenizer,
        on_text: &mut dyn FnMut(&str) -> bool,
        on_token: &mut dyn FnMut(u32, &[f32]),
    ) -> Result<()> {
        while let Some((next, row)) = self.decided.pop_front() {
            if self.out.len() >= self.max_tokens {
                self.stop = Some(StopReason::Length);
                return Ok(());
            }
            if self.stop_tokens.contains(&next) {
                self.stop = Some(StopReason::EndToken);
                return Ok(());
            }
            self.out.push(next);
            self.history.push(next);
            on_token(next, &row);
            let piece = self.text.push(&tokenizer.decode_bytes(&[next])?);
            if !piece.is_empty() && !on_text(&piece) {
                self.stop = Some(StopReason::Cancelled);
                return Ok(());
            }
            if self.decided.is_empty() && sampler.is_done() {
                // A grammar that is complete and cannot go on: the answer ends here. (The
                // grammar has followed every decided token, so it is complete after the
                // last of them.)
                self.stop = Some(StopReason::EndToken);
                return Ok(());
            }
        }
        if self.out.len() >= self.max_tokens {
            self.stop = Some(StopReason::Length);
        } else if cache.len() >= cache.capacity() {
            self.stop = Some(StopReason::ContextFull);
        }
        Ok(())
    }

    /// Ends the sequence (if it has not ended, as cancelled): drops positions computed past
    /// the end (drafts after a stop token) so the cache holds the prompt and the emitted
    /// tokens (the last one at most), sends the rest of the text, and returns the generated
    /// ids and the stats.
    pub fn finish(mut self, cache: &mut KvCache, on_text: &mut dyn FnMut(&str) -> bool) -> (Vec<u32>, GenerationStats) {
        cache.truncate(cache.len().min(self.base + self.prompt_fed + self.out.len()));
        let rest = self.text.finish();
        if !rest.is_empty() {
            on_text(&rest);
        }
        let stats = GenerationStats {
            prompt_tokens: self.prompt.len(),
            generated_tokens: self.out.len(),
            prefill_seconds: self.prefill_seconds,
            decode_seconds: self.decode_started.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            stop: self.stop.take().unwrap_or(StopReason::Cancelled),
            drafted: self.drafted,
            accepted: self.accepted,
        };
        (self.out, stats)
    }
}

/// Generates after `prompt` (token ids) into `cache`, which may already hold earlier turns
/// (the prompt then continues them). `on_text` gets each piece of complete text and returns
/// `false` to stop. The sampler's logit processor (a grammar), if any, constrains every
/// token; a complete grammar ends the answer like an end token. Returns the generated ids
/// (without the stop token) and the stats.
pub fn generate(
    model: &dyn CausalLm,
    tokenizer: &Tokenizer,
    cache: &mut KvCache,
    prompt: &[u32],
    sampler: &mut Sampler,
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<(Vec<u32>, GenerationStats)> {
    generate_observed(model, tokenizer, cache, prompt, sampler, opts, on_text, &mut |_, _| {})
}

/// [`generate`], with `on_token` told each generated token (not the stop token) and the
/// model's logits row it was sampled from, before that token's text reaches `on_text`
/// (log-probabilities are computed from it).
#[allow(clippy::too_many_arguments)]
pub fn generate_observed(
    model: &dyn CausalLm,
    tokenizer: &Tokenizer,
    cache: &mut KvCache,
    prompt: &[u32],
    sampler: &mut Sampler,
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
    on_token: &mut dyn FnMut(u32, &[f32]),
) -> Result<(Vec<u32>, GenerationStats)> {
    let mut d = Decoding::new(prompt, cache, sampler, opts)?;
    if opts.speculate > 0 && !cache.has_draft() && cache.rewinds() {
        model.enable_drafts(cache)?;
    }
    let ctx = ExecContext::current();
    while let Some(input) = d.input_with(model, cache, sampler, usize::MAX, true)? {
        let logits = ctx.run_on_pool(|| {
            let mut batch = [Segment { tokens: &input.tokens, cache: &mut *cache, rows: input.rows }];
            model.forward_batch(&mut batch)
        })?;
        let logits = logits.into_iter().next().map(|t| t.to_f32_vec()).unwrap_or_default();
        d.absorb(&logits, cache, sampler, tokenizer, on_text, on_token)?;
    }
    Ok(d.finish(cache, on_text))
}

/// One sequence of [`generate_batch`].
pub struct BatchJob<'a> {
    /// Its prompt (after what its cache holds).
    pub prompt: &'a [u32],
    /// Its cache.
    pub cache: &'a mut KvCache,
    /// Its sampler.
    pub sampler: &'a mut Sampler,
    /// What to generate.
    pub opts: &'a GenerateOptions,
    /// Its text, as in [`generate`].
    pub on_text: &'a mut dyn FnMut(&str) -> bool,
}

/// Generates for several sequences in lockstep: every step feeds each unfinished sequence
/// (a chunk of at most `prompt_chunk` prompt tokens, or its next token) in one
/// [`CausalLm::forward_batch`], so each weight is read once per step for all of them.
/// Greedy output per sequence is the same as [`generate`]'s for that sequence alone;
/// drafts are tried only when one sequence is left. Returns each sequence's ids and stats.
pub fn generate_batch(
    model: &dyn CausalLm,
    tokenizer: &Tokenizer,
    jobs: &mut [BatchJob<'_>],
    prompt_chunk: usize,
) -> Result<Vec<(Vec<u32>, GenerationStats)>> {
    let mut runs =
        jobs.iter().map(|j| Decoding::new(j.prompt, j.cache, j.sampler, j.opts)).collect::<Result<Vec<_>>>()?;
    let ctx = ExecContext::current();
    loop {
        let live = runs.iter().filter(|d| !d.is_done()).count();
        let mut inputs = Vec::with_capacity(jobs.len());
        for (d, j) in runs.iter_mut().zip(jobs.iter_mut()) {
            inputs.push(d.input(j.cache, j.sampler, prompt_chunk, live == 1));
        }
        if inputs.iter().all(Option::is_none) {
            break;
        }
        let mut batch: Vec<Segment<'_>> = jobs
            .iter_mut()
            .zip(&inputs)
            .filter_map(|(j, i)| i.as_ref().map(|i| Segment { tokens: &i.tokens, cache: &mut *j.cache, rows: i.rows }))
            .collect();
        let logits = ctx.run_on_pool(|| model.forward_batch(&mut batch))?;
        drop(batch);
        let mut logits = logits.into_iter();
        for ((d, j), i) in runs.iter_mut().zip(jobs.iter_mut()).zip(&inputs) {
            if i.is_some() {
                let rows = logits.next().map(|t| t.to_f32_vec()).unwrap_or_default();
                d.absorb(&rows, j.cache, j.sampler, tokenizer, j.on_text, &mut |_, _| {})?;
            }
        }
    }
    Ok(runs.into_iter().zip(jobs.iter_mut()).map(|(d, j)| d.finish(j.cache, j.on_text)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `windows` windows of verification steps of `secs` each keeping `kept`, then
    /// counts the steps the gate keeps closed.
    fn closed_steps(gate: &mut DraftGate, kept: usize, secs: f64) -> usize {
        for _ in 0..DraftGate::WINDOW {
            assert!(gate.open());
            gate.record(3, kept, secs);
        }
        let mut n = 0;
        while !gate.open() {
            n += 1;
        }
        n
    }

    #[test]
    fn draft_gate_compares_rates_and_backs_off() {
        let mut gate = DraftGate::default();
        // Untimed: fewer than half a draft kept per try rests.
        assert_eq!(closed_steps(&mut gate, 0, 0.02), DraftGate::REST);
        gate.record_plain(0.01);
        // A verify step costing 2x a plain one pays when it yields more than 2 tokens (1
        // kept + the step's own = 2 does not, 2 kept does).
        assert_eq!(closed_steps(&mut gate, 1, 0.02), 2 * DraftGate::REST, "second failure doubles");
        assert_eq!(closed_steps(&mut gate, 2, 0.02), 0);
        assert_eq!(closed_steps(&mut gate, 0, 0.02), DraftGate::REST, "a paying window resets the backoff");
        for _ in 0..10 {
            closed_steps(&mut gate, 0, 0.02);
        }
        assert_eq!(closed_steps(&mut gate, 0, 0.02), DraftGate::REST << DraftGate::MAX_BACKOFF);
        // Cheap verification (as fast as a plain step) pays with nothing kept.
        let mut fast = DraftGate::default();
        fast.record_plain(0.01);
        assert_eq!(closed_steps(&mut fast, 0, 0.009), 0);
    }

    #[test]
    fn draft_gate_sets_the_draft_length() {
        let mut gate = DraftGate::default();
        gate.record_plain(0.01);
        assert_eq!(gate.draft_len(8), DraftGate::FIRST_LEN);
        assert_eq!(gate.draft_len(2), 2, "never more than asked");
        let window = |gate: &mut DraftGate, kept: usize| {
            for _ in 0..DraftGate::WINDOW {
                let len = gate.draft_len(16);
                gate.record(len, kept.min(len), 0.001);
            }
            gate.draft_len(16)
        };
        assert_eq!(window(&mut gate, 2), 4, "all kept: doubles");
        assert_eq!(window(&mut gate, 99), 8);
        assert_eq!(window(&mut gate, 99), 16);
        assert_eq!(window(&mut gate, 99), 16, "capped by the request");
        assert_eq!(window(&mut gate, 2), 8, "under a quarter kept: halves");
        assert_eq!(window(&mut gate, 3), 8, "between: stays");
        assert_eq!(window(&mut gate, 0), 4);
    }

    #[test]
    fn utf8_stream_holds_cut_characters() {
        let mut s = Utf8Stream::default();
        let e = "é😀".as_bytes();
        assert_eq!(s.push(&e[..1]), "");
        assert_eq!(s.push(&e[1..3]), "é");
        assert_eq!(s.push(&e[3..]), "😀");
        assert_eq!(s.push(&[0xff, b'a']), "\u{fffd}a");
        assert_eq!(s.push(&e[..1]), "");
        assert_eq!(s.finish(), "\u{fffd}");
        // An invalid byte, then a character cut across two tokens: the character survives.
        assert_eq!(s.push(&[0xff, e[0]]), "\u{fffd}");
        assert_eq!(s.push(&e[1..2]), "é");
        // Two invalid bytes and a cut emoji in one push.
        assert_eq!(s.push(&[0xc0, 0x80, b'x', e[2], e[3]]), "\u{fffd}\u{fffd}x");
        assert_eq!(s.push(&e[4..]), "😀");
        assert_eq!(s.finish(), "");
    }
}
