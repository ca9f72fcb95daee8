//! NAM parity: every committed model (`tools/gen_nam.py`: WaveNet standard/lite/feather/nano
//! and two LSTMs, exported and run by `neural-amp-modeler` itself) gives the package's output
//! sample by sample within 1e-5, as a whole signal (the DSL forward, on both backends) and
//! streamed in buffers of 1, 7, 64, 128 and 4096 samples. The 0.5-schema copies of the
//! WaveNets load to the same model.

use fucina::prelude::*;
use fucina_models::nam::Amp;

const TOL: f32 = 1e-5;

fn dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/nam")
}

fn signals() -> (Vec<f32>, serde_json::Value) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("signals.json")).unwrap()).unwrap();
    let x = v["input"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap() as f32).collect();
    (x, v["outputs"].clone())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

// `trained` is the model `amp-train` exported; its reference output is neural-amp-modeler
// loading and running that file.
const MODELS: [&str; 7] = ["standard", "lite", "feather", "nano", "lstm-standard", "lstm-lite", "trained"];

#[test]
fn block_mode_matches_neural_amp_modeler_on_both_backends() {
    let (x, outs) = signals();
    for name in MODELS {
        let want: Vec<f32> = outs[name].as_array().unwrap().iter().map(|s| s.as_f64().unwrap() as f32).collect();
        for backend in [BackendKind::Scalar, BackendKind::Native] {
            let ctx = ExecContext::with_backend(backend, 2).unwrap();
            let _g = ctx.enter();
            let amp = Amp::open(dir().join(format!("{name}.nam"))).unwrap();
            let got = amp.process_block(&x).unwrap();
            let d = max_diff(&got, &want);
            assert!(d <= TOL, "{name} {backend:?}: max diff {d}");
            if !name.starts_with("lstm") && name != "trained" {
                let old = Amp::open(dir().join(format!("{name}.v05.nam"))).unwrap();
                assert_eq!(old.process_block(&x).unwrap(), got, "{name}: 0.5 schema");
            }
        }
    }
}

#[test]
fn streaming_matches_at_every_buffer_size() {
    let (x, outs) = signals();
    for name in MODELS {
        let want: Vec<f32> = outs[name].as_array().unwrap().iter().map(|s| s.as_f64().unwrap() as f32).collect();
        let amp = Amp::open(dir().join(format!("{name}.nam"))).unwrap();
        let runs = [(1, 64, BackendKind::Native), (7, 64, BackendKind::Scalar), (7, 64, BackendKind::Native)];
        let runs =
            runs.into_iter().chain([(64, 64), (128, 128), (4096, 512)].map(|(b, m)| (b, m, BackendKind::Native)));
        for (bs, max_block, backend) in runs {
            let mut s = amp.stream_on(max_block, backend);
            let mut got = vec![0.0f32; x.len()];
            for (xi, yi) in x.chunks(bs).zip(got.chunks_mut(bs)) {
                s.process(xi, yi);
            }
            let d = max_diff(&got, &want);
            assert!(d <= TOL, "{name} buffers of {bs} on {backend:?}: max diff {d}");
            // After a reset it starts from silence again.
            s.reset();
            let mut again = vec![0.0f32; 300];
            s.process(&x[..300], &mut again);
            assert!(max_diff(&again, &want[..300]) <= TOL, "{name}: reset");
        }
    }
}
