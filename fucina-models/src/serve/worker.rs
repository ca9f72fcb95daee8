//! The model worker: one thread owns the model and `slots` KV caches, and serves up to
//! that many requests at once by continuous batching. Each step is one forward pass over
//! every running request (one token each, or a chunk of a new request's prompt), so each
//! weight is read once per step for all of them; requests join the batch and leave it
//! between steps. A slot's cache keeps its last request's tokens, and a new request takes
//! the free slot whose cache shares the longest prefix with its prompt (a chat that grows
//! turn by turn reuses it instead of recomputing).

use crate::llm::batch::Segment;
use crate::llm::generate::{CausalLm, Decoding, GenerateOptions, Input, StopReason};
use crate::llm::grammar::GrammarConstraint;
use crate::llm::sampling::token_logprobs;
use crate::llm::sampling::{Sampler, SamplingParams};
use crate::llm::tokenizer::Tokenizer;
use crate::llm::{KvCache, KvType};
use fucina::prelude::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// Prompt tokens fed per step while other requests are decoding: a new request's prefill
/// goes in chunks of this many, so running streams get a token every step.
pub const PREFILL_CHUNK_SHARED: usize = 128;
/// Prompt tokens per step when no request is decoding.
pub const PREFILL_CHUNK_ALONE: usize = 512;

/// What a request asks the worker to do.
pub struct Job {
    /// Prompt token ids (checked against the context length by the caller).
    pub prompt: Vec<u32>,
    /// Sampling.
    pub params: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop strings: generation ends before the first one (which is not sent).
    pub stop: Vec<String>,
    /// The grammar every token must follow (`response_format`), if any.
    pub grammar: Option<GrammarConstraint>,
    /// Log-probabilities: `None` off, `Some(n)` each token's and the `n` most likely.
    pub logprobs: Option<usize>,
    /// The prompt opened the answer's `<think>` block (DeepSeek-R1), so its reasoning
    /// tokens count from the first.
    pub opened_reasoning: bool,
    /// Where the output goes.
    pub events: UnboundedSender<Event>,
}

/// One generated token's log-probability under the model's distribution (before bias,
/// penalties, grammar and temperature) and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token's bytes (a piece of a UTF-8 character at times).
    pub bytes: Vec<u8>,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The most likely tokens, most likely first: bytes and log-probability.
    pub top: Vec<(Vec<u8>, f32)>,
}

/// What the worker sends back for a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A piece of generated text (whole UTF-8 characters).
    Text(String),
    /// The log-probabilities of the tokens whose text starts in the next `Text` (sent just
    /// before it; at the end, before `Done`).
    Logprobs(Vec<TokenLogprob>),
    /// The end: OpenAI's `finish_reason` and the token counts.
    Done {
        /// `stop` (end token or stop string) or `length`.
        finish: &'static str,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens.
        completion_tokens: usize,
        /// Of those, the answer's `<think>` block (tags included; 0 without one).
        reasoning_tokens: usize,
    },
    /// The request failed.
    Error(String),
}

/// The model thread's handle: send jobs, up to `slots` run at once. A step that panics is
/// answered with an error to the requests in it, their caches are reset and the thread
/// goes on; if the thread ever stops, [`Worker::is_alive`] says so (and `/health` with it).
#[derive(Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
    alive: Arc<AtomicBool>,
    panics: Arc<AtomicU64>,
    slots: usize,
    load: Arc<Load>,
}

/// What the model thread is doing, for `/health`.
#[derive(Debug, Default)]
pub struct Load {
    /// Requests running now.
    pub busy: AtomicUsize,
    /// Requests waiting for a slot.
    pub queued: AtomicUsize,
    /// The most requests one forward pass has served so far.
    pub widest_step: AtomicUsize,
    /// Forward passes run so far.
    pub steps: AtomicU64,
}

/// Clears the liveness flag when the model thread ends, however it ends.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// How the model thread runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Positions per slot's cache (a request's prompt plus answer).
    pub capacity: usize,
    /// How the caches store keys and values.
    pub kv: KvType,
    /// Tokens that end an answer.
    pub stop_tokens: Vec<u32>,
    /// Most drafted tokens per step (0: off; never with a grammar, and only while one
    /// request runs: with several, the batch already uses the spare compute).
    pub speculate: usize,
    /// Requests served at once (at least 1), each with its own cache, taken when the slot
    /// first serves.
    pub slots: usize,
}

