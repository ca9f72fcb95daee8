//! Command-line plumbing shared by the language-model binaries (`qwen3`, `deepseek`): the
//! common flags, one-shot completion or chat, the interactive chat REPL, timings.

use super::chat::{ChatFormat, Message, Role};
use super::generate::{generate, generate_batch, BatchJob, CausalLm, GenerateOptions, GenerationStats};
use super::grammar::{Grammar, GrammarCompiler};
use super::sampling::{Sampler, SamplingParams};
use super::tokenizer::Tokenizer;
use crate::llm::KvType;
use fucina::formats::gguf::GgufHeader;
use fucina::prelude::*;
use std::io::{BufRead, Write};
use std::path::PathBuf;

pub use super::assets::{default_chat_model, default_model};

/// Flags common to the language-model binaries.
#[derive(clap::Args, Debug, Clone)]
pub struct LmArgs {
    /// GGUF model file (default: the tiny model committed with the crate).
    pub model: Option<PathBuf>,
    /// Complete this raw text (no chat template).
    #[arg(long, conflicts_with_all = ["chat", "interactive"])]
    pub prompt: Option<String>,
    /// Answer this user message with the chat template.
    #[arg(long)]
    pub chat: Option<String>,
    /// Interactive chat: read user messages from stdin, one per line (`/reset`, `/exit`).
    #[arg(short, long)]
    pub interactive: bool,
    /// Answer every line of FILE (each a user message, with the chat template) together:
    /// all answers advance in one forward pass per step, each with its own cache; the
    /// answers are printed in order when all are done (at most 256 lines).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "chat", "interactive"])]
    pub batch: Option<PathBuf>,
    /// System message for chat.
    #[arg(long)]
    pub system: Option<String>,
    /// Skip thinking (Qwen3: prefill an empty `<think></think>` block).
    #[arg(long)]
    pub no_think: bool,
    /// The most tokens to generate per answer (0: only read the prompt).
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Print the token ids of the `--prompt` or `--chat` prompt (one line, space-separated)
    /// and stop, without running the model.
    #[arg(long)]
    pub print_ids: bool,
    /// Worker threads (default: all cores; at most 1024).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// KV cache length in tokens (default: min(context length, 4096); at most the model's
    /// context length, and the cache must fit in the memory available).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Read the whole model into memory (huge pages where the kernel allows) instead of
    /// mapping the file.
    #[arg(long)]
    pub no_mmap: bool,
    /// MoE models: the most MiB of routed experts kept resident (the rest are read from the
    /// mapped file when routed, and released); default: no limit.
    #[arg(long)]
    pub expert_cache_mb: Option<usize>,
    /// How the KV cache stores keys and values: f32, f16, or q8_0 (Q8_0 blocks, about a
    /// quarter of f32's memory, scores by integer dot products; head widths must be
    /// multiples of 32).
    #[arg(long, default_value = "f32")]
    pub kv: KvType,
    /// Keep the KV cache in f16 (the same as `--kv f16`).
    #[arg(long)]
    pub kv_f16: bool,
    /// Kernel backend: native (SIMD + threads) or scalar (the reference).
    #[arg(long, default_value = "native", value_parser = ["native", "scalar"])]
    pub backend: String,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Drop tokens below this fraction of the best token's probability.
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the repetition, presence and frequency penalties look back over (at most 2^20).
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// OpenAI presence penalty, -2..2, subtracted once from each recent token's logit (0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// OpenAI frequency penalty, -2..2, subtracted per occurrence of a recent token (0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// RNG seed for sampling (default: a fresh random one each run).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Speculative decoding: draft up to N tokens per step — with GLM-4.5's own
    /// next-token-prediction layer where the file has it, else from the conversation itself
    /// (n-gram matches) — and verify them in one batched step (greedy: the same tokens;
    /// sampled: the same distribution); with a grammar, drafts stop where it would refuse
    /// one; a gate turns it off where drafts miss.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(0..=64), usize::from))]
    pub speculate: usize,
    /// Constrain every answer to JSON valid against the JSON schema in this file
    /// (`{"type": "object"}`: any object). Implies --no-think.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["grammar", "regex"])]
    pub json_schema: Option<PathBuf>,
    /// Constrain every answer to the Lark grammar in this file (llguidance's dialect).
    /// Implies --no-think.
    #[arg(long, value_name = "FILE", conflicts_with = "regex")]
    pub grammar: Option<PathBuf>,
    /// Constrain every answer to match this regular expression. Implies --no-think.
    #[arg(long, value_name = "REGEX")]
    pub regex: Option<String>,
}

