//! Parakeet's TDT and RNN-T heads against `transformers`' `ParakeetForTDT` / `ParakeetForRNNT`:
//! tiny random models (`tools/gen_parakeet_transducers.py`: the CTC test's encoder shapes, a
//! 2-layer LSTM prediction network of width 24, 17 tokens, TDT durations 0-4, RNN-T at most 3
//! symbols per frame) on three utterances, both backends: the projected encoder output, the
//! joint network's output at every greedy step, and the steps themselves (token, blanks
//! included, and frames advanced; checked against `generate` by the generator).

use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina_models::parakeet::{
    frame, mel, ParakeetModel, ParakeetTransducer, Recognizer, TransducerConfig, TransducerKind,
};

/// Projected encoder outputs and joint logits (f32, O(1-10)): the encoder as in the CTC test,
/// then two LSTM layers per emitted token; measured below 1e-5.
const TOL: f32 = 1e-4;

fn golden(kind: &str) -> SafeTensors {
    SafeTensors::open(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/goldens/parakeet-{kind}-tiny.safetensors")),
    )
    .unwrap()
}

fn f32s(st: &SafeTensors, name: &str) -> (Vec<usize>, Vec<f32>) {
    let t: Tensor<fucina::axes![frame, mel]> = Tensor::from_raw(st.load(name).unwrap()).unwrap();
    (t.shape().to_vec(), t.to_f32_vec())
}

fn i32s(st: &SafeTensors, name: &str) -> Vec<usize> {
    st.bytes(name).unwrap().chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn tdt_and_rnnt_decode_as_transformers() {
    for (kind, want_kind) in [("tdt", TransducerKind::Tdt), ("rnnt", TransducerKind::Rnnt)] {
        let st = golden(kind);
        for backend in [BackendKind::Scalar, BackendKind::Native] {
            let ctx = ExecContext::with_backend(backend, 2).unwrap();
            let _g = ctx.enter();
            let model = ParakeetTransducer::load(&st).unwrap();
            assert_eq!(model.transducer.kind, want_kind);
            let mut zero_durations = 0;
            for u in 0..3 {
                let (shape, feats) = f32s(&st, &format!("features.{u}"));
                let x = Tensor::<(frame, mel)>::from_vec(feats, &shape).unwrap();
                let projected = model.project(&x).unwrap();
                let (ps, want_p) = f32s(&st, &format!("projected.{u}"));
                assert_eq!(projected.shape(), &ps[..], "{kind} utterance {u}: positions");
                let dp = max_diff(&projected.to_f32_vec(), &want_p);
                let mut logits = Vec::new();
                let steps = model.decode_with(&projected, |_, out| logits.extend_from_slice(out)).unwrap();
                let tokens: Vec<usize> = steps.iter().map(|s| s.token as usize).collect();
                let durations: Vec<usize> = steps.iter().map(|s| s.duration).collect();
                assert_eq!(tokens, i32s(&st, &format!("tokens.{u}")), "{kind} {backend:?} utterance {u}: tokens");
                assert_eq!(
                    durations,
                    i32s(&st, &format!("durations.{u}")),
                    "{kind} {backend:?} utterance {u}: durations"
                );
                // Each step reads the frame its predecessors' durations lead to.
                let mut at = 0;
                for s in &steps {
                    assert_eq!(s.frame, at);
                    at += s.duration;
                }
                zero_durations += durations.iter().filter(|&&d| d == 0).count();
                let (_, want_l) = f32s(&st, &format!("step_logits.{u}"));
                let dl = max_diff(&logits, &want_l);
                eprintln!(
                    "{kind} {backend:?} utterance {u}: {} steps, projected {dp:.2e}, joint logits {dl:.2e}",
                    steps.len()
                );
                assert!(dp <= TOL && dl <= TOL, "{kind} {backend:?} utterance {u}: projected {dp}, logits {dl}");
            }
            if want_kind == TransducerKind::Rnnt {
                assert!(zero_durations > 0, "the RNN-T goldens stay on a frame");
            }
        }
    }
}

#[test]
fn recognizer_reads_a_transducer_file() {
    let st = golden("tdt");
    let rec = Recognizer::load(&st).unwrap();
    assert!(matches!(rec.model, ParakeetModel::Transducer(_)));
    assert_eq!(rec.model.head(), "TDT");
    // Utterance 2's features come from a 3.3 s chirp: rebuild it from the same formula.
    let audio: Vec<f32> = (0..(3.3 * 16000.0) as usize)
        .map(|i| {
            let t = i as f64 / 16000.0;
            (0.3 * (2.0 * std::f64::consts::PI * (200.0 * t + 300.0 * t * t)).sin()
                * (0.6 + 0.4 * (2.0 * std::f64::consts::PI * 3.0 * t).sin())) as f32
        })
        .collect();
    let t = rec.transcribe(&audio).unwrap();
    assert!(!t.tokens.is_empty() && t.frames == 42, "{} tokens over {} frames", t.tokens.len(), t.frames);
    let blank = rec.model.config().blank;
    assert!(t.tokens.iter().all(|k| k.id != blank));
    assert!(t.tokens.windows(2).all(|w| w[0].start <= w[1].start), "times in order");
    assert!(rec.logits(&audio).is_err(), "per-frame logits are a CTC model's");
}

#[test]
fn bad_transducer_configs_are_errors_naming_the_field() {
    let text = golden("tdt").metadata()["config"].clone();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(TransducerConfig::from_json(&text, 17, 16).is_ok());
    for (key, value, want) in [
        ("durations", serde_json::json!([]), "durations"),
        ("durations", serde_json::json!([0, -1]), "durations"),
        ("decoder_hidden_size", serde_json::json!(0), "decoder_hidden_size"),
        ("num_decoder_layers", serde_json::Value::Null, "num_decoder_layers"),
        ("hidden_act", serde_json::json!("gelu"), "activation"),
        ("model_type", serde_json::json!("parakeet_ctc"), "transducer"),
        ("decoder_start_token_id", serde_json::json!(99), "decoder_start_token_id"),
    ] {
        let mut bad = v.clone();
        bad[key] = value;
        let e = TransducerConfig::from_json(&bad.to_string(), 17, 16).unwrap_err().to_string();
        assert!(e.contains(want), "{key}: {e}");
    }
}