impl Worker {
    /// Starts the model thread for `model` on `ctx`.
    pub fn spawn(
        model: Arc<dyn CausalLm + Send>,
        tokenizer: Arc<Tokenizer>,
        ctx: ExecContext,
        opts: WorkerOptions,
    ) -> Result<Worker> {
        if opts.slots == 0 {
            return Err(FucinaError::InvalidArgument { op: "Worker::spawn", msg: "no slots".into() });
        }
        // The first slot's cache is taken now, so a context that does not fit fails at
        // start-up rather than on the first request.
        let first = model.new_cache(opts.capacity, opts.kv)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let alive = Arc::new(AtomicBool::new(true));
        let panics = Arc::new(AtomicU64::new(0));
        let (guard, counter) = (AliveGuard(alive.clone()), panics.clone());
        let slots = opts.slots;
        let load = Arc::new(Load::default());
        let shared = load.clone();
        std::thread::Builder::new()
            .name("fucina-model".into())
            .spawn(move || {
                let _alive = guard;
                let _g = ctx.enter();
                let mut engine = Engine::new(&*model, &tokenizer, &ctx, opts, first, counter, shared);
                engine.run(&rx);
            })
            .map_err(|e| FucinaError::ThreadPool(e.to_string()))?;
        Ok(Worker { jobs: tx, alive, panics, slots, load })
    }

    /// Queues a job; fails only if the model thread is gone.
    pub fn submit(&self, job: Job) -> std::result::Result<(), String> {
        if !self.is_alive() {
            return Err("the model thread has stopped".to_string());
        }
        self.jobs.send(job).map_err(|_| "the model thread has stopped".to_string())
    }

    /// Whether the model thread is running.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Steps (or jobs) that panicked and were recovered from so far.
    pub fn recovered_panics(&self) -> u64 {
        self.panics.load(Ordering::SeqCst)
    }

    /// Requests served at once.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// What the model thread is doing.
    pub fn load(&self) -> &Load {
        &self.load
    }
}

/// A cache and the tokens it holds.
struct Slot {
    cache: Option<KvCache>,
    fed: Vec<u32>,
    /// The step it last served in (the least recently used free slot is reused first).
    used_at: u64,
    /// Its cache did not fit in memory: not used.
    disabled: bool,
}

/// A request being served.
struct Active {
    slot: usize,
    decoding: Decoding,
    sampler: Sampler,
    reply: Reply,
    /// Prompt tokens the slot's cache already held.
    common: usize,
    prompt: Vec<u32>,
    /// Its feed in the current step.
    input: Option<Input>,
}

/// The continuous-batching loop and its state.
struct Engine<'a> {
    model: &'a dyn CausalLm,
    tokenizer: &'a Tokenizer,
    ctx: &'a ExecContext,
    opts: WorkerOptions,
    slots: Vec<Slot>,
    active: Vec<Active>,
    queue: VecDeque<Job>,
    step: u64,
    panics: Arc<AtomicU64>,
    load: Arc<Load>,
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown cause".into())
}

