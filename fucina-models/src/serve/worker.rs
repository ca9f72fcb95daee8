//! The model worker: one thread owns the model's KV cache and runs requests in arrival
//! order, so concurrent requests queue and never share cache positions. The cache keeps the
//! previous request's tokens, and a request that starts with the same tokens (a chat that
//! grows turn by turn) reuses them instead of recomputing.

use crate::llm::generate::{generate, CausalLm, GenerateOptions, StopReason};
use crate::llm::sampling::{Sampler, SamplingParams};
use crate::llm::tokenizer::Tokenizer;
use crate::llm::KvCache;
use fucina::prelude::*;
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
    /// Where the output goes.
    pub events: UnboundedSender<Event>,
}

/// What the worker sends back for a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A piece of generated text (whole UTF-8 characters).
    Text(String),
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

/// The model thread's handle: send jobs, they run one at a time.
#[derive(Clone)]
pub struct Worker {
    jobs: mpsc::Sender<Job>,
}

impl Worker {
    /// Starts the model thread for `model` on `ctx` with a cache of `capacity` positions.
    pub fn spawn(
        model: Arc<dyn CausalLm + Send>,
        tokenizer: Arc<Tokenizer>,
        ctx: ExecContext,
        capacity: usize,
        kv: DType,
        stop_tokens: Vec<u32>,
    ) -> Result<Worker> {
        let cache = model.new_cache(capacity, kv)?;
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("fucina-model".into())
            .spawn(move || {
                let _g = ctx.enter();
                let mut state = State { cache, fed: Vec::new() };
                for job in rx {
                    state.run(&*model, &tokenizer, &stop_tokens, job);
                }
            })
            .map_err(|e| FucinaError::ThreadPool(e.to_string()))?;
        Ok(Worker { jobs: tx })
    }

    /// Queues a job; fails only if the model thread is gone.
    pub fn submit(&self, job: Job) -> std::result::Result<(), String> {
        self.jobs.send(job).map_err(|_| "the model thread has stopped".to_string())
    }
}

/// The cache and the tokens it holds.
struct State {
    cache: KvCache,
    fed: Vec<u32>,
}

impl State {
    fn run(&mut self, model: &dyn CausalLm, tok: &Tokenizer, stop_tokens: &[u32], job: Job) {
        // Reuse the cached prefix; at least the last prompt token is always fed again.
        let common = self.fed.iter().zip(&job.prompt).take_while(|(a, b)| a == b).count();
        let common = common.min(job.prompt.len().saturating_sub(1));
        self.cache.truncate(common);
        self.fed.truncate(common);
        let mut sampler = Sampler::new(job.params.clone());
        let opts = GenerateOptions { max_tokens: job.max_tokens, stop_tokens: stop_tokens.to_vec() };
        let mut text = String::new();
        let mut sent = 0;
        let mut stopped_by_string = false;
        let hold = job.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        let events = job.events.clone();
        let mut on_text = |piece: &str| {
            text.push_str(piece);
            if let Some(at) = job.stop.iter().filter_map(|s| text[sent..].find(s.as_str()).map(|i| sent + i)).min() {
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
                let ok = events.send(Event::Text(text[sent..upto].to_string())).is_ok();
                sent = upto;
                return ok; // the client went away: stop generating
            }
            true
        };
        let result = generate(model, tok, &mut self.cache, &job.prompt[common..], &mut sampler, &opts, &mut on_text);
        match result {
            Ok((out, stats)) => {
                if !stopped_by_string && sent < text.len() {
                    let _ = job.events.send(Event::Text(text[sent..].to_string()));
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
