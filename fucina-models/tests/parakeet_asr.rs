//! Speech to text end to end: the committed WAV (`tests/goldens/parakeet_tones.wav`, 16-bit
//! PCM at 16 kHz) through `wav::read`, the front-end, the encoder and greedy CTC gives
//! `transformers`' per-frame logits and tokens on the same samples; a 44.1 kHz stereo copy goes
//! through the resampler; broken WAVs are errors.

use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina_models::llm::assets::default_asr_model;
use fucina_models::parakeet::{ctc_collapse, wav, Recognizer};
use std::path::PathBuf;

fn wav_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/parakeet_tones.wav")
}

#[test]
fn a_wav_file_is_recognized_as_transformers_recognizes_it() {
    let st = SafeTensors::open(default_asr_model()).unwrap();
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let rec = Recognizer::load(&st).unwrap();
    let audio = wav::read(&wav_path()).unwrap();
    assert_eq!((audio.rate, audio.samples.len()), (16_000, 8000));
    let logits = rec.logits(&audio.samples).unwrap().to_f32_vec();
    let want: Tensor<(seq, vocab)> = Tensor::from_raw(st.load("wav_logits").unwrap()).unwrap();
    let d = logits.iter().zip(want.to_f32_vec()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    // As tests/parakeet_ctc.rs (1e-5 scale), on the WAV's own samples.
    assert!(d <= 5e-5, "logits: max diff {d}");
    let greedy: Vec<u32> = st
        .bytes("wav_greedy")
        .unwrap()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
        .collect();
    let t = rec.transcribe(&audio.samples).unwrap();
    assert_eq!(t.frames, greedy.len());
    let ids: Vec<u32> = t.tokens.iter().map(|k| k.id).collect();
    assert_eq!(ids, ctc_collapse(&greedy, rec.model.config().blank));
    // Each token's time is its frame's (80 ms apart at 16 kHz, hop 160, 8x subsampling).
    assert!((rec.frame_seconds() - 0.08).abs() < 1e-12);
    for k in &t.tokens {
        let f = (k.start / 0.08).round() as usize;
        assert!(f < greedy.len() && greedy[f] == k.id, "{k:?}");
    }
    let pieces: String = t.tokens.iter().map(|k| k.piece.as_str()).collect();
    assert_eq!(t.text, pieces.replace('\u{2581}', " ").trim_start());
}

#[test]
fn other_rates_and_channels_are_resampled_and_mixed() {
    let src = wav::read(&wav_path()).unwrap();
    let dir = std::env::temp_dir().join(format!("fucina-asr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The same tones at 44.1 kHz in two channels (one inverted and halved: the mix is a quarter).
    let up = wav::resample(&src, 44_100).unwrap();
    assert_eq!(up.samples.len(), (8000.0f64 * 44_100.0 / 16_000.0).round() as usize);
    let p = dir.join("stereo.wav");
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 44_100,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(&p, spec).unwrap();
    for &s in &up.samples {
        w.write_sample(s).unwrap();
        w.write_sample(-0.5 * s).unwrap();
    }
    w.finalize().unwrap();
    let back = wav::read(&p).unwrap();
    assert_eq!((back.rate, back.samples.len()), (44_100, up.samples.len()));
    let down = wav::resample(&back, 16_000).unwrap();
    assert_eq!(down.samples.len(), 8000);
    // Band-limited tones survive the round trip: compare away from the ends.
    let err = down.samples[400..7600]
        .iter()
        .zip(&src.samples[400..7600])
        .map(|(a, b)| (a - 0.25 * b).abs())
        .fold(0.0f32, f32::max);
    assert!(err < 0.02, "round trip through 44.1 kHz: max error {err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn broken_wavs_and_short_audio_are_errors() {
    let dir = std::env::temp_dir().join(format!("fucina-asr-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = std::fs::read(wav_path()).unwrap();
    for (name, data) in
        [("empty.wav", vec![]), ("truncated.wav", bytes[..30].to_vec()), ("text.wav", b"RIFF nonsense".to_vec())]
    {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        let e = wav::read(&p).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
    std::fs::remove_dir_all(&dir).ok();
    let st = SafeTensors::open(default_asr_model()).unwrap();
    let rec = Recognizer::load(&st).unwrap();
    assert!(rec.transcribe(&[0.0; 100]).unwrap_err().to_string().contains("100 samples"));
}

#[test]
fn audio_too_long_for_memory_is_an_error_before_any_allocation() {
    use fucina_models::parakeet::{frame, mel};
    let st = SafeTensors::open(default_asr_model()).unwrap();
    let rec = Recognizer::load(&st).unwrap();
    // A view of 2^40 frames costs nothing: broadcast one row.
    let row = Tensor::<(mel,)>::from_vec(vec![0.0; 80], &[80]).unwrap();
    let huge: Tensor<(frame, mel)> = row.broadcast_to(&[1 << 40, 80]).unwrap();
    let e = rec.model.encode(&huge).unwrap_err().to_string();
    assert!(e.contains("attention scores"), "{e}");
}

#[test]
fn resampling_in_pieces_equals_resampling_the_whole() {
    use fucina_models::parakeet::wav::{resample, Audio, StreamResampler};
    let x: Vec<f32> = (0..44_100).map(|i| (i as f32 * 0.031).sin() * 0.5 + (i as f32 * 0.0007).cos() * 0.2).collect();
    let whole = resample(&Audio { samples: x.clone(), rate: 44_100 }, 16_000).unwrap().samples;
    let mut r = StreamResampler::new(44_100, 16_000).unwrap();
    let mut pieces = Vec::new();
    let mut at = 0;
    for (k, n) in [1, 700, 3000, 13, 1024, 5000].iter().cycle().enumerate() {
        if at >= x.len() || k > 10_000 {
            break;
        }
        let end = (at + n).min(x.len());
        pieces.extend(r.push(&x[at..end]).unwrap());
        at = end;
    }
    assert!(pieces.len() > whole.len() - 2000 && pieces.len() <= whole.len(), "{} of {}", pieces.len(), whole.len());
    assert_eq!(pieces[..], whole[..pieces.len()], "the same samples");
    let mut same = StreamResampler::new(16_000, 16_000).unwrap();
    assert_eq!(same.push(&x[..10]).unwrap(), x[..10].to_vec());
    assert!(StreamResampler::new(0, 16_000).is_err());
}