impl<'a> Engine<'a> {
    fn new(
        model: &'a dyn CausalLm,
        tokenizer: &'a Tokenizer,
        ctx: &'a ExecContext,
        opts: WorkerOptions,
        first: KvCache,
        panics: Arc<AtomicU64>,
        load: Arc<Load>,
    ) -> Engine<'a> {
        let mut slots: Vec<Slot> =
            (0..opts.slots).map(|_| Slot { cache: None, fed: Vec::new(), used_at: 0, disabled: false }).collect();
        slots[0].cache = Some(first);
        Engine { model, tokenizer, ctx, opts, slots, active: Vec::new(), queue: VecDeque::new(), step: 0, panics, load }
    }

    fn run(&mut self, rx: &mpsc::Receiver<Job>) {
        loop {
            if self.active.is_empty() && self.queue.is_empty() {
                match rx.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = rx.try_recv() {
                self.queue.push_back(job);
            }
            self.admit();
            self.load.queued.store(self.queue.len(), Ordering::Relaxed);
            self.load.busy.store(self.active.len(), Ordering::Relaxed);
            if !self.active.is_empty() {
                self.step();
            }
            self.load.busy.store(self.active.len(), Ordering::Relaxed);
        }
    }

    /// Starts queued jobs in free slots, first come first served; a client that left while
    /// queued is dropped.
    fn admit(&mut self) {
        self.queue.retain(|j| !j.events.is_closed());
        while !self.queue.is_empty() {
            let busy: Vec<usize> = self.active.iter().map(|a| a.slot).collect();
            let free: Vec<usize> =
                (0..self.slots.len()).filter(|&i| !busy.contains(&i) && !self.slots[i].disabled).collect();
            if free.is_empty() {
                return;
            }
            let Some(job) = self.queue.pop_front() else { return };
            // The free slot sharing the longest prefix with the prompt; then the least
            // recently used (an empty slot counts as never used).
            let lcp = |s: &Slot| s.fed.iter().zip(&job.prompt).take_while(|(a, b)| a == b).count();
            let Some(&slot) =
                free.iter().max_by_key(|&&i| (lcp(&self.slots[i]), std::cmp::Reverse(self.slots[i].used_at)))
            else {
                return;
            };
            if self.slots[slot].cache.is_none() {
                match self.model.new_cache(self.opts.capacity, self.opts.kv) {
                    Ok(c) => self.slots[slot].cache = Some(c),
                    Err(e) => {
                        // No memory for another cache: serve with the slots that have one
                        // (slot 0 always has), and let the job wait for one of them.
                        for s in &mut self.slots {
                            s.disabled = s.cache.is_none();
                        }
                        let n = self.slots.iter().filter(|s| !s.disabled).count();
                        eprintln!("serving {n} requests at once: another KV cache does not fit ({e})");
                        self.queue.push_front(job);
                        continue;
                    }
                }
            }
            let events = job.events.clone();
            let started = std::panic::catch_unwind(AssertUnwindSafe(|| self.start(slot, job)));
            match started {
                Ok(Ok(a)) => self.active.push(a),
                Ok(Err(e)) => {
                    self.reset(slot);
                    let _ = events.send(Event::Error(e.to_string()));
                }
                Err(p) => {
                    self.reset(slot);
                    self.panics.fetch_add(1, Ordering::SeqCst);
                    let _ = events.send(Event::Error(format!(
                        "internal error in the model thread ({}); its state was reset",
                        panic_text(&*p)
                    )));
                }
            }
        }
    }

    fn start(&mut self, slot: usize, mut job: Job) -> Result<Active> {
        let s = &mut self.slots[slot];
        let cache = s.cache.as_mut().ok_or(FucinaError::InvalidArgument { op: "serve", msg: "no cache".into() })?;
        // Reuse the cached prefix; at least the last prompt token is always fed again.
        let common = s.fed.iter().zip(&job.prompt).take_while(|(a, b)| a == b).count();
        let common = common.min(job.prompt.len().saturating_sub(1));
        // A recurrent cache keeps no prefix: then the whole prompt is fed again.
        let common = cache.truncate(common);
        s.fed.truncate(common);
        let mut sampler = Sampler::new(job.params.clone());
        if let Some(g) = job.grammar.take() {
            sampler.set_processor(Some(Box::new(g)));
        }
        // The reused prefix is history too: the penalties and the drafts look back over it.
        let gen = GenerateOptions {
            max_tokens: job.max_tokens,
            stop_tokens: self.opts.stop_tokens.clone(),
            speculate: self.opts.speculate,
            context: s.fed.clone(),
        };
        let decoding = Decoding::new(&job.prompt[common..], cache, &sampler, &gen)?;
        // A model that drafts its own tokens follows the slot's cache from its first request
        // on (the state rides along with the cache and its kept prefix).
        if self.opts.speculate > 0 && !cache.has_draft() && cache.rewinds() {
            self.model.enable_drafts(cache)?;
        }
        let prompt = std::mem::take(&mut job.prompt);
        Ok(Active { slot, decoding, sampler, reply: Reply::new(job, prompt.len()), common, prompt, input: None })
    }

    /// Forgets a slot's cache contents (after an error or a panic left them half written).
    fn reset(&mut self, slot: usize) {
        if let Some(c) = self.slots[slot].cache.as_mut() {
            c.clear();
        }
        self.slots[slot].fed.clear();
    }

    /// One forward pass over every running request.
    fn step(&mut self) {
        self.step += 1;
        // A client that went away stops its request (a prefill would otherwise run on).
        for a in &mut self.active {
            if a.reply.events.is_closed() {
                a.reply.cancelled = true;
            }
        }
        let decoding = self.active.iter().filter(|a| !a.decoding.in_prefill() && !a.reply.cancelled).count();
        let mut budget = if decoding > 0 { PREFILL_CHUNK_SHARED } else { PREFILL_CHUNK_ALONE };
        let alone = self.active.len() == 1;
        for a in &mut self.active {
            a.input = None;
            if a.reply.cancelled {
                continue;
            }
            let Some(cache) = self.slots[a.slot].cache.as_mut() else { continue };
            if a.decoding.in_prefill() {
                if budget == 0 {
                    continue;
                }
                a.input = a.decoding.input(cache, &mut a.sampler, budget, false);
                budget -= a.input.as_ref().map_or(0, |i| i.tokens.len().min(budget));
            } else {
                // The model's own drafts where it makes them (GLM-4.5's next-token layer);
                // a drafter that fails leaves the step without drafts.
                a.input = match a.decoding.input_with(self.model, cache, &mut a.sampler, 0, alone) {
                    Ok(i) => i,
                    Err(e) => {
                        eprintln!("drafting failed ({e}); decoding without drafts");
                        a.decoding.input(cache, &mut a.sampler, 0, false)
                    }
                };
            }
        }
        let mut caches: Vec<Option<&mut KvCache>> = self.slots.iter_mut().map(|s| s.cache.as_mut()).collect();
        let mut batch: Vec<Segment<'_>> = Vec::new();
        let mut members = Vec::new();
        for (k, a) in self.active.iter().enumerate() {
            if let (Some(i), Some(cache)) = (a.input.as_ref(), caches[a.slot].take()) {
                batch.push(Segment { tokens: &i.tokens, cache, rows: i.rows });
                members.push(k);
            }
        }
        self.load.widest_step.fetch_max(batch.len(), Ordering::Relaxed);
        self.load.steps.fetch_add(1, Ordering::Relaxed);
        let (model, ctx) = (self.model, self.ctx);
        let ran = if batch.is_empty() {
            Ok(Ok(Vec::new()))
        } else {
            std::panic::catch_unwind(AssertUnwindSafe(|| ctx.run_on_pool(|| model.forward_batch(&mut batch))))
        };
        drop(batch);
        match ran {
            Ok(Ok(logits)) => {
                for (k, t) in members.into_iter().zip(logits) {
                    let rows = t.to_f32_vec();
                    let a = &mut self.active[k];
                    let Some(cache) = self.slots[a.slot].cache.as_mut() else { continue };
                    let reply = RefCell::new(&mut a.reply);
                    let tok = self.tokenizer;
                    let absorbed = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        a.decoding.absorb(
                            &rows,
                            cache,
                            &mut a.sampler,
                            tok,
                            &mut |piece| reply.borrow_mut().text(piece),
                            &mut |id, l| reply.borrow_mut().token(tok, id, l),
                        )
                    }));
                    match absorbed {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => a.reply.failed = Some(e.to_string()),
                        Err(p) => {
                            self.panics.fetch_add(1, Ordering::SeqCst);
                            a.reply.failed = Some(format!(
                                "internal error in the model thread ({}); its state was reset",
                                panic_text(&*p)
                            ));
                        }
                    }
                }
            }
            Ok(Err(e)) => {
                for &k in &members {
                    self.active[k].reply.failed = Some(e.to_string());
                }
            }
            Err(p) => {
                self.panics.fetch_add(1, Ordering::SeqCst);
                let what = panic_text(&*p);
                for &k in &members {
                    self.active[k].reply.failed =
                        Some(format!("internal error in the model thread ({what}); its state was reset"));
                }
            }
        }
        self.retire();
    }

    /// Answers and frees the requests that ended.
    fn retire(&mut self) {
        let step = self.step;
        let mut k = 0;
        while k < self.active.len() {
            let a = &self.active[k];
            if !(a.decoding.is_done() || a.reply.cancelled || a.reply.failed.is_some()) {
                k += 1;
                continue;
            }
            let a = self.active.swap_remove(k);
            let slot = a.slot;
            self.slots[slot].used_at = step;
            if let Some(e) = a.reply.failed.clone() {
                // The cache may hold part of the request: forget it.
                self.reset(slot);
                let _ = a.reply.events.send(Event::Error(e));
                continue;
            }
            let Some(cache) = self.slots[slot].cache.as_mut() else { continue };
            let Active { decoding, mut reply, common, prompt, .. } = a;
            let cell = RefCell::new(&mut reply);
            let (out, stats) = decoding.finish(cache, &mut |p| cell.borrow_mut().text(p));
            let len = cache.len();
            let fed = &mut self.slots[slot].fed;
            fed.extend_from_slice(&prompt[common..]);
            fed.extend_from_slice(&out);
            // The last generated token was never fed back, so the cache holds one fewer;
            // a cancelled prefill holds less still.
            fed.truncate(len);
            let thought = reasoning_tokens(self.tokenizer, &out, reply.opened_reasoning);
            reply.done(stats.stop, out.len(), thought);
        }
    }
}

