//! Parakeet's front-end against `transformers`' `ParakeetFeatureExtractor`, and the library's
//! mel filter banks against `transformers.audio_utils.mel_filter_bank`
//! (`tools/gen_parakeet_features.py` writes the golden), on both backends.

use fucina::ops::{mel_filter_bank, MelBank, MelNorm, MelScale};
use fucina::prelude::*;
use fucina_models::parakeet::{freq, mel, FeatureConfig, FeatureExtractor};
use serde_json::Value;

/// Normalized log-mel features: the spectra are f32 FFTs on both sides (pocketfft in torch,
/// realfft here; the scalar backend's exact DFT in f64), and the logarithm of the quietest
/// bands magnifies their rounding; measured 5.4e-5 at most (either backend).
const FEATURE_TOL: f32 = 3e-4;
/// Filter weights: the same f64 formulas rounded to f32 (measured 0 or 1 ulp).
const BANK_TOL: f32 = 1e-6;

fn golden() -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/parakeet_features.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn config(c: &Value) -> FeatureConfig {
    let u = |k: &str| c[k].as_u64().unwrap() as usize;
    FeatureConfig {
        features: u("feature_size"),
        sample_rate: c["sampling_rate"].as_u64().unwrap() as u32,
        hop: u("hop_length"),
        n_fft: u("n_fft"),
        win_length: u("win_length"),
        preemphasis: c["preemphasis"].as_f64().map(|a| a as f32),
    }
}

#[test]
fn features_match_transformers_on_both_backends() {
    let g = golden();
    for backend in [BackendKind::Scalar, BackendKind::Native] {
        let ctx = ExecContext::with_backend(backend, 2).unwrap();
        let _guard = ctx.enter();
        for (i, case) in g["cases"].as_array().unwrap().iter().enumerate() {
            let fe = FeatureExtractor::new(config(&case["config"])).unwrap();
            let audio = floats(&case["audio"]);
            let n = audio.len();
            let f = fe.extract(&Tensor::<(sample,)>::from_vec(audio, &[n]).unwrap()).unwrap();
            let want = floats(&case["features"]);
            assert_eq!(f.valid, case["valid"].as_u64().unwrap() as usize, "case {i}: valid frames");
            assert_eq!(f.values.shape()[0], case["frames"].as_u64().unwrap() as usize, "case {i}: frames");
            let got = f.values.to_f32_vec();
            assert_eq!(got.len(), want.len());
            let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            eprintln!("{backend:?} case {i}: max diff {d:.2e}");
            assert!(d <= FEATURE_TOL, "{backend:?} case {i} ({n} samples): max diff {d} > {FEATURE_TOL}");
        }
    }
}

#[test]
fn mel_filter_banks_match_transformers() {
    let g = golden();
    for b in g["banks"].as_array().unwrap() {
        let bank = MelBank {
            bins: b["bins"].as_u64().unwrap() as usize,
            mels: b["mels"].as_u64().unwrap() as usize,
            f_min: b["f_min"].as_f64().unwrap(),
            f_max: b["f_max"].as_f64().unwrap(),
            sample_rate: b["sample_rate"].as_u64().unwrap() as u32,
            scale: if b["scale"] == "slaney" { MelScale::Slaney } else { MelScale::Htk },
            norm: if b["norm"] == "slaney" { MelNorm::Slaney } else { MelNorm::Peak },
        };
        let got = mel_filter_bank::<mel, freq>(&bank).unwrap().to_f32_vec();
        let want = floats(&b["filters"]);
        let d = got.iter().zip(&want).map(|(a, c)| (a - c).abs()).fold(0.0f32, f32::max);
        assert!(got.len() == want.len() && d <= BANK_TOL, "{bank:?}: max diff {d}");
    }
}

#[test]
fn audio_shorter_than_two_hops_and_bad_settings_are_errors() {
    let fe = FeatureExtractor::new(FeatureConfig::default()).unwrap();
    let short = Tensor::<(sample,)>::from_vec(vec![0.1; 319], &[319]).unwrap();
    let e = fe.extract(&short).unwrap_err().to_string();
    assert!(e.contains("319 samples"), "{e}");
    for bad in [
        FeatureConfig { hop: 0, ..FeatureConfig::default() },
        FeatureConfig { win_length: 513, ..FeatureConfig::default() },
        FeatureConfig { n_fft: 1 << 30, win_length: 400, ..FeatureConfig::default() },
        FeatureConfig { preemphasis: Some(f32::NAN), ..FeatureConfig::default() },
        FeatureConfig { features: 0, ..FeatureConfig::default() },
    ] {
        assert!(FeatureExtractor::new(bad).is_err(), "{bad:?}");
    }
}
