//! Speech to text end to end: the committed WAV (`tests/goldens/parakeet_tones.wav`, 16-bit
//! PCM at 16 kHz) through `wav::read`, the front-end, the encoder and greedy CTC gives
//! `transformers`' per-frame logits and tokens on the same samples; a 44.1 kHz stereo copy goes
//! through the resampler; a spoken sentence (espeak-ng, 22.05 kHz) through the resampler, both
//! heads and the decoders; broken WAVs are errors.

use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina_models::llm::assets::default_asr_model;
use fucina_models::parakeet::{ctc_collapse, wav, ParakeetModel, Recognizer};
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

fn golden_i32(st: &SafeTensors, name: &str) -> Vec<u32> {
    st.bytes(name).unwrap().chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32).collect()
}

/// "the cat sat on the mat" from espeak-ng at 22050 Hz (`tools/gen_parakeet_speech.py`): our
/// resampler against scipy's polyphase one, then the tiny CTC and TDT models on the reference
/// 16 kHz samples against transformers, then the whole pipeline from the file.
#[test]
fn a_spoken_sentence_runs_end_to_end() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/goldens");
    let g = SafeTensors::open(dir.join("speech_cat.safetensors")).unwrap();
    let want16: Tensor<(sample,)> = Tensor::from_raw(g.load("samples16k").unwrap()).unwrap();
    let want16 = want16.to_f32_vec();
    let audio = wav::read(&dir.join("speech_cat.wav")).unwrap();
    assert_eq!((audio.rate, audio.samples.len()), (22_050, 41_587));
    let ours = wav::resample(&audio, 16_000).unwrap().samples;
    assert_eq!(ours.len(), want16.len());
    let (sig, err) = want16
        .iter()
        .zip(&ours)
        .fold((0f64, 0f64), |(s, e), (w, o)| (s + f64::from(*w).powi(2), e + f64::from(w - o).powi(2)));
    let snr = 10.0 * (sig / err).log10();
    eprintln!("rubato vs scipy resample_poly: SNR {snr:.1} dB");
    // Two different band-limited resamplers (rubato's FFT filter, scipy's Kaiser FIR) differ in
    // their transition bands below 8 kHz, where espeak's speech still has energy: measured
    // 31.1 dB, the same away from the ends; one sample of misalignment gives 5.8 dB.
    assert!(snr >= 25.0, "resampled speech: SNR {snr:.1} dB");

    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let st = SafeTensors::open(default_asr_model()).unwrap();
    let ctc = Recognizer::load(&st).unwrap();
    let logits = ctc.logits(&want16).unwrap();
    let want: Tensor<(seq, vocab)> = Tensor::from_raw(g.load("ctc_logits").unwrap()).unwrap();
    let d = logits.to_f32_vec().iter().zip(want.to_f32_vec()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(d <= 5e-5, "CTC logits on speech: max diff {d}");
    let best: Vec<u32> = logits.argmax::<vocab>().unwrap().raw().to_vec::<u32>().unwrap();
    assert_eq!(best, golden_i32(&g, "ctc_greedy"));

    let tdt = Recognizer::load(&SafeTensors::open(dir.join("parakeet-tdt-tiny.safetensors")).unwrap()).unwrap();
    let ParakeetModel::Transducer(m) = &tdt.model else { panic!("a TDT file") };
    let steps = m.decode(&m.project(&tdt.features(&want16).unwrap()).unwrap()).unwrap();
    assert_eq!(steps.iter().map(|s| s.token).collect::<Vec<_>>(), golden_i32(&g, "tdt_tokens"));
    assert_eq!(steps.iter().map(|s| s.duration as u32).collect::<Vec<_>>(), golden_i32(&g, "tdt_durations"));

    // From the file, through our resampler: the same frames, and (measured) the same tokens.
    for rec in [&ctc, &tdt] {
        let from_file = rec.transcribe(&ours).unwrap();
        let reference = rec.transcribe(&want16).unwrap();
        assert_eq!(from_file.frames, reference.frames);
        let ids = |t: &fucina_models::parakeet::Transcript| t.tokens.iter().map(|k| k.id).collect::<Vec<_>>();
        eprintln!(
            "{}: {:?} from the file, {:?} from scipy's samples",
            rec.model.head(),
            ids(&from_file),
            ids(&reference)
        );
        assert_eq!(ids(&from_file), ids(&reference), "{}", rec.model.head());
    }
}