/// A request's output: text held back while it could still become a stop string,
/// log-probabilities sent with the text their token starts in.
struct Reply {
    stop: Vec<String>,
    hold: usize,
    logprobs: Option<usize>,
    events: UnboundedSender<Event>,
    prompt_tokens: usize,
    text: String,
    sent: usize,
    stopped_by_string: bool,
    /// Log-probabilities waiting, keyed by where their token's bytes start in the answer.
    pending: Vec<(usize, TokenLogprob)>,
    raw: usize,
    cancelled: bool,
    failed: Option<String>,
    opened_reasoning: bool,
}

impl Reply {
    fn new(job: Job, prompt_tokens: usize) -> Reply {
        Reply {
            hold: job.stop.iter().map(|s| s.len()).max().unwrap_or(0),
            opened_reasoning: job.opened_reasoning,
            stop: job.stop,
            logprobs: job.logprobs,
            events: job.events,
            prompt_tokens,
            text: String::new(),
            sent: 0,
            stopped_by_string: false,
            pending: Vec::new(),
            raw: 0,
            cancelled: false,
            failed: None,
        }
    }

    fn flush(&mut self, upto: usize) {
        let k = self.pending.iter().take_while(|(at, _)| *at < upto).count();
        if k > 0 {
            let _ = self.events.send(Event::Logprobs(self.pending.drain(..k).map(|(_, e)| e).collect()));
        }
    }

