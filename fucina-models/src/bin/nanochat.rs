//! `nanochat`: train a chat model from scratch on this CPU — tokenizer, pretraining, chat
//! fine-tuning, evaluation, export to GGUF — with fucina's autograd and Muon.

use clap::{Args as ClapArgs, Parser, Subcommand};
use fucina::formats::checkpoint::{load_checkpoint, save_checkpoint};
use fucina::prelude::*;
use fucina_models::llm::generate::{generate, GenerateOptions};
use fucina_models::llm::kv_cache::KvType;
use fucina_models::llm::sampling::{Sampler, SamplingParams};
use fucina_models::llm::tokenizer::Tokenizer;
use fucina_models::nanochat::bpe::{self, Bpe, NANOCHAT_PATTERN};
use fucina_models::nanochat::data::{self, Kind, Qa, Split};
use fucina_models::nanochat::train::{self, Plan, Stream, Vocab};
use fucina_models::nanochat::{export, Gpt, GptConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Train nanochat from scratch: `all` runs every stage and writes the GGUF the README's
/// first command uses; each stage also runs on its own, resuming from its checkpoint.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Train the byte-level BPE on the corpus (tokenizer.json in --dir).
    TokTrain(Common),
    /// Pretrain on the corpus and the facts prose (pretrain.ckpt in --dir).
    Pretrain(Common),
    /// Fine-tune the pretrained model on the chat conversations (sft.ckpt in --dir).
    Sft(Common),
    /// Export the fine-tuned model to GGUF (--out).
    Export(Common),
    /// Bits per byte on held-out text and accuracy on held-out questions of a GGUF (--out).
    Eval(Common),
    /// Every stage in order: tok-train, pretrain, sft, export, eval.
    All(Common),
    /// Redraw the loss curves (pretrain-loss.png, sft-loss.png) from the loss logs in --dir.
    Plot(Common),
    /// Time training steps of the model on random tokens (no corpus needed) and print
    /// `RESULT tokens_per_s <median>` (benches/nanochat_train_vs_torch.py).
    BenchStep {
        #[command(flatten)]
        common: Common,
        /// Timed steps (after two untimed ones).
        #[arg(long, default_value_t = 10)]
        steps: u64,
    },
}

#[derive(ClapArgs, Debug, Clone)]
struct Common {
    /// The King James Bible as `tools/nanochat_corpus.sh` writes it.
    #[arg(long, default_value = "target/nanochat/kjv.txt")]
    corpus: PathBuf,
    /// Work directory: tokenizer, checkpoints, loss log and curve, eval report.
    #[arg(long, default_value = "target/nanochat")]
    dir: PathBuf,
    /// The GGUF to write (export) or read (eval).
    #[arg(long, default_value = "fucina-models/assets/nanochat-d4.gguf")]
    out: PathBuf,
    /// Vocabulary size, special tokens included.
    #[arg(long, default_value_t = 2048)]
    vocab: usize,
    /// Residual width.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Blocks.
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Attention heads (head width = hidden / heads).
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Tokens per training sequence.
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Pretraining steps.
    #[arg(long, default_value_t = 4000)]
    pretrain_steps: u64,
    /// Fine-tuning steps.
    #[arg(long, default_value_t = 2000)]
    sft_steps: u64,
    /// Seed of the initialization and of every batch.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Steps between checkpoints.
    #[arg(long, default_value_t = 250)]
    checkpoint_every: u64,
    /// Start over instead of resuming from the stage's checkpoint.
    #[arg(long)]
    fresh: bool,
}

type Res<T> = std::result::Result<T, String>;

fn e<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |err| format!("{what}: {err}")
}

fn main() {
    let cli = Cli::parse();
    if let Err(msg) = run(cli.cmd) {
        eprintln!("nanochat: {msg}");
        std::process::exit(1);
    }
}

fn run(cmd: Cmd) -> Res<()> {
    match cmd {
        Cmd::TokTrain(c) => tok_train(&c),
        Cmd::Pretrain(c) => pretrain(&c),
        Cmd::Sft(c) => sft(&c),
        Cmd::Export(c) => export_gguf(&c),
        Cmd::Eval(c) => eval(&c),
        Cmd::BenchStep { common, steps } => bench_step(&common, steps),
        Cmd::Plot(c) => ["pretrain", "sft"].iter().try_for_each(|name| plot_log(&c, name)),
        Cmd::All(c) => {
            tok_train(&c)?;
            pretrain(&c)?;
            sft(&c)?;
            export_gguf(&c)?;
            eval(&c)
        }
    }
}