/// The largest grammar or schema file read.
const MAX_GRAMMAR_FILE: u64 = 1 << 20;

fn read_grammar_file(path: &std::path::Path) -> Result<String> {
    let io = |e: std::io::Error| FucinaError::io(path.display().to_string(), e);
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_GRAMMAR_FILE {
        return Err(FucinaError::InvalidArgument {
            op: "grammar",
            msg: format!("{} is {len} bytes; the limit is {MAX_GRAMMAR_FILE}", path.display()),
        });
    }
    std::fs::read_to_string(path).map_err(io)
}

impl LmArgs {
    /// The grammar the flags ask for, read and parsed (not yet compiled), if any.
    pub fn grammar(&self) -> Result<Option<Grammar>> {
        if let Some(p) = &self.json_schema {
            let text = read_grammar_file(p)?;
            let schema = serde_json::from_str(&text).map_err(|e| FucinaError::InvalidArgument {
                op: "--json-schema",
                msg: format!("{}: not JSON: {e}", p.display()),
            })?;
            return Ok(Some(Grammar::JsonSchema(schema)));
        }
        if let Some(p) = &self.grammar {
            return Ok(Some(Grammar::Lark(read_grammar_file(p)?)));
        }
        Ok(self.regex.clone().map(Grammar::Regex))
    }

    /// The sampling settings, validated.
    pub fn sampling(&self) -> Result<SamplingParams> {
        let p = SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed.unwrap_or_else(super::sampling::random_seed),
            ..SamplingParams::default()
        };
        p.validate().map_err(|msg| FucinaError::InvalidArgument { op: "sampling", msg })?;
        Ok(p)
    }

    /// The execution context the flags ask for.
    pub fn context(&self) -> Result<ExecContext> {
        let backend = if self.backend == "scalar" { BackendKind::Scalar } else { BackendKind::Native };
        let threads = self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        ExecContext::with_backend(backend, threads.max(1))
    }
}