    fn token(&mut self, tok: &Tokenizer, id: u32, logits: &[f32]) {
        let Some(n) = self.logprobs else { return };
        let bytes = tok.decode_bytes(&[id]).unwrap_or_default();
        let (logprob, top) = token_logprobs(logits, id, n);
        let top = top.into_iter().map(|(t, l)| (tok.decode_bytes(&[t]).unwrap_or_default(), l)).collect();
        let len = bytes.len();
        self.pending.push((self.raw, TokenLogprob { bytes, logprob, top }));
        self.raw += len;
    }

    /// Takes a piece of text; `false` stops the request (a stop string, or the client left).
    fn text(&mut self, piece: &str) -> bool {
        if self.stopped_by_string {
            return false;
        }
        self.text.push_str(piece);
        let sent = self.sent;
        if let Some(at) = self.stop.iter().filter_map(|s| self.text[sent..].find(s.as_str()).map(|i| sent + i)).min() {
            self.flush(at);
            self.pending.clear();
            if at > sent {
                let _ = self.events.send(Event::Text(self.text[sent..at].to_string()));
            }
            self.sent = at;
            self.stopped_by_string = true;
            return false;
        }
        // Hold back what could still become the start of a stop string.
        let mut upto = self.text.len().saturating_sub(self.hold.saturating_sub(1));
        while !self.text.is_char_boundary(upto) {
            upto -= 1;
        }
        if upto > sent {
            self.flush(upto);
            let ok = self.events.send(Event::Text(self.text[sent..upto].to_string())).is_ok();
            self.sent = upto;
            if !ok {
                self.cancelled = true; // the client went away: stop generating
            }
            return ok;
        }
        true
    }

    fn done(&mut self, stop: StopReason, completion_tokens: usize, reasoning_tokens: usize) {
        if !self.stopped_by_string {
            self.flush(usize::MAX);
            if self.sent < self.text.len() {
                let _ = self.events.send(Event::Text(self.text[self.sent..].to_string()));
            }
        }
        let finish = match stop {
            StopReason::EndToken => "stop",
            StopReason::Cancelled if self.stopped_by_string => "stop",
            _ => "length",
        };
        let _ = self.events.send(Event::Done {
            finish,
            prompt_tokens: self.prompt_tokens,
            completion_tokens,
            reasoning_tokens,
        });
    }
}

