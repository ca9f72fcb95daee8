//! Batched decoding: several sequences share each forward pass (each weight read once for
//! all of them, attention per sequence over its own cache). Every sequence of a batch must
//! produce, token for token, what greedy decoding of it alone produces, on every tiny family
//! (Qwen3 in F32/F16/Q8_0, Qwen3-MoE, DeepSeek-V2/V3) and both backends, with prompts of
//! different lengths, budgets that end at different steps, and prompts fed in chunks that
//! share passes with other sequences' decode steps.

use fucina::prelude::*;
use fucina_models::llm::generate::{generate, generate_batch, BatchJob, GenerateOptions};
use fucina_models::llm::KvType;
use fucina_models::llm::{KvCache, LogitRows, Sampler, SamplingParams, Segment, Tokenizer};
use std::path::PathBuf;

const FILES: &[&str] = &[
    "qwen3-tiny-f32.gguf",
    "qwen3-tiny-f16.gguf",
    "qwen3-tiny-q8_0.gguf",
    "qwen3moe-tiny-f32.gguf",
    "deepseek-v2-tiny-f32.gguf",
    "deepseek-v3-tiny-f32.gguf",
];

const PROMPTS: &[&str] = &[
    "The capital of France is",
    "one two three four five six seven eight nine ten eleven twelve",
    "Hi",
    "Quote it back: the capital of france is paris . the capital of france is paris . the capital",
];

fn open(file: &str) -> (fucina_models::lm::LoadedLm, Tokenizer) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets").join(file);
    let lm = fucina_models::lm::open(&path, false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    (lm, tok)
}

/// A sequence's text sink.
type Sink<'a> = Box<dyn FnMut(&str) -> bool + 'a>;

fn greedy() -> Sampler {
    Sampler::new(SamplingParams::default())
}

#[test]
fn each_stream_of_a_batch_equals_its_sequential_run() {
    for file in FILES {
        for backend in [BackendKind::Native, BackendKind::Scalar] {
            let ctx = ExecContext::with_backend(backend, 2).unwrap();
            let _g = ctx.enter();
            let (lm, tok) = open(file);
            let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| tok.encode(p).unwrap()).collect();
            // Different budgets: sequences leave the batch at different steps.
            let opts: Vec<GenerateOptions> = (0..prompts.len())
                .map(|i| GenerateOptions { max_tokens: 12 + 5 * i, ..GenerateOptions::default() })
                .collect();
            let alone: Vec<Vec<u32>> = prompts
                .iter()
                .zip(&opts)
                .map(|(p, o)| {
                    let mut cache = lm.model.new_cache(128, KvType::F32).unwrap();
                    generate(&*lm.model, &tok, &mut cache, p, &mut greedy(), o, &mut |_| true).unwrap().0
                })
                .collect();
            // Whole prompts in the first pass, and prompts in chunks of 5 (the long ones are
            // still prefilling while the short ones decode).
            for chunk in [usize::MAX, 5] {
                let mut caches: Vec<KvCache> =
                    (0..prompts.len()).map(|_| lm.model.new_cache(128, KvType::F32).unwrap()).collect();
                let mut samplers: Vec<Sampler> = (0..prompts.len()).map(|_| greedy()).collect();
                let mut texts: Vec<String> = vec![String::new(); prompts.len()];
                let mut sinks: Vec<Sink<'_>> = texts
                    .iter_mut()
                    .map(|t| {
                        Box::new(move |s: &str| {
                            t.push_str(s);
                            true
                        }) as Box<dyn FnMut(&str) -> bool>
                    })
                    .collect();
                let mut jobs: Vec<BatchJob<'_>> = prompts
                    .iter()
                    .zip(caches.iter_mut())
                    .zip(samplers.iter_mut())
                    .zip(&opts)
                    .zip(sinks.iter_mut())
                    .map(|((((p, c), s), o), t)| BatchJob {
                        prompt: p,
                        cache: c,
                        sampler: s,
                        opts: o,
                        on_text: &mut **t,
                    })
                    .collect();
                let outs = generate_batch(&*lm.model, &tok, &mut jobs, chunk).unwrap();
                drop(jobs);
                drop(sinks);
                for (i, ((out, stats), want)) in outs.iter().zip(&alone).enumerate() {
                    assert_eq!(out, want, "{file} {backend:?} chunk {chunk}: stream {i}");
                    assert_eq!(stats.generated_tokens, out.len());
                    assert_eq!(texts[i], tok.decode(out).unwrap(), "{file}: stream {i}'s text");
                }
                for (c, (p, out)) in caches.iter().zip(prompts.iter().zip(&outs)) {
                    // The cache holds the prompt and every answer token but the last.
                    assert_eq!(c.len(), p.len() + out.0.len() - 1, "{file}");
                }
            }
        }
    }
}

