//! The model worker: one thread owns the model's KV cache and runs requests in arrival
//! order, so concurrent requests queue and never share cache positions. The cache keeps the
//! previous request's tokens, and a request that starts with the same tokens (a chat that
//! grows turn by turn) reuses them instead of recomputing.

use crate::llm::generate::{generate_observed, CausalLm, GenerateOptions, StopReason};
use crate::llm::grammar::GrammarConstraint;
use crate::llm::sampling::token_logprobs;
use crate::llm::sampling::{Sampler, SamplingParams};
use crate::llm::tokenizer::Tokenizer;
use crate::llm::KvCache;
use fucina::prelude::*;
use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

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
    },
    /// The request failed.
    Error(String),
}

/// The model thread's handle: send jobs, they run one at a time. A job that panics is
/// answered with an error, the cache is reset and the thread goes on with the next job;
/// if the thread ever stops, [`Worker::is_alive`] says so (and `/health` with it).
#[derive(Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
    alive: Arc<AtomicBool>,
    panics: Arc<AtomicU64>,
}

/// Clears the liveness flag when the model thread ends, however it ends.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Worker {
    /// Starts the model thread for `model` on `ctx` with a cache of `capacity` positions,
    /// drafting up to `speculate` tokens per step (0: off; not with a grammar).
    pub fn spawn(
        model: Arc<dyn CausalLm + Send>,
        tokenizer: Arc<Tokenizer>,
        ctx: ExecContext,
        capacity: usize,
        kv: DType,
        stop_tokens: Vec<u32>,
        speculate: usize,
    ) -> Result<Worker> {
        let cache = model.new_cache(capacity, kv)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let alive = Arc::new(AtomicBool::new(true));
        let panics = Arc::new(AtomicU64::new(0));
        let (guard, counter) = (AliveGuard(alive.clone()), panics.clone());
        std::thread::Builder::new()
            .name("fucina-model".into())
            .spawn(move || {
                let _alive = guard;
                let _g = ctx.enter();
                let mut state = State { cache, fed: Vec::new(), speculate };
                for job in rx {
                    let events = job.events.clone();
                    let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        state.run(&*model, &tokenizer, &stop_tokens, job);
                    }));
                    if let Err(p) = run {
                        // The cache may be half written: forget it and go on.
                        state.cache.clear();
                        state.fed.clear();
                        counter.fetch_add(1, Ordering::SeqCst);
                        let what = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown cause".into());
                        let _ = events.send(Event::Error(format!(
                            "internal error in the model thread ({what}); its state was reset"
                        )));
                    }
                }
            })
            .map_err(|e| FucinaError::ThreadPool(e.to_string()))?;
        Ok(Worker { jobs: tx, alive, panics })
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

    /// Jobs that panicked and were recovered from so far.
    pub fn recovered_panics(&self) -> u64 {
        self.panics.load(Ordering::SeqCst)
    }
}

/// The cache and the tokens it holds.
struct State {
    cache: KvCache,
    fed: Vec<u32>,
    /// Most drafted tokens per step (0: no speculation).
    speculate: usize,
}

