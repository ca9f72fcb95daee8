//! The generation loop shared by the language models: prefill the prompt in one batch,
//! then decode one token at a time, sampling, streaming text out as whole UTF-8 characters,
//! and stopping on an end token or the token budget.

use super::kv_cache::KvCache;
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
    fn new_cache(&self, capacity: usize, dtype: DType) -> Result<KvCache>;
    /// Logits `[seq, vocab]` for `tokens` after the cache's positions (only the last row
    /// unless `all_logits`), appending to the cache.
    fn forward(&self, tokens: &[u32], cache: &mut KvCache, all_logits: bool) -> Result<Tensor<axes![seq, vocab]>>;
}

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
    let t0 = Instant::now();
    let ctx = ExecContext::current();
    let logits = ctx.run_on_pool(|| model.forward(prompt, cache, false))?.to_f32_vec();
    let mut history: Vec<u32> = opts.context.iter().chain(prompt).copied().collect();
    // Tokens decided but not yet emitted, each with the logits row it was picked from.
    let mut decided: std::collections::VecDeque<(u32, Vec<f32>)> = std::collections::VecDeque::new();
    let first = sampler.next(&logits, &history)?;
    decided.push_back((first, logits));
    let prefill_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut out = Vec::new();
    let mut text = Utf8Stream::default();
    // Drafts are verified by the sampler's acceptance rule; with a grammar every token is
    // sampled one at a time.
    let speculate = opts.speculate > 0 && !sampler.has_processor();
    let mut gate = DraftGate::default();
    // The gate's decisions change which random numbers a sampled answer draws, so a seeded
    // sampled run must not depend on timing: only greedy decoding (whose output drafts never
    // change) lets the gate time its steps; sampled decoding uses its counting rule.
    let timed_gate = sampler.params().temperature == 0.0;
    let (mut drafted, mut accepted) = (0, 0);
    let stop = 'gen: loop {
        while let Some((next, row)) = decided.pop_front() {
            if out.len() >= opts.max_tokens {
                break 'gen StopReason::Length;
            }
            if opts.stop_tokens.contains(&next) {
                break 'gen StopReason::EndToken;
            }
            out.push(next);
            history.push(next);
            on_token(next, &row);
            let piece = text.push(&tokenizer.decode_bytes(&[next])?);
            if !piece.is_empty() && !on_text(&piece) {
                break 'gen StopReason::Cancelled;
            }
            if sampler.is_done() {
                // A grammar that is complete and cannot go on: the answer ends here.
                break 'gen StopReason::EndToken;
            }
        }
        if out.len() >= opts.max_tokens {
            break StopReason::Length;
        }
        if cache.len() >= cache.capacity() {
            break StopReason::ContextFull;
        }
        // The last emitted token is not in the cache yet: feed it, with the drafts after it.
        let last = *history.last().unwrap_or(&0);
        let room = (cache.capacity() - cache.len() - 1).min(opts.max_tokens - out.len());
        let drafts = if speculate && gate.open() {
            ngram_draft(&history, gate.draft_len(opts.speculate).min(room))
        } else {
            Vec::new()
        };
        let step = Instant::now();
        if drafts.is_empty() {
            let logits = ctx.run_on_pool(|| model.forward(&[last], cache, false))?.to_f32_vec();
            if timed_gate {
                gate.record_plain(step.elapsed().as_secs_f64());
            }
            let next = sampler.next(&logits, &history)?;
            decided.push_back((next, logits));
            continue;
        }
        let start = cache.len();
        let mut feed = Vec::with_capacity(drafts.len() + 1);
        feed.push(last);
        feed.extend_from_slice(&drafts);
        let rows = ctx.run_on_pool(|| model.forward(&feed, cache, true))?.to_f32_vec();
        let verify_secs = step.elapsed().as_secs_f64();
        let vocab = rows.len() / feed.len();
        // Row i predicts the token after feed[i]: keep drafts while the sampler's own
        // distribution accepts them (greedy: while they are the argmax), then the token it
        // draws instead.
        // The kept drafts join the history while later rows are verified, and leave it again:
        // they are emitted (and pushed for good) with the others below.
        let mark = history.len();
        let mut kept = 0;
        for (i, row) in rows.chunks_exact(vocab).enumerate() {
            let Some(&draft) = drafts.get(i) else {
                // Every draft kept: the last row gives one more token.
                let t = sampler.next(row, &history)?;
                decided.push_back((t, row.to_vec()));
                break;
            };
            let (t, keep) = sampler.verify_draft(row, &history, draft);
            decided.push_back((t, row.to_vec()));
            if !keep {
                break;
            }
            history.push(t);
            kept += 1;
        }
        history.truncate(mark);
        gate.record(drafts.len(), kept, verify_secs);
        drafted += drafts.len();
        accepted += kept;
        // The cache keeps `last` and the drafts that were kept.
        cache.truncate(start + 1 + kept);
    };
    // Positions computed past the end (drafts after a stop token) are dropped: the cache
    // holds the prompt and the emitted tokens, the last one at most.
    cache.truncate(cache.len().min(base + prompt.len() + out.len()));
    let rest = text.finish();
    if !rest.is_empty() {
        on_text(&rest);
    }
    let stats = GenerationStats {
        prompt_tokens: prompt.len(),
        generated_tokens: out.len(),
        prefill_seconds,
        decode_seconds: t1.elapsed().as_secs_f64(),
        stop,
        drafted,
        accepted,
    };
    Ok((out, stats))
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
