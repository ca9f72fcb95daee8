//! Logit and routing parity with transformers' DeepseekV2ForCausalLM and DeepseekV3ForCausalLM
//! on tiny random models (`tools/gen_deepseek_tiny.py`): every prefill position, 16 greedy
//! decode steps, and the experts every MoE layer picks for every prompt token. V2: no query
//! compression, softmax greedy routing, plain RoPE; V3: query compression, sigmoid routing
//! with a correction bias in 4 groups, normalized and scaled weights, YaRN.
//!
//! Tolerance 1e-4 on logits of magnitude ~1-10: the latent (absorbed) attention computes
//! `q (W k)` as `(q W) k`, a different summation order from transformers' decompressed keys.

use fucina::prelude::*;
use fucina_models::deepseek::DeepSeek;
use fucina_models::llm::LogitRows;
use fucina_models::llm::ModelFile;

const TOL: f32 = 1e-4;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn check(model_file: &str, golden: &str, backend: BackendKind, cache: DType, tol: f32) {
    check_budget(model_file, golden, backend, cache, tol, None);
}

fn check_budget(
    model_file: &str,
    golden: &str,
    backend: BackendKind,
    cache: DType,
    tol: f32,
    budget: Option<usize>,
) -> DeepSeek {
    let ctx = ExecContext::with_backend(backend, 2).unwrap();
    let _g = ctx.enter();
    let file = ModelFile::open(root().join("assets").join(model_file), &["deepseek2"]).unwrap();
    let model = DeepSeek::load(&file, budget).unwrap();
    let gold: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("tests/goldens").join(golden)).unwrap()).unwrap();
    let vocab = model.config.vocab;
    for case in gold["cases"].as_array().unwrap() {
        let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let mut kv = model.new_cache(64, cache.into()).unwrap();
        let mut routes = Vec::new();
        let prefill = model.forward_traced(&ids, &mut kv, LogitRows::All, Some(&mut routes)).unwrap().to_f32_vec();
        let want: Vec<Vec<f32>> = serde_json::from_value(case["prefill"].clone()).unwrap();
        for (p, w) in want.iter().enumerate() {
            let d = max_diff(&prefill[p * vocab..(p + 1) * vocab], w);
            assert!(d <= tol, "{model_file} {backend:?}: prefill position {p}: max diff {d}");
        }
        let want_routes: Vec<Vec<Vec<u32>>> = serde_json::from_value(case["routes"].clone()).unwrap();
        assert_eq!(routes, want_routes, "{model_file}: expert choices per MoE layer and token");
        let greedy: Vec<u32> = serde_json::from_value(case["greedy"].clone()).unwrap();
        let steps: Vec<Vec<f32>> = serde_json::from_value(case["decode"].clone()).unwrap();
        let mut next = argmax(&prefill[(ids.len() - 1) * vocab..]);
        for (i, w) in steps.iter().enumerate() {
            assert_eq!(next, greedy[i], "{model_file} {backend:?}: greedy token {i}");
            let got = model.forward_traced(&[next], &mut kv, LogitRows::Last, None).unwrap().to_f32_vec();
            let d = max_diff(&got, w);
            assert!(d <= tol, "{model_file} {backend:?}: decode step {i}: max diff {d}");
            next = argmax(&got);
        }
    }
    model
}

#[test]
fn deepseek_v2_matches_transformers() {
    check("deepseek-v2-tiny-f32.gguf", "deepseek_v2_tiny_logits.json", BackendKind::Scalar, DType::F32, TOL);
    check("deepseek-v2-tiny-f32.gguf", "deepseek_v2_tiny_logits.json", BackendKind::Native, DType::F32, TOL);
}

#[test]
fn deepseek_v3_matches_transformers() {
    check("deepseek-v3-tiny-f32.gguf", "deepseek_v3_tiny_logits.json", BackendKind::Scalar, DType::F32, TOL);
    check("deepseek-v3-tiny-f32.gguf", "deepseek_v3_tiny_logits.json", BackendKind::Native, DType::F32, TOL);
}

#[test]
fn experts_streamed_under_a_tiny_budget_give_the_same_logits() {
    // A budget of two experts in all (shared by the layers): nearly every use reloads and evicts.
    let one = 3 * 32 * 64 * 4; // gate, up, down of 32 x 64 f32
    let m = check_budget(
        "deepseek-v3-tiny-f32.gguf",
        "deepseek_v3_tiny_logits.json",
        BackendKind::Native,
        DType::F32,
        TOL,
        Some(2 * one),
    );
    let s = m.expert_stats();
    assert!(s.uses > 0 && s.loads > 16 && s.evictions > 0, "{s:?}");
}

#[test]
fn latent_cache_in_f16_stays_close() {
    check("deepseek-v3-tiny-f32.gguf", "deepseek_v3_tiny_logits.json", BackendKind::Native, DType::F16, 2e-2);
}

#[test]
fn experts_repacked_at_load_give_the_logits_of_experts_read_from_the_map() {
    use fucina_models::deepseek::experts::ExpertPlacement;
    // A Q8_0 copy of the tiny V3 model: its experts (32 x 64 and 64 x 32) fit the
    // sixteen-row interleaved layout, so a CPU with the repacked kernels copies them at load.
    let dir = std::env::temp_dir().join(format!("fucina-ds-resident-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let q8 = dir.join("deepseek-v3-tiny-q8_0.gguf");
    let (target, file_type) = fucina_models::quantize::parse_target("Q8_0").unwrap();
    fucina_models::quantize::quantize_file(
        &root().join("assets/deepseek-v3-tiny-f32.gguf"),
        &q8,
        target,
        file_type,
        |_, _, _| {},
    )
    .unwrap();
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let ids = [1u32, 7, 42, 9, 300, 5, 77, 12];
    let run = |budget: Option<usize>| {
        let file = ModelFile::open(&q8, &["deepseek2"]).unwrap();
        let model = DeepSeek::load(&file, budget).unwrap();
        let mut kv = model.new_cache(32, DType::F32.into()).unwrap();
        let mut logits = model.forward_traced(&ids, &mut kv, LogitRows::All, None).unwrap().to_f32_vec();
        for t in [3u32, 99, 250, 4] {
            logits.extend(model.forward_traced(&[t], &mut kv, LogitRows::Last, None).unwrap().to_f32_vec());
        }
        (logits, model.expert_placement(), file.repacked_bytes())
    };
    let (resident, placed, repacked) = run(None);
    let (mapped, placed_mapped, repacked_mapped) = run(Some(1 << 30));
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(placed, Some(ExpertPlacement::Resident));
    assert_eq!(placed_mapped, Some(ExpertPlacement::Streamed(1 << 30)));
    // Repacking is up to the CPU; where it repacks Q8_0, the experts are counted too.
    let w: Tensor<axes![vocab, hidden]> = Tensor::from_vec(vec![0.5f32; 32 * 64], &[32, 64]).unwrap();
    use fucina::quant::{GgmlType, QWeight};
    let cpu_repacks = QWeight::quantize(&w, GgmlType::Q8_0).unwrap().prepared().unwrap().is_repacked();
    if cpu_repacks {
        assert!(repacked > repacked_mapped, "{repacked} <= {repacked_mapped}");
    } else {
        assert_eq!(repacked, repacked_mapped);
    }
    let d = max_diff(&resident, &mapped);
    // The same Q8_0 products in another summation order.
    assert!(d <= 1e-4, "resident vs mapped experts: max diff {d}");
}