impl State {
    fn run(&mut self, model: &dyn CausalLm, tok: &Tokenizer, stop_tokens: &[u32], mut job: Job) {
        // Reuse the cached prefix; at least the last prompt token is always fed again.
        let common = self.fed.iter().zip(&job.prompt).take_while(|(a, b)| a == b).count();
        let common = common.min(job.prompt.len().saturating_sub(1));
        self.cache.truncate(common);
        self.fed.truncate(common);
        let mut sampler = Sampler::new(job.params.clone());
        if let Some(g) = job.grammar.take() {
            sampler.set_processor(Some(Box::new(g)));
        }
        // The reused prefix is history too: the penalties and the drafts look back over it.
        let opts = GenerateOptions {
            max_tokens: job.max_tokens,
            stop_tokens: stop_tokens.to_vec(),
            speculate: self.speculate,
            context: self.fed.clone(),
        };
        let mut text = String::new();
        let mut sent = 0;
        let mut stopped_by_string = false;
        let hold = job.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        let events = job.events.clone();
        // Log-probabilities wait, keyed by where their token's bytes start in the answer,
        // until the text they start in is sent.
        let pending: RefCell<Vec<(usize, TokenLogprob)>> = RefCell::new(Vec::new());
        let flush = |upto: usize| {
            let mut p = pending.borrow_mut();
            let k = p.iter().take_while(|(at, _)| *at < upto).count();
            if k > 0 {
                let _ = events.send(Event::Logprobs(p.drain(..k).map(|(_, e)| e).collect()));
            }
        };
        let mut raw = 0usize;
        let mut on_token = |id: u32, logits: &[f32]| {
            let Some(n) = job.logprobs else { return };
            let bytes = tok.decode_bytes(&[id]).unwrap_or_default();
            let (logprob, top) = token_logprobs(logits, id, n);
            let top = top.into_iter().map(|(t, l)| (tok.decode_bytes(&[t]).unwrap_or_default(), l)).collect();
            let len = bytes.len();
            pending.borrow_mut().push((raw, TokenLogprob { bytes, logprob, top }));
            raw += len;
        };
        let mut on_text = |piece: &str| {
            text.push_str(piece);
            if let Some(at) = job.stop.iter().filter_map(|s| text[sent..].find(s.as_str()).map(|i| sent + i)).min() {
                flush(at);
                pending.borrow_mut().clear();
                if at > sent {
                    let _ = events.send(Event::Text(text[sent..at].to_string()));
                }
                sent = at;
                stopped_by_string = true;
                return false;
            }
            // Hold back what could still become the start of a stop string.
            let mut upto = text.len().saturating_sub(hold.saturating_sub(1));
            while !text.is_char_boundary(upto) {
                upto -= 1;
            }
            if upto > sent {
                flush(upto);
                let ok = events.send(Event::Text(text[sent..upto].to_string())).is_ok();
                sent = upto;
                return ok; // the client went away: stop generating
            }
            true
        };
        let prompt = &job.prompt[common..];
        let result =
            generate_observed(model, tok, &mut self.cache, prompt, &mut sampler, &opts, &mut on_text, &mut on_token);
        match result {
            Ok((out, stats)) => {
                if !stopped_by_string {
                    flush(usize::MAX);
                    if sent < text.len() {
                        let _ = job.events.send(Event::Text(text[sent..].to_string()));
                    }
                }
                self.fed.extend_from_slice(&job.prompt[common..]);
                self.fed.extend_from_slice(&out);
                // The last generated token was never fed back, so the cache holds one fewer.
                self.fed.truncate(self.cache.len());
                let finish = match stats.stop {
                    StopReason::EndToken => "stop",
                    StopReason::Cancelled if stopped_by_string => "stop",
                    _ => "length",
                };
                let _ = job.events.send(Event::Done {
                    finish,
                    prompt_tokens: job.prompt.len(),
                    completion_tokens: out.len(),
                });
            }
            Err(e) => {
                // The cache may hold part of the prompt: forget it.
                self.cache.clear();
                self.fed.clear();
                let _ = job.events.send(Event::Error(e.to_string()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::cli::default_model;

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
        fn new_cache(&self, capacity: usize, dtype: DType) -> Result<KvCache> {
            self.0.new_cache(capacity, dtype)
        }
        fn forward(&self, tokens: &[u32], cache: &mut KvCache, all: bool) -> Result<Tensor<axes![seq, vocab]>> {
            assert!(tokens.first() != Some(&0), "injected fault");
            self.0.forward(tokens, cache, all)
        }
    }

    fn run(w: &Worker, prompt: Vec<u32>) -> Vec<Event> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let params = SamplingParams::default();
        let job = Job { prompt, params, max_tokens: 3, stop: vec![], grammar: None, logprobs: None, events: tx };
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
        let w = Worker::spawn(model, tok, ctx, 64, DType::F32, vec![], 0).unwrap();
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
