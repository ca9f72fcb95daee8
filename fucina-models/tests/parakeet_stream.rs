//! Streaming recognition (`parakeet::stream`): with contexts that cover the utterance every
//! window is the whole utterance, so the chunk-by-chunk output must equal offline recognition
//! exactly (CTC, TDT and RNN-T: this checks the chunk bookkeeping, the CTC collapse across
//! chunk boundaries and the transducer walk resumed across chunks); with short contexts tokens
//! become final as soon as their right context has arrived.

use fucina::formats::safetensors::SafeTensors;
use fucina_models::parakeet::{Recognizer, Stream, StreamOptions, TokenAt};
use std::path::Path;

fn recognizer(rel: &str) -> Recognizer {
    Recognizer::load(&SafeTensors::open(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()).unwrap()
}

/// The 3.3 s chirp of the transducer goldens (42 encoder frames).
fn chirp() -> Vec<f32> {
    (0..(3.3 * 16000.0) as usize)
        .map(|i| {
            let t = i as f64 / 16000.0;
            (0.3 * (2.0 * std::f64::consts::PI * (200.0 * t + 300.0 * t * t)).sin()
                * (0.6 + 0.4 * (2.0 * std::f64::consts::PI * 3.0 * t).sin())) as f32
        })
        .collect()
}

fn stream_all(rec: &Recognizer, audio: &[f32], opts: StreamOptions, piece: usize) -> (Vec<TokenAt>, usize) {
    let mut s = Stream::new(rec, opts).unwrap();
    let mut tokens = Vec::new();
    let fs = rec.frame_samples();
    for (k, p) in audio.chunks(piece).enumerate() {
        tokens.extend(s.push(p).unwrap());
        let total = ((k + 1) * piece).min(audio.len()) / fs;
        // Never ahead of the right context; never behind it by a chunk or more.
        assert!(s.frames() + opts.right <= total.max(opts.right), "decoded {} of {total} frames", s.frames());
        assert!(s.frames() + opts.chunk + opts.right > total, "decoded {} of {total} frames", s.frames());
    }
    tokens.extend(s.finish().unwrap());
    (tokens, s.windows())
}

fn edit_distance(a: &[u32], b: &[u32]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(x != y)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[test]
fn full_context_streaming_equals_offline_for_every_head() {
    let audio = chirp();
    for file in [
        "assets/parakeet-ctc-tiny.safetensors",
        "tests/goldens/parakeet-tdt-tiny.safetensors",
        "tests/goldens/parakeet-rnnt-tiny.safetensors",
    ] {
        let rec = recognizer(file);
        let offline = rec.transcribe(&audio).unwrap();
        assert_eq!(offline.frames, 42);
        for chunk in [1, 5, 13] {
            let opts = StreamOptions { chunk, left: 1000, right: 1000 };
            let (tokens, windows) = stream_all(&rec, &audio, opts, 1000);
            assert_eq!(windows, 42usize.div_ceil(chunk), "{file} chunk {chunk}");
            assert_eq!(tokens, offline.tokens, "{file} chunk {chunk}: streamed tokens");
        }
    }
}

#[test]
fn short_contexts_stream_with_bounded_latency() {
    let audio = chirp();
    for file in ["assets/parakeet-ctc-tiny.safetensors", "tests/goldens/parakeet-tdt-tiny.safetensors"] {
        let rec = recognizer(file);
        let offline: Vec<u32> = rec.transcribe(&audio).unwrap().tokens.iter().map(|t| t.id).collect();
        for (chunk, left, right) in [(4, 8, 2), (2, 0, 0), (13, 50, 13)] {
            let opts = StreamOptions { chunk, left, right };
            let (tokens, _) = stream_all(&rec, &audio, opts, 640);
            assert!(tokens.windows(2).all(|w| w[0].start <= w[1].start), "{file}: times in order");
            let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
            eprintln!(
                "{file} chunk {chunk} left {left} right {right}: {} tokens, offline {}, edit distance {}",
                ids.len(),
                offline.len(),
                edit_distance(&ids, &offline)
            );
        }
    }
}

#[test]
fn bad_stream_options_are_errors() {
    let rec = recognizer("assets/parakeet-ctc-tiny.safetensors");
    assert!(Stream::new(&rec, StreamOptions { chunk: 0, left: 1, right: 1 })
        .unwrap_err()
        .to_string()
        .contains("chunk"));
    assert!(Stream::new(&rec, StreamOptions { chunk: 1, left: usize::MAX, right: 1 }).is_err());
    // Audio shorter than two hops in all (which offline refuses) decodes to nothing.
    let mut s = Stream::new(&rec, StreamOptions::default()).unwrap();
    assert!(s.push(&[0.1; 100]).unwrap().is_empty());
    assert!(s.finish().unwrap().is_empty());
}