/// The ids that end an answer: the GGUF's EOS, end-of-turn and end-of-message tokens, plus
/// the families' end markers when present (ChatML's, DeepSeek's, Llama 3's, and GLM's next
/// turns: `<|user|>`, `<|observation|>`; nanochat's `<|assistant_end|>` and `<|user_start|>`;
/// Gemma 4's `<turn|>`).
pub fn stop_tokens(h: &GgufHeader, tok: &Tokenizer) -> Vec<u32> {
    let mut v: Vec<u32> = ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"]
        .iter()
        .filter_map(|k| h.get(k).and_then(|x| x.as_u64()))
        .filter(|&x| x < tok.vocab_size() as u64)
        .map(|x| x as u32)
        .collect();
    for t in [
        "<|im_end|>",
        "<|endoftext|>",
        "<｜end▁of▁sentence｜>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|end_of_text|>",
        "<|user|>",
        "<|observation|>",
        "<|assistant_end|>",
        "<|user_start|>",
        "<turn|>",
    ] {
        v.extend(tok.token_id(t));
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Prints the timings line to stderr.
pub fn report(stats: &GenerationStats) {
    let spec =
        if stats.drafted > 0 { format!(" | drafts kept {}/{}", stats.accepted, stats.drafted) } else { String::new() };
    eprintln!(
        "\n[prefill {} tok in {:.2} s: {:.1} tok/s | decode {} tok in {:.2} s: {:.1} tok/s{spec} | stop: {:?}]",
        stats.prompt_tokens,
        stats.prefill_seconds,
        stats.prefill_tok_s(),
        stats.generated_tokens,
        stats.decode_seconds,
        stats.decode_tok_s(),
        stats.stop
    );
}

/// Where one answer's text goes.
type TextSink<'a> = Box<dyn FnMut(&str) -> bool + 'a>;

/// The most messages `--batch` answers together.
pub const MAX_BATCH: usize = 256;

/// Answers `prompts` together (`--batch`), each with its own cache and sampler (seeded
/// samplers draw as they would alone), then prints them in order; a live rate on stderr.
#[allow(clippy::too_many_arguments)]
fn answer_batch(
    model: &dyn CausalLm,
    tok: &Tokenizer,
    prompts: &[Vec<u32>],
    capacity: usize,
    kv: KvType,
    params: &SamplingParams,
    opts: &GenerateOptions,
    constrain: &dyn Fn(&mut Sampler) -> Result<()>,
) -> Result<()> {
    let n = prompts.len();
    let mut caches = (0..n).map(|_| model.new_cache(capacity, kv)).collect::<Result<Vec<_>>>()?;
    let mut samplers = (0..n).map(|_| Sampler::new(params.clone())).collect::<Vec<_>>();
    for s in &mut samplers {
        constrain(s)?;
    }
    let texts: Vec<std::cell::RefCell<String>> = (0..n).map(|_| Default::default()).collect();
    let t0 = std::time::Instant::now();
    let pieces = std::cell::Cell::new(0usize);
    let last = std::cell::Cell::new(t0);
    let mut sinks: Vec<TextSink<'_>> = texts
        .iter()
        .map(|t| {
            let (pieces, last) = (&pieces, &last);
            Box::new(move |s: &str| {
                t.borrow_mut().push_str(s);
                pieces.set(pieces.get() + 1);
                if last.get().elapsed().as_secs_f64() >= 1.0 {
                    last.set(std::time::Instant::now());
                    let secs = t0.elapsed().as_secs_f64();
                    eprint!(
                        "\r{n} answers: {} pieces of text in {secs:.0} s, {:.1}/s   ",
                        pieces.get(),
                        pieces.get() as f64 / secs
                    );
                }
                true
            }) as TextSink<'_>
        })
        .collect();
    let mut jobs: Vec<BatchJob<'_>> = prompts
        .iter()
        .zip(caches.iter_mut())
        .zip(samplers.iter_mut())
        .zip(sinks.iter_mut())
        .map(|(((p, cache), sampler), on_text)| BatchJob { prompt: p, cache, sampler, opts, on_text: &mut **on_text })
        .collect();
    let results = generate_batch(model, tok, &mut jobs, 128)?;
    drop(jobs);
    drop(sinks);
    let secs = t0.elapsed().as_secs_f64();
    eprintln!();
    for (i, t) in texts.iter().enumerate() {
        println!("[{}] {}", i + 1, t.borrow().trim());
    }
    let generated: usize = results.iter().map(|(_, s)| s.generated_tokens).sum();
    let read: usize = results.iter().map(|(_, s)| s.prompt_tokens).sum();
    eprintln!(
        "{n} answers together: {read} prompt tokens, {generated} tokens generated in {secs:.2} s ({:.1} tok/s over all answers)",
        generated as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// `--print-ids`: the ids on one line.
fn print_ids(ids: &[u32]) -> Result<()> {
    let line: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("{}", line.join(" "));
    Ok(())
}

/// Runs what the flags ask for: a completion, one chat answer, or the REPL (the default
/// when neither `--prompt` nor `--chat` is given and stdin is interactive input).
pub fn run(model: &dyn CausalLm, header: &GgufHeader, args: &LmArgs) -> Result<()> {
    let tok = Tokenizer::from_gguf(header)?;
    let arch = header.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
    let format = ChatFormat::detect(
        |t| tok.token_id(t).is_some(),
        arch,
        header.get("tokenizer.chat_template").and_then(|v| v.as_str()),
    );
    if tok.vocab_size() != model.vocab_size() {
        return Err(FucinaError::Format {
            format: "gguf",
            msg: format!("the tokenizer has {} tokens, the model {}", tok.vocab_size(), model.vocab_size()),
        });
    }
    let capacity = args.ctx.unwrap_or(model.context_length().min(4096));
    if capacity == 0 || capacity > model.context_length() {
        return Err(FucinaError::InvalidArgument {
            op: "--ctx",
            msg: format!("{capacity} is outside 1..={} (the model's context length)", model.context_length()),
        });
    }
    let kv = if args.kv_f16 { KvType::F16 } else { args.kv };
    let mut cache = model.new_cache(capacity, kv)?;
    let mut sampler = Sampler::new(args.sampling()?);
    let mut opts = GenerateOptions {
        max_tokens: args.max_tokens,
        stop_tokens: stop_tokens(header, &tok),
        speculate: args.speculate,
        context: Vec::new(),
    };
    // A grammar constrains each answer from its first token, so there is no room for a
    // thinking block: constrained answers skip it.
    let grammar = match args.grammar()? {
        None => None,
        Some(g) => {
            let end = *opts.stop_tokens.first().ok_or_else(|| FucinaError::InvalidArgument {
                op: "grammar",
                msg: "the model has no end token to finish a constrained answer with".into(),
            })?;
            let compiler =
                GrammarCompiler::new(std::sync::Arc::new(Tokenizer::from_gguf(header)?), model.vocab_size(), end)?;
            compiler.compile(&g)?; // report a bad grammar before the first prompt
            Some((compiler, g))
        }
    };
    let think = !args.no_think && grammar.is_none();
    let constrain = |sampler: &mut Sampler| -> Result<()> {
        if let Some((c, g)) = &grammar {
            sampler.set_processor(Some(Box::new(c.compile(g)?)));
        }
        Ok(())
    };
    let mut print = |s: &str| {
        print!("{s}");
        let _ = std::io::stdout().flush();
        true
    };
    let mut messages: Vec<Message> = args.system.iter().map(|s| Message::new(Role::System, s.clone())).collect();
    if let Some(path) = &args.batch {
        let text = std::fs::read_to_string(path).map_err(|e| FucinaError::io(path.display().to_string(), e))?;
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if lines.is_empty() || lines.len() > MAX_BATCH {
            return Err(FucinaError::InvalidArgument {
                op: "--batch",
                msg: format!("{} has {} messages; 1..={MAX_BATCH} are answered together", path.display(), lines.len()),
            });
        }
        let prompts = lines
            .iter()
            .map(|l| {
                let mut m = messages.clone();
                m.push(Message::new(Role::User, *l));
                tok.encode_prompt(&format.prompt(&m, think))
            })
            .collect::<Result<Vec<_>>>()?;
        drop(cache);
        return answer_batch(model, &tok, &prompts, capacity, kv, &args.sampling()?, &opts, &|s| constrain(s));
    }
    if let Some(p) = &args.prompt {
        let ids = tok.encode_completion(p)?;
        if args.print_ids {
            return print_ids(&ids);
        }
        print!("{p}");
        constrain(&mut sampler)?;
        let (_, stats) = generate(model, &tok, &mut cache, &ids, &mut sampler, &opts, &mut print)?;
        report(&stats);
        return Ok(());
    }
    if let Some(c) = &args.chat {
        messages.push(Message::new(Role::User, c.clone()));
        let ids = tok.encode_prompt(&format.prompt(&messages, think))?;
        if args.print_ids {
            return print_ids(&ids);
        }
        constrain(&mut sampler)?;
        let (_, stats) = generate(model, &tok, &mut cache, &ids, &mut sampler, &opts, &mut print)?;
        report(&stats);
        if !args.interactive {
            return Ok(());
        }
    }
    // The REPL: the whole conversation is re-rendered each turn and only the new suffix is
    // fed, reusing the cache for the common prefix.
    let mut fed: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    eprintln!("chat: type a message, /reset to start over, /exit or Ctrl-D to quit");
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).map_err(|e| FucinaError::io("stdin", e))? == 0 {
            return Ok(());
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                messages.retain(|m| m.role == Role::System);
                cache.clear();
                fed.clear();
                continue;
            }
            _ => {}
        }
        messages.push(Message::new(Role::User, line));
        let ids = tok.encode_prompt(&format.prompt(&messages, think))?;
        if args.print_ids {
            return print_ids(&ids);
        }
        constrain(&mut sampler)?;
        let common = fed.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        // A recurrent cache keeps no prefix: then everything is fed again.
        let common = cache.truncate(common);
        fed.truncate(common);
        // The reused turns are history for the penalties and the drafts.
        opts.context.clone_from(&fed);
        let mut answer = String::new();
        let mut sink = |s: &str| {
            answer.push_str(s);
            print(s)
        };
        match generate(model, &tok, &mut cache, &ids[common..], &mut sampler, &opts, &mut sink) {
            Ok((out, stats)) => {
                report(&stats);
                fed.extend_from_slice(&ids[common..]);
                fed.extend_from_slice(&out);
                // The cache holds the answer minus its last token (never fed back).
                fed.truncate(cache.len());
                messages.push(Message::new(Role::Assistant, answer));
            }
            Err(e) => {
                eprintln!("error: {e} (use /reset to start over)");
                messages.pop();
            }
        }
    }
}