/// The corpus split in two: verses for training and the last 2 % held out (bits per byte).
fn corpus(c: &Common) -> Res<(Vec<String>, Vec<String>)> {
    let raw = std::fs::read_to_string(&c.corpus).map_err(|err| {
        format!("{}: {err} (make it with `tools/nanochat_corpus.sh`, which installs nothing: it unpacks the Debian packages bible-kjv and bible-kjv-text)", c.corpus.display())
    })?;
    let verses = data::clean_kjv(&raw);
    if verses.len() < 1000 {
        return Err(format!("{}: {} verses; expected the whole King James Bible", c.corpus.display(), verses.len()));
    }
    // Documents of 8 verses.
    let docs: Vec<String> = verses.chunks(8).map(|v| v.join(" ")).collect();
    let cut = docs.len() - docs.len() / 50;
    Ok((docs[..cut].to_vec(), docs[cut..].to_vec()))
}

fn context(c: &Common) -> Res<ExecContext> {
    ExecContext::new(ExecConfig { seed: c.seed, threads: c.threads, ..ExecConfig::default() }).map_err(e("context"))
}

fn tokenizer_path(c: &Common) -> PathBuf {
    c.dir.join("tokenizer.json")
}

fn tok_train(c: &Common) -> Res<()> {
    std::fs::create_dir_all(&c.dir).map_err(e("work directory"))?;
    let (train_docs, _) = corpus(c)?;
    let prose = data::prose();
    let texts: Vec<&str> = train_docs.iter().chain(&prose).map(String::as_str).collect();
    let merges_wanted = c.vocab.checked_sub(train::SPECIALS.len()).ok_or("vocabulary smaller than the specials")?;
    let t0 = Instant::now();
    eprintln!("tok-train: {} documents, {} merges wanted", texts.len(), merges_wanted.saturating_sub(256));
    let b = bpe::train(texts, merges_wanted, NANOCHAT_PATTERN, |done, total| {
        eprintln!("tok-train: {done}/{total} merges, {:.1} s", t0.elapsed().as_secs_f64());
    })
    .map_err(e("tok-train"))?;
    let json = serde_json::json!({ "pattern": b.pattern, "merges": b.merges });
    write_atomic(&tokenizer_path(c), json.to_string().as_bytes())?;
    eprintln!(
        "tok-train: {} ids (+{} specials) in {:.1} s -> {}",
        b.len(),
        train::SPECIALS.len(),
        t0.elapsed().as_secs_f64(),
        tokenizer_path(c).display()
    );
    Ok(())
}

