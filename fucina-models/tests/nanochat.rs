//! nanochat against its references: the GPT's logits, loss and every gradient against
//! `transformers`' `NanoChatForCausalLM` (tools/gen_nanochat_tiny.py), on both backends;
//! the BPE trainer's merges and encoding against `rustbpe`, nanochat's own trainer.

use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina::tensor::axes::Axes;
use fucina_models::nanochat::{bpe, Gpt, GptBlock, GptConfig};
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
                q: param(st, &n("self_attn.q_proj")),
                k: param(st, &n("self_attn.k_proj")),
                v: param(st, &n("self_attn.v_proj")),
                o: param(st, &n("self_attn.o_proj")),
                up: param(st, &n("mlp.fc1")),
                down: param(st, &n("mlp.fc2")),
            }
        })
        .collect();
    Gpt { config, embed: param(st, "model.embed_tokens.weight"), blocks, head: param(st, "lm_head.weight") }
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
                "embed" => "model.embed_tokens.weight".into(),
                "head" => "lm_head.weight".into(),
                _ => {
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
    let g: Value = serde_json::from_str(&std::fs::read_to_string(format!("{GOLDENS}/nanochat_bpe.json")).unwrap()).unwrap();
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
