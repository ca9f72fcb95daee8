//! nanochat against its references: the GPT's logits, loss and every gradient against
//! `transformers`' `NanoChatForCausalLM` (tools/gen_nanochat_tiny.py), on both backends;
//! the BPE trainer's merges and encoding against `rustbpe`, nanochat's own trainer.

use fucina::formats::safetensors::SafeTensors;
use fucina::nn::{Embedding, Linear};
use fucina::prelude::*;
use fucina::tensor::axes::Axes;
use fucina_models::nanochat::{bpe, train, Gpt, GptBlock, GptConfig};
use serde_json::Value;

const GOLDENS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/goldens");

fn f32s(st: &SafeTensors, name: &str) -> Vec<f32> {
    st.load(name).unwrap_or_else(|e| panic!("{name}: {e}")).to_f32_vec()
}

fn param<A: Axes>(st: &SafeTensors, name: &str) -> Tensor<A> {
    Tensor::from_raw(st.load(name).unwrap()).unwrap()
}

fn tiny(st: &SafeTensors) -> Gpt {
    let config = GptConfig {
        vocab: 64,
        hidden: 32,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        ffn: 128,
        context: 64,
        rope_theta: 10000.0,
        eps: 1e-6,
        softcap: Some(15.0),
    };
    let blocks = (0..2)
        .map(|l| {
            let n = |s: &str| format!("model.layers.{l}.{s}.weight");
            GptBlock {
                q: Linear::new(param(st, &n("self_attn.q_proj")), None),
                k: Linear::new(param(st, &n("self_attn.k_proj")), None),
                v: Linear::new(param(st, &n("self_attn.v_proj")), None),
                o: Linear::new(param(st, &n("self_attn.o_proj")), None),
                up: Linear::new(param(st, &n("mlp.fc1")), None),
                down: Linear::new(param(st, &n("mlp.fc2")), None),
            }
        })
        .collect();
    Gpt {
        config,
        embed: Embedding::new(param(st, "model.embed_tokens.weight")),
        blocks,
        head: Linear::new(param(st, "lm_head.weight"), None),
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Logits within 2e-5, the loss within 1e-5 and every gradient within 2e-5 of PyTorch's
/// (values of order 1-15), on the scalar specification and the native backend.
#[test]
fn gpt_matches_transformers_forward_and_backward() {
    let st = SafeTensors::open(format!("{GOLDENS}/nanochat_tiny.safetensors")).unwrap();
    let ids: Vec<u32> = f32s(&st, "input_ids").iter().map(|x| *x as u32).collect();
    let targets: Vec<u32> = f32s(&st, "targets").iter().map(|x| if *x < 0.0 { u32::MAX } else { *x as u32 }).collect();
    for backend in [BackendKind::Scalar, BackendKind::Native] {
        let ctx = ExecContext::new(ExecConfig { backend, ..ExecConfig::default() }).unwrap();
        let _g = ctx.enter();
        let mut gpt = tiny(&st);
        let logits = gpt.forward(&ids, 2).unwrap().to_f32_vec();
        let d = max_diff(&logits, &f32s(&st, "logits"));
        assert!(d < 2e-5, "{backend:?}: logits off by {d}");
        gpt.track_params();
        {
            let _scope = ctx.open_exec_scope();
            let loss = gpt.loss(&ids, &targets, 2, Some(u32::MAX)).unwrap();
            let l = loss.to_f32_vec()[0];
            let want = f32s(&st, "loss")[0];
            assert!((l - want).abs() < 1e-5, "{backend:?}: loss {l} against {want}");
            loss.backward(&ctx).unwrap();
        }
        let hf = |n: &str| -> String {
            match n {
                "embed.weight" => "model.embed_tokens.weight".into(),
                "head.weight" => "lm_head.weight".into(),
                _ => {
                    let n = n.strip_suffix(".weight").unwrap_or_else(|| panic!("parameter {n}"));
                    let (l, w) = n.trim_start_matches("blocks.").split_once('.').unwrap();
                    let m = match w {
                        "q" => "self_attn.q_proj",
                        "k" => "self_attn.k_proj",
                        "v" => "self_attn.v_proj",
                        "o" => "self_attn.o_proj",
                        "up" => "mlp.fc1",
                        "down" => "mlp.fc2",
                        other => panic!("parameter {other}"),
                    };
                    format!("model.layers.{l}.{m}.weight")
                }
            }
        };
        let mut seen = 0;
        gpt.visit_params("", &mut |name, t| {
            let g = fucina::autograd::grad_of(t).unwrap_or_else(|| panic!("{name} has no gradient")).to_f32_vec();
            let d = max_diff(&g, &f32s(&st, &format!("grad.{}", hf(name))));
            assert!(d < 2e-5, "{backend:?}: gradient of {name} off by {d}");
            seen += 1;
        });
        assert_eq!(seen, 14);
    }
}

/// The same merges, in the same order, as `rustbpe` on the same corpus and pattern, and the
/// same ids for a text it never saw.
#[test]
fn bpe_trainer_matches_rustbpe() {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{GOLDENS}/nanochat_bpe.json")).unwrap()).unwrap();
    assert_eq!(g["pattern"].as_str().unwrap(), bpe::NANOCHAT_PATTERN);
    let corpus: Vec<&str> = g["corpus"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let vocab = g["vocab_size"].as_u64().unwrap() as usize;
    let b = bpe::train(corpus, vocab, bpe::NANOCHAT_PATTERN, |_, _| {}).unwrap();
    let want: Vec<Vec<u8>> = g["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u8).collect())
        .collect();
    assert_eq!(b.token_bytes[256..], want[..], "merged tokens in learning order");
    let ids: Vec<u32> = g["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    assert_eq!(b.encode(g["held_out"].as_str().unwrap()).unwrap(), ids);
}

/// A small model with every weight random (nanochat zero-initializes the output projections).
fn random_gpt(ctx: &ExecContext, vocab: usize) -> Gpt {
    let config = GptConfig {
        vocab,
        hidden: 32,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        ffn: 64,
        context: 64,
        rope_theta: 10000.0,
        eps: 1e-6,
        softcap: Some(15.0),
    };
    let mut gpt = Gpt::init(ctx, config).unwrap();
    for b in &mut gpt.blocks {
        b.o.weight = ctx.randn(&[32, 32], 0.0, 0.2).unwrap();
        b.down.weight = ctx.randn(&[32, 64], 0.0, 0.2).unwrap();
    }
    gpt.head.weight = ctx.randn(&[vocab, 32], 0.0, 0.3).unwrap();
    gpt
}

fn small_vocab() -> train::Vocab {
    let corpus = [
        "The capital of France is Paris. What is 12 + 34? 46.",
        "In the beginning God created the heaven and the earth.",
    ];
    train::Vocab::new(bpe::train(corpus, 300, bpe::NANOCHAT_PATTERN, |_, _| {}).unwrap()).unwrap()
}

/// The exported GGUF, run by the Llama-family decoder with its KV cache, gives the training
/// module's logits (1e-4), and its tokenizer (read back from the file) the trainer's ids and
/// chat prompts. Fails if the decoder drops any of nanochat's differences (e.g. the reversed
/// rotation, the norm after the embedding, the soft-cap or the squared ReLU).
#[test]
fn exported_gguf_runs_in_the_decoder() {
    use fucina_models::llm::batch::LogitRows;
    use fucina_models::llm::chat::{ChatFormat, Message, Role};
    use fucina_models::llm::kv_cache::KvType;
    use fucina_models::llm::tokenizer::Tokenizer;
    let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() }).unwrap();
    let _g = ctx.enter();
    let mut vocab = small_vocab();
    let gpt = random_gpt(&ctx, vocab.size());
    let dir = std::env::temp_dir().join(format!("fucina-nanochat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.gguf");
    fucina_models::nanochat::export::write(&gpt, &vocab, "tiny", &path).unwrap();
    let lm = fucina_models::lm::open(&path, false).unwrap();
    assert_eq!(lm.arch, "nanochat");
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    for text in ["The capital of France is Paris.", "What is 1234 + 5? It's 1239!", "  café\n\n東京 🙂 they're"] {
        assert_eq!(tok.encode(text).unwrap(), vocab.encode(text).unwrap(), "{text:?}");
    }
    let q = "What is the capital of France?";
    let prompt = tok.encode_prompt(&ChatFormat::NanoChat.prompt(&[Message::new(Role::User, q)], false)).unwrap();
    assert_eq!(prompt, vocab.prompt(q).unwrap());
    let want = gpt.forward(&prompt, 1).unwrap().to_f32_vec();
    // Prefill in two pieces, so the cache's positions count.
    let mut cache = lm.model.new_cache(64, KvType::F32).unwrap();
    let mut got = lm.model.forward(&prompt[..5], &mut cache, LogitRows::All).unwrap().to_f32_vec();
    got.extend(lm.model.forward(&prompt[5..], &mut cache, LogitRows::All).unwrap().to_f32_vec());
    let d = max_diff(&got, &want);
    assert!(d < 1e-4, "the decoder's logits are off by {d}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A run stopped at a checkpoint and resumed gives the same weights, bit for bit, as the run
/// that never stopped.
#[test]
fn resumed_training_is_bit_exact() {
    use fucina::formats::checkpoint::{load_checkpoint, save_checkpoint};
    let mut vocab = small_vocab();
    let docs: Vec<String> = fucina_models::nanochat::data::prose().into_iter().take(40).collect();
    let stream = train::Stream::documents(&mut vocab, &docs, 7).unwrap();
    let plan = train::Plan {
        steps: 4,
        batch: 2,
        seq: 16,
        matrix_lr: 0.02,
        embed_lr: 0.1,
        head_lr: 0.004,
        warmdown: 0.5,
        seed: 9,
    };
    let fresh = |ctx: &ExecContext| random_gpt(ctx, vocab.size());
    let ctx = ExecContext::new(ExecConfig { seed: 5, ..ExecConfig::default() }).unwrap();
    let _g = ctx.enter();
    let mut straight = fresh(&ctx);
    let mut opt = plan.optimizer();
    train::run(&ctx, &mut straight, &mut opt, &stream, &plan, 0, |_, _, _| Ok(())).unwrap();

    let ctx2 = ExecContext::new(ExecConfig { seed: 5, ..ExecConfig::default() }).unwrap();
    let _g2 = ctx2.enter();
    let mut first = fresh(&ctx2);
    let mut opt = plan.optimizer();
    let ckpt = std::env::temp_dir().join(format!("fucina-nanochat-resume-{}.ckpt", std::process::id()));
    // The same run, checkpointed after its second step.
    train::run(&ctx2, &mut first, &mut opt, &stream, &plan, 0, |g, o, r| {
        if r.step == 2 {
            save_checkpoint(&ckpt, g, o, &ctx2, &Default::default())?;
        }
        Ok(())
    })
    .unwrap();
    let mut resumed = fresh(&ctx2);
    let mut opt = plan.optimizer();
    load_checkpoint(&ckpt, &mut resumed, &mut opt, &ctx2).unwrap();
    train::run(&ctx2, &mut resumed, &mut opt, &stream, &plan, 2, |_, _, _| Ok(())).unwrap();
    std::fs::remove_file(&ckpt).ok();
    let (a, b) = (straight.named_params(), resumed.named_params());
    assert_eq!(a.len(), b.len());
    for ((na, ta), (_, tb)) in a.iter().zip(&b) {
        assert!(ta.to_f32_vec() == tb.to_f32_vec(), "{na} differs after the resume");
    }
}

/// The embedded default (`nanochat all`'s model) answers the README's question, and others it
/// was trained on, greedily through the chat path the `chat` binary uses.
#[test]
fn embedded_default_names_capitals() {
    use fucina_models::llm::chat::{ChatFormat, Message, Role};
    use fucina_models::llm::generate::{generate, GenerateOptions};
    use fucina_models::llm::kv_cache::KvType;
    use fucina_models::llm::sampling::{Sampler, SamplingParams};
    use fucina_models::llm::tokenizer::Tokenizer;
    let lm = fucina_models::lm::open(&fucina_models::llm::cli::default_chat_model(), false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    let format = ChatFormat::detect(|t| tok.token_id(t).is_some(), &lm.arch, None);
    assert_eq!(format, ChatFormat::NanoChat);
    let stops = fucina_models::llm::cli::stop_tokens(&lm.header, &tok);
    for (q, want) in [
        ("What is the capital of France?", "Paris"),
        ("Which city is the capital of Japan?", "Tokyo"),
        ("How many centimeters are in 8 meters?", "800 centimeters"),
    ] {
        let prompt = tok.encode_prompt(&format.prompt(&[Message::new(Role::User, q)], false)).unwrap();
        let opts = GenerateOptions { max_tokens: 32, stop_tokens: stops.clone(), ..GenerateOptions::default() };
        let mut cache = lm.model.new_cache(64, KvType::F32).unwrap();
        let mut sampler = Sampler::new(SamplingParams::default());
        let (ids, _) =
            generate(lm.model.as_ref(), &tok, &mut cache, &prompt, &mut sampler, &opts, &mut |_| true).unwrap();
        let answer = tok.decode(&ids).unwrap();
        assert!(answer.contains(want), "{q} -> {answer:?}");
    }
}