/// How many of the generated tokens `out` are its `<think>` block: from an opening `<think>`
/// token at the start (from the first token when the prompt `opened` the block) through the
/// closing `</think>` (all of them when it never closed); 0 when the answer does not open
/// with one or the vocabulary has no such tokens.
pub fn reasoning_tokens(tok: &Tokenizer, out: &[u32], opened: bool) -> usize {
    let (Some(open), Some(close)) = (tok.token_id("<think>"), tok.token_id("</think>")) else {
        return 0;
    };
    if !opened && out.first() != Some(&open) {
        return 0;
    }
    out.iter().position(|&t| t == close).map_or(out.len(), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::assets::default_model;

    #[test]
    fn reasoning_tokens_count_the_think_block() {
        let lm = crate::lm::open(&default_model(), false).unwrap();
        let tok = Tokenizer::from_gguf(&lm.header).unwrap();
        let (open, close) = (tok.token_id("<think>").unwrap(), tok.token_id("</think>").unwrap());
        assert_eq!(reasoning_tokens(&tok, &[open, 5, 6, close, 7, 8], false), 4);
        assert_eq!(reasoning_tokens(&tok, &[open, 5, 6], false), 3, "never closed: all of it");
        assert_eq!(reasoning_tokens(&tok, &[5, open, 6, close], false), 0, "not at the start");
        assert_eq!(reasoning_tokens(&tok, &[], false), 0);
        assert_eq!(reasoning_tokens(&tok, &[5, 6, close, 7], true), 3, "opened by the prompt");
    }

    /// A model that panics on a prompt starting with token 0, and otherwise defers to the
    /// tiny Qwen3.
    struct Flaky(Arc<dyn CausalLm + Send>);

    impl CausalLm for Flaky {
        fn vocab_size(&self) -> usize {
            self.0.vocab_size()
        }
        fn context_length(&self) -> usize {
            self.0.context_length()
        }
        fn new_cache(&self, capacity: usize, kv: KvType) -> Result<KvCache> {
            self.0.new_cache(capacity, kv)
        }
        fn forward(
            &self,
            tokens: &[u32],
            cache: &mut KvCache,
            rows: crate::llm::LogitRows,
        ) -> Result<Tensor<axes![seq, vocab]>> {
            assert!(tokens.first() != Some(&0), "injected fault");
            self.0.forward(tokens, cache, rows)
        }
    }

    fn run(w: &Worker, prompt: Vec<u32>) -> Vec<Event> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let params = SamplingParams::default();
        let job = Job {
            prompt,
            params,
            max_tokens: 3,
            stop: vec![],
            grammar: None,
            logprobs: None,
            opened_reasoning: false,
            events: tx,
        };
        w.submit(job).unwrap();
        let mut out = Vec::new();
        while let Some(e) = rx.blocking_recv() {
            let end = !matches!(e, Event::Text(_));
            out.push(e);
            if end {
                break;
            }
        }
        out
    }

    #[test]
    fn a_panicking_job_is_answered_and_the_thread_goes_on() {
        let ctx = ExecContext::with_backend(BackendKind::Native, 1).unwrap();
        let lm = {
            let _g = ctx.enter();
            crate::lm::open(&default_model(), false).unwrap()
        };
        let tok = Arc::new(Tokenizer::from_gguf(&lm.header).unwrap());
        let model: Arc<dyn CausalLm + Send> = Arc::new(Flaky(lm.model.clone()));
        let opts = WorkerOptions { capacity: 64, kv: KvType::F32, stop_tokens: vec![], speculate: 0, slots: 2 };
        let w = Worker::spawn(model, tok, ctx, opts).unwrap();
        let before = run(&w, vec![5, 6, 7]);
        assert!(matches!(before.last(), Some(Event::Done { .. })), "{before:?}");
        let failed = run(&w, vec![0, 1, 2]);
        match failed.last() {
            Some(Event::Error(e)) => assert!(e.contains("injected fault") && e.contains("reset"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(w.is_alive());
        assert_eq!(w.recovered_panics(), 1);
        // The next request is served, with the same answer as before the fault.
        assert_eq!(run(&w, vec![5, 6, 7]), before);
    }
}