fn load_vocab(c: &Common) -> Res<Vocab> {
    let p = tokenizer_path(c);
    let text = std::fs::read_to_string(&p)
        .map_err(|err| format!("{}: {err} (run `nanochat tok-train` first)", p.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(e("tokenizer.json"))?;
    let pattern = v["pattern"].as_str().ok_or("tokenizer.json: no pattern")?;
    let merges: Vec<(u32, u32)> = serde_json::from_value(v["merges"].clone()).map_err(e("tokenizer.json merges"))?;
    Vocab::new(Bpe::from_merges(pattern, merges).map_err(e("tokenizer.json"))?).map_err(e("tokenizer"))
}

fn config(c: &Common, vocab: usize) -> GptConfig {
    GptConfig {
        vocab,
        hidden: c.hidden,
        layers: c.layers,
        heads: c.heads,
        kv_heads: c.heads,
        ffn: 4 * c.hidden,
        context: 2048,
        rope_theta: 10000.0,
        eps: 1e-6,
        softcap: Some(15.0),
    }
}

/// nanochat's rates (Muon 0.02 for matrices; AdamW 0.2 for the embedding and 0.004 for the
/// head, scaled by (hidden / 768)^-0.5), warm-down over the last 40 %.
fn plan(c: &Common, steps: u64, phase: u64) -> Plan {
    let s = (c.hidden as f64 / 768.0).powf(-0.5);
    Plan {
        steps,
        batch: c.batch,
        seq: c.seq,
        matrix_lr: 0.02,
        embed_lr: 0.2 * s,
        head_lr: 0.004 * s,
        warmdown: 0.4,
        seed: c.seed.wrapping_mul(1000).wrapping_add(phase),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Res<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).map_err(|err| format!("{}: {err}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|err| format!("{}: {err}", path.display()))
}

/// Runs one phase from its checkpoint (or from `start`), logging and checkpointing.
fn phase(c: &Common, name: &str, ctx: &ExecContext, mut gpt: Gpt, stream: &Stream, plan: &Plan) -> Res<Gpt> {
    let ckpt = c.dir.join(format!("{name}.ckpt"));
    let mut opt = plan.optimizer();
    let mut first = 0;
    if ckpt.exists() && !c.fresh {
        let meta = load_checkpoint(&ckpt, &mut gpt, &mut opt, ctx).map_err(e("resuming"))?;
        first = meta.get("nanochat.step").and_then(|s| s.parse().ok()).ok_or("checkpoint without nanochat.step")?;
        if first > plan.steps {
            return Err(format!("{}: at step {first}, beyond the {} steps asked for", ckpt.display(), plan.steps));
        }
        eprintln!("{name}: resuming at step {first}/{}", plan.steps);
    }
    let log_path = c.dir.join(format!("{name}-loss.csv"));
    let mut log = if first == 0 {
        String::from("step,loss,tokens_per_s\n")
    } else {
        std::fs::read_to_string(&log_path).unwrap_or_default()
    };
    let t0 = Instant::now();
    let (mut window_t, mut window_tokens, mut window_loss, mut window_n) = (Instant::now(), 0usize, 0.0f64, 0u32);
    let mut tokens_since_start = 0usize;
    train::run(ctx, &mut gpt, &mut opt, stream, plan, first, |g, o, r| {
        window_tokens += r.tokens;
        tokens_since_start += r.tokens;
        window_loss += r.loss as f64;
        window_n += 1;
        let rate = window_tokens as f64 / window_t.elapsed().as_secs_f64().max(1e-9);
        log.push_str(&format!("{},{:.5},{:.0}\n", r.step, r.loss, rate));
        if r.step.is_multiple_of(25) || r.step == plan.steps {
            let avg_rate = tokens_since_start as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            let left = (plan.steps - r.step) as f64 * (plan.batch * plan.seq) as f64 / avg_rate.max(1e-9);
            eprintln!(
                "{name}: step {}/{} | loss {:.4} | {:.0} tok/s | lr x{:.2} | elapsed {:.0} s | eta {:.0} s",
                r.step,
                plan.steps,
                window_loss / window_n as f64,
                rate,
                r.lr_factor,
                t0.elapsed().as_secs_f64(),
                left
            );
            (window_t, window_tokens, window_loss, window_n) = (Instant::now(), 0, 0.0, 0);
        }
        if r.step.is_multiple_of(c.checkpoint_every) || r.step == plan.steps {
            let meta = BTreeMap::from([("nanochat.step".to_string(), r.step.to_string())]);
            let tmp = ckpt.with_extension("partial");
            save_checkpoint(&tmp, g, o, ctx, &meta)?;
            std::fs::rename(&tmp, &ckpt).map_err(|err| FucinaError::io(ckpt.display().to_string(), err))?;
            std::fs::write(&log_path, &log).map_err(|err| FucinaError::io(log_path.display().to_string(), err))?;
        }
        Ok(())
    })
    .map_err(e(name))?;
    eprintln!("{name}: done in {:.0} s", t0.elapsed().as_secs_f64());
    plot_log(c, name)?;
    Ok(gpt)
}

/// Draws `<name>-loss.png` from `<name>-loss.csv`.
fn plot_log(c: &Common, name: &str) -> Res<()> {
    let csv = c.dir.join(format!("{name}-loss.csv"));
    let log = std::fs::read_to_string(&csv).map_err(|err| format!("{}: {err}", csv.display()))?;
    let losses: Vec<(f64, f64)> = log
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut it = l.split(',');
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    let png = c.dir.join(format!("{name}-loss.png"));
    plot::write_png(&png, &losses).map_err(|err| format!("{}: {err}", png.display()))?;
    eprintln!("{name}: loss curve {}", png.display());
    Ok(())
}

fn pretrain(c: &Common) -> Res<()> {
    let ctx = context(c)?;
    let _g = ctx.enter();
    let mut vocab = load_vocab(c)?;
    let (docs, _) = corpus(c)?;
    // The facts prose, ten times over, among the verses.
    let mut all = docs;
    for _ in 0..10 {
        all.extend(data::prose());
    }
    let stream = Stream::documents(&mut vocab, &all, c.seed).map_err(e("pretraining stream"))?;
    eprintln!("pretrain: {} tokens in the stream", stream.tokens.len());
    let gpt = Gpt::init(&ctx, config(c, vocab.size())).map_err(e("model"))?;
    eprintln!("pretrain: {} parameters", gpt.num_params());
    phase(c, "pretrain", &ctx, gpt, &stream, &plan(c, c.pretrain_steps, 1))?;
    Ok(())
}

/// A model with the weights of a phase's finished checkpoint.
fn restore(c: &Common, ctx: &ExecContext, vocab: &Vocab, name: &str, steps: u64) -> Res<Gpt> {
    let ckpt = c.dir.join(format!("{name}.ckpt"));
    let mut gpt = Gpt::init(ctx, config(c, vocab.size())).map_err(e("model"))?;
    let mut opt = plan(c, steps, 0).optimizer();
    let meta = load_checkpoint(&ckpt, &mut gpt, &mut opt, ctx)
        .map_err(|err| format!("{}: {err} (run `nanochat {name}` first)", ckpt.display()))?;
    let step: u64 = meta.get("nanochat.step").and_then(|s| s.parse().ok()).unwrap_or(0);
    if step != steps {
        return Err(format!("{}: at step {step} of {steps}; finish `nanochat {name}` first", ckpt.display()));
    }
    Ok(gpt)
}

fn sft(c: &Common) -> Res<()> {
    let ctx = context(c)?;
    let _g = ctx.enter();
    let mut vocab = load_vocab(c)?;
    let gpt = restore(c, &ctx, &vocab, "pretrain", c.pretrain_steps)?;
    let train_qas: Vec<Qa> = data::questions().into_iter().filter(|q| q.split == Split::Train).collect();
    // Sums are most of the questions: keep one in four, so capitals and conversions weigh in.
    let qas: Vec<Qa> =
        train_qas.into_iter().enumerate().filter(|(i, q)| q.kind != Kind::Sum || i % 4 == 0).map(|(_, q)| q).collect();
    let stream = Stream::conversations(&mut vocab, &qas, 20, c.seed).map_err(e("chat stream"))?;
    eprintln!("sft: {} conversations x 20 epochs, {} tokens", qas.len(), stream.tokens.len());
    let gpt = phase(c, "sft", &ctx, gpt, &stream, &plan(c, c.sft_steps, 2))?;
    drop(gpt);
    Ok(())
}

fn export_gguf(c: &Common) -> Res<()> {
    let ctx = context(c)?;
    let _g = ctx.enter();
    let vocab = load_vocab(c)?;
    let gpt = restore(c, &ctx, &vocab, "sft", c.sft_steps)?;
    let name = format!("nanochat d{} (fucina-rs, seed {})", c.layers, c.seed);
    export::write(&gpt, &vocab, &name, &c.out).map_err(e("export"))?;
    eprintln!("export: {} ({} parameters)", c.out.display(), gpt.num_params());
    Ok(())
}

fn eval(c: &Common) -> Res<()> {
    let ctx = context(c)?;
    let _g = ctx.enter();
    let mut report = String::new();
    let loaded = fucina_models::lm::open(&c.out, true).map_err(e("opening the model"))?;
    let tok = Tokenizer::from_gguf(&loaded.header).map_err(e("tokenizer"))?;
    let stops = fucina_models::llm::cli::stop_tokens(&loaded.header, &tok);
    // Bits per byte on the held-out verses, through the training module's loss.
    // (Both checkpoints: fine-tuning on chat alone costs the model much of its Bible.)
    if let Ok((_, held)) = corpus(c) {
        let mut vocab = load_vocab(c)?;
        for (name, steps) in [("pretrain", c.pretrain_steps), ("sft", c.sft_steps)] {
            let gpt = restore(c, &ctx, &vocab, name, steps)?;
            let bpb = train::bits_per_byte(&gpt, &mut vocab, &held, c.seq).map_err(e("bits per byte"))?;
            report.push_str(&format!(
                "held-out King James verses ({} documents), after {name}: {bpb:.4} bits per byte\n",
                held.len()
            ));
        }
    }
    let qs = data::questions();
    let mut results: BTreeMap<(String, &str), (usize, usize)> = BTreeMap::new();
    let mut examples = String::new();
    let t0 = Instant::now();
    for (i, q) in qs.iter().enumerate() {
        // Every held-out question; every training capital and instruction, one in 10 of the rest.
        let keep = q.split == Split::HeldOut || matches!(q.kind, Kind::Capital | Kind::Instruction) || i % 10 == 0;
        if !keep {
            continue;
        }
        let answer = ask(&loaded, &tok, &stops, &q.question)?;
        let ok = answer.contains(&q.expect);
        let split = if q.split == Split::Train { "train" } else { "held-out" };
        let r = results.entry((format!("{:?}", q.kind), split)).or_default();
        r.1 += 1;
        if ok {
            r.0 += 1;
        }
        if r.1 <= 3 {
            examples.push_str(&format!(
                "[{split} {:?}] {} -> {answer} [{}]\n",
                q.kind,
                q.question,
                if ok { "ok" } else { "wrong" }
            ));
        }
        if results.values().map(|r| r.1).sum::<usize>() % 200 == 0 {
            eprintln!(
                "eval: {} questions, {:.0} s",
                results.values().map(|r| r.1).sum::<usize>(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    report.push_str("accuracy (the answer contains the expected capital / sum / quantity / word):\n");
    for ((kind, split), (ok, n)) in &results {
        report.push_str(&format!("  {kind:<12} {split:<9} {ok:>4}/{n:<4} {:.1}%\n", 100.0 * *ok as f64 / *n as f64));
    }
    report.push_str("examples:\n");
    report.push_str(&examples);
    print!("{report}");
    let path = c.dir.join("eval.txt");
    std::fs::create_dir_all(&c.dir).map_err(e("work directory"))?;
    write_atomic(&path, report.as_bytes())
}

fn bench_step(c: &Common, steps: u64) -> Res<()> {
    let ctx = context(c)?;
    let _g = ctx.enter();
    let mut gpt = Gpt::init(&ctx, config(c, c.vocab)).map_err(e("model"))?;
    let mut rng = data::SplitMix(c.seed);
    let n = (steps as usize + 2) * c.batch * c.seq + 1;
    let stream = Stream { tokens: (0..n).map(|_| rng.below(c.vocab) as u32).collect(), train: vec![true; n] };
    let p = Plan { steps: 2 + steps, warmdown: 0.0, ..plan(c, 0, 3) };
    let mut opt = p.optimizer();
    let mut times = Vec::new();
    let mut t = Instant::now();
    train::run(&ctx, &mut gpt, &mut opt, &stream, &p, 0, |_, _, r| {
        if r.step > 2 {
            times.push(r.tokens as f64 / t.elapsed().as_secs_f64());
        }
        t = Instant::now();
        Ok(())
    })
    .map_err(e("bench"))?;
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    println!("RESULT tokens_per_s {median:.1}");
    Ok(())
}

/// Greedy answer of the exported model to one question (at most 48 tokens).
fn ask(loaded: &fucina_models::lm::LoadedLm, tok: &Tokenizer, stops: &[u32], question: &str) -> Res<String> {
    use fucina_models::llm::chat::{ChatFormat, Message, Role};
    let prompt = ChatFormat::NanoChat.prompt(&[Message::new(Role::User, question)], false);
    let prompt = tok.encode_prompt(&prompt).map_err(e("prompt"))?;
    let opts = GenerateOptions { max_tokens: 48, stop_tokens: stops.to_vec(), ..GenerateOptions::default() };
    let mut cache = loaded.model.new_cache(prompt.len() + 49, KvType::F32).map_err(e("cache"))?;
    let mut sampler = Sampler::new(SamplingParams::default());
    let (ids, _) = generate(loaded.model.as_ref(), tok, &mut cache, &prompt, &mut sampler, &opts, &mut |_| true)
        .map_err(e("generate"))?;
    Ok(tok.decode(&ids).map_err(e("decode"))?.trim().to_string())
}

/// The loss curve as a PNG: every step's loss (light red), its running mean over 50 steps
/// (dark blue), a grid of five levels labelled with their loss, and the last step's number.
mod plot {
    use std::path::Path;

    const W: usize = 680;
    const H: usize = 360;
    const LEFT: usize = 60;
    const PAD: usize = 24;

    /// 3×5 glyphs for `0-9`, `.` and `-` (rows top to bottom, 3 bits each).
    fn glyph(c: char) -> [u8; 5] {
        match c {
            '0' => [7, 5, 5, 5, 7],
            '1' => [2, 6, 2, 2, 7],
            '2' => [7, 1, 7, 4, 7],
            '3' => [7, 1, 7, 1, 7],
            '4' => [5, 5, 7, 1, 1],
            '5' => [7, 4, 7, 1, 7],
            '6' => [7, 4, 7, 5, 7],
            '7' => [7, 1, 1, 1, 1],
            '8' => [7, 5, 7, 5, 7],
            '9' => [7, 5, 7, 1, 7],
            '.' => [0, 0, 0, 0, 2],
            '-' => [0, 0, 7, 0, 0],
            _ => [0; 5],
        }
    }

    struct Canvas(Vec<u8>);

    impl Canvas {
        fn put(&mut self, x: usize, y: usize, c: [u8; 3]) {
            if x < W && y < H {
                self.0[(y * W + x) * 3..(y * W + x) * 3 + 3].copy_from_slice(&c);
            }
        }

        /// Text at `(x, y)` (top left), glyphs scaled 2×.
        fn text(&mut self, x: usize, y: usize, s: &str) {
            for (i, ch) in s.chars().enumerate() {
                for (r, bits) in glyph(ch).iter().enumerate() {
                    for col in 0..3 {
                        if bits >> (2 - col) & 1 == 1 {
                            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                                self.put(x + i * 8 + col * 2 + dx, y + r * 2 + dy, [0, 0, 0]);
                            }
                        }
                    }
                }
            }
        }

        fn line(&mut self, a: (usize, usize), b: (usize, usize), c: [u8; 3]) {
            let steps = a.0.abs_diff(b.0).max(a.1.abs_diff(b.1)).max(1);
            for s in 0..=steps {
                let t = s as f64 / steps as f64;
                let x = (a.0 as f64 + t * (b.0 as f64 - a.0 as f64)).round() as usize;
                let y = (a.1 as f64 + t * (b.1 as f64 - a.1 as f64)).round() as usize;
                self.put(x, y, c);
            }
        }
    }

    pub fn write_png(path: &Path, points: &[(f64, f64)]) -> Result<(), String> {
        let mut cv = Canvas(vec![255u8; W * H * 3]);
        let finite: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        let (Some(first), Some(last)) = (finite.first(), finite.last()) else { return encode(path, &cv.0) };
        let (x0, x1) = (first.0, last.0.max(first.0 + 1.0));
        let ymax = finite.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        let ymin = finite.iter().map(|p| p.1).fold(f64::MAX, f64::min).min(ymax - 1e-6);
        let (pw, ph) = (W - LEFT - PAD, H - 2 * PAD);
        let sx = |x: f64| LEFT + ((x - x0) / (x1 - x0) * pw as f64) as usize;
        let sy = |y: f64| PAD + ph - ((y - ymin) / (ymax - ymin) * ph as f64) as usize;
        for i in 0..=4 {
            let y = PAD + i * ph / 4;
            cv.line((LEFT, y), (W - PAD, y), [225, 225, 225]);
            let v = ymax - (ymax - ymin) * i as f64 / 4.0;
            cv.text(4, y.saturating_sub(5), &format!("{v:.2}"));
        }
        cv.line((LEFT, PAD), (LEFT, PAD + ph), [0, 0, 0]);
        cv.line((LEFT, PAD + ph), (W - PAD, PAD + ph), [0, 0, 0]);
        cv.text(LEFT, PAD + ph + 6, &format!("{x0:.0}"));
        let end = format!("{x1:.0}");
        cv.text(W - PAD - end.len() * 8, PAD + ph + 6, &end);
        let mut prev = None;
        for p in &finite {
            let q = (sx(p.0), sy(p.1));
            if let Some(a) = prev {
                cv.line(a, q, [240, 160, 160]);
            }
            prev = Some(q);
        }
        let (mut prev, mut sum, mut window) = (None, 0.0, std::collections::VecDeque::new());
        for p in &finite {
            window.push_back(p.1);
            sum += p.1;
            if window.len() > 50 {
                sum -= window.pop_front().unwrap_or(0.0);
            }
            let q = (sx(p.0), sy(sum / window.len() as f64));
            if let Some(a) = prev {
                cv.line(a, q, [20, 40, 160]);
            }
            prev = Some(q);
        }
        encode(path, &cv.0)
    }

    fn encode(path: &Path, px: &[u8]) -> Result<(), String> {
        let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), W as u32, H as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| e.to_string())?;
        w.write_image_data(px).map_err(|e| e.to_string())
    }
}