/// The logits of a mixed pass (one sequence verifying four rows, one decoding one, one
/// prefilling a chunk with no logits, one finishing its prompt) against each sequence run
/// alone. The tolerance (2e-4 of the row's largest magnitude) covers summation order; a
/// sequence that saw another's keys or positions would be off by far more.
#[test]
fn a_mixed_pass_gives_each_sequence_its_own_logits() {
    for file in ["qwen3-tiny-f32.gguf", "qwen3moe-tiny-f32.gguf", "deepseek-v3-tiny-f32.gguf"] {
        let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
        let _g = ctx.enter();
        let (lm, tok) = open(file);
        let m = &*lm.model;
        let toks: Vec<Vec<u32>> = PROMPTS.iter().map(|p| tok.encode(p).unwrap()).collect();
        let mut caches: Vec<KvCache> = (0..4).map(|_| m.new_cache(128, KvType::F32).unwrap()).collect();
        // Histories of different lengths already in three caches.
        for (c, t) in caches.iter_mut().zip(&toks).take(3) {
            m.forward(&t[..t.len() - 1], c, LogitRows::Last).unwrap();
        }
        let mut solo: Vec<KvCache> = (0..4).map(|_| m.new_cache(128, KvType::F32).unwrap()).collect();
        for (c, t) in solo.iter_mut().zip(&toks).take(3) {
            m.forward(&t[..t.len() - 1], c, LogitRows::Last).unwrap();
        }
        let feeds: [(&[u32], LogitRows); 4] = [
            (&toks[0][toks[0].len() - 1..], LogitRows::Last),
            (&toks[1][toks[1].len() - 1..], LogitRows::All),
            (&toks[2][toks[2].len() - 1..], LogitRows::None),
            (&toks[3][..7], LogitRows::All),
        ];
        let mut batch: Vec<Segment<'_>> =
            caches.iter_mut().zip(&feeds).map(|(c, (t, rows))| Segment { tokens: t, cache: c, rows: *rows }).collect();
        let got = m.forward_batch(&mut batch).unwrap();
        drop(batch);
        for (i, ((t, rows), c)) in feeds.iter().zip(solo.iter_mut()).enumerate() {
            let want = m.forward(t, c, *rows).unwrap().to_f32_vec();
            let g = got[i].to_f32_vec();
            if *rows == LogitRows::None {
                assert!(g.is_empty(), "{file}: sequence {i} asked for no rows");
                continue;
            }
            assert_eq!(g.len(), want.len(), "{file}: sequence {i}");
            let scale = want.iter().fold(0f32, |a, x| a.max(x.abs()));
            let err = g.iter().zip(&want).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            assert!(err <= 2e-4 * scale, "{file}: sequence {i} off by {err} (scale {scale})");
            assert_eq!(caches[i].len(), c.len(), "{file}: sequence {i}'s cache");
        }
    }
}

#[test]
fn a_bad_sequence_fails_the_batch_before_anything_runs() {
    let (lm, tok) = open("qwen3-tiny-f32.gguf");
    let m = &*lm.model;
    let t = tok.encode("The capital of France is").unwrap();
    let mut a = m.new_cache(64, KvType::F32).unwrap();
    let mut b = m.new_cache(2, KvType::F32).unwrap();
    let mut batch = [
        Segment { tokens: &t, cache: &mut a, rows: LogitRows::Last },
        Segment { tokens: &t, cache: &mut b, rows: LogitRows::Last },
    ];
    let e = m.forward_batch(&mut batch).unwrap_err().to_string();
    assert!(e.contains("context length of 2"), "{e}");
    assert_eq!(a.len(), 0, "the first sequence's cache was not touched");
    let mut empty = [Segment { tokens: &[], cache: &mut a, rows: LogitRows::Last }];
    assert!(m.forward_batch(&mut empty).unwrap_err().to_string().contains("no tokens"));
}

/// `qwen3 --batch FILE` answers every line together; each answer is what `--chat` gives for
/// that line alone.
#[test]
fn the_cli_answers_a_batch_as_it_answers_each_line() {
    let lines = ["What is the capital of France?", "Name three colours.", "Count to five."];
    let dir = std::env::temp_dir().join(format!("fucina-batch-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("questions.txt");
    std::fs::write(&file, lines.join("\n\n")).unwrap();
    let run = |args: &[&str]| -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_qwen3"))
            .args(["--max-tokens", "12", "--threads", "2"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let batch = run(&["--batch", file.to_str().unwrap()]);
    for (i, l) in lines.iter().enumerate() {
        let alone = run(&["--chat", l]);
        let want = format!("[{}] {}", i + 1, alone.trim());
        assert!(batch.contains(&want), "line {i}: {want:?} not in {batch:?}");
    }
}
