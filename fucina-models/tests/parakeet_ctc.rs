//! Parakeet's FastConformer encoder and CTC head against `transformers`' `ParakeetForCTC`: a
//! tiny random model (`tools/gen_parakeet_tiny.py`: 2 blocks, width 32, 4 heads, kernel 9,
//! 8x subsampling with 8 channels, 17 tokens; batch-norm statistics and position biases
//! randomized), on the extractor's features of two utterances, on both backends.

use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina_models::parakeet::{ctc_collapse, frame, mel, ParakeetCtc};

/// Encoder outputs (layer-normed, O(1)) and logits: f32 through two blocks of attention,
/// depthwise convolution and batch norm folded at load; measured 1.7e-6 and 3.1e-6.
const TOL: f32 = 5e-5;

fn golden() -> SafeTensors {
    SafeTensors::open(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/parakeet-ctc-tiny.safetensors"))
        .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn f32s(st: &SafeTensors, name: &str) -> (Vec<usize>, Vec<f32>) {
    let t: Tensor<fucina::axes![frame, mel]> = Tensor::from_raw(st.load(name).unwrap()).unwrap();
    (t.shape().to_vec(), t.to_f32_vec())
}

#[test]
fn encoder_and_ctc_logits_match_transformers() {
    let st = golden();
    for backend in [BackendKind::Scalar, BackendKind::Native] {
        let ctx = ExecContext::with_backend(backend, 2).unwrap();
        let _g = ctx.enter();
        let model = ParakeetCtc::load(&st).unwrap();
        for u in 0..2 {
            let (shape, feats) = f32s(&st, &format!("features.{u}"));
            let x = Tensor::<(frame, mel)>::from_vec(feats, &shape).unwrap();
            let hidden = model.encode(&x).unwrap();
            let (hs, want_h) = f32s(&st, &format!("hidden.{u}"));
            assert_eq!(hidden.shape(), &hs[..], "utterance {u}: encoder positions");
            assert_eq!(model.config.positions(shape[0]), hs[0]);
            let dh = max_diff(&hidden.to_f32_vec(), &want_h);
            let logits = model.logits(&x).unwrap();
            let (_, want_l) = f32s(&st, &format!("logits.{u}"));
            let dl = max_diff(&logits.to_f32_vec(), &want_l);
            eprintln!("{backend:?} utterance {u}: hidden {dh:.2e}, logits {dl:.2e}");
            assert!(dh <= TOL && dl <= TOL, "{backend:?} utterance {u}: hidden {dh}, logits {dl}");
            let best: Vec<u32> = logits.argmax::<fucina::axis::vocab>().unwrap().raw().to_vec::<u32>().unwrap();
            let want: Vec<u32> = st
                .bytes(&format!("greedy.{u}"))
                .unwrap()
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
                .collect();
            assert_eq!(best, want, "{backend:?} utterance {u}: greedy tokens");
            let text = ctc_collapse(&best, model.config.blank);
            assert!(text.len() <= best.len());
        }
    }
}

#[test]
fn bad_configs_are_errors_naming_the_field() {
    use fucina_models::parakeet::ParakeetConfig;
    let good = golden().metadata()["config"].clone();
    assert!(ParakeetConfig::from_json(&good).is_ok());
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    for (path, value, want) in [
        ("encoder_config.num_attention_heads", serde_json::json!(5), "heads"),
        ("encoder_config.hidden_size", serde_json::json!(0), "hidden_size"),
        ("encoder_config.subsampling_factor", serde_json::json!(6), "subsampling"),
        ("encoder_config.conv_kernel_size", serde_json::json!(8), "odd"),
        ("pad_token_id", serde_json::json!(17), "blank"),
        ("vocab_size", serde_json::json!(u64::MAX), "vocab_size"),
        ("encoder_config.hidden_act", serde_json::json!("gelu"), "silu"),
    ] {
        let mut bad = v.clone();
        let (parent, key) = path.rsplit_once('.').map_or((None, path), |(p, k)| (Some(p), k));
        let o = match parent {
            Some(p) => &mut bad[p],
            None => &mut bad,
        };
        o[key] = value;
        let e = ParakeetConfig::from_json(&bad.to_string()).unwrap_err().to_string();
        assert!(e.contains(want), "{path}: {e}");
    }
    assert!(ParakeetConfig::from_json("{not json").is_err());
}
