//! `amp model.nam --in guitar.wav --out out.wav`: run a Neural Amp Modeler capture on a
//! recording, or live (`--live`, built with `--features live`).

use clap::Parser;
use fucina_models::nam::Amp;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

/// Play audio through a Neural Amp Modeler `.nam` model (WaveNet or LSTM). Offline it reads
/// a WAV file (mono, or the first channel of a multichannel file) at the model's sample rate
/// and writes a 32-bit float WAV; with `--live` it runs the default input device through the
/// model to the default output device.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The `.nam` model file.
    model: PathBuf,
    /// Input WAV file.
    #[arg(long = "in", required_unless_present = "live")]
    input: Option<PathBuf>,
    /// Output WAV file.
    #[arg(long = "out", required_unless_present = "live")]
    output: Option<PathBuf>,
    /// Run the default audio input through the model to the default output until Ctrl-C.
    #[arg(long, conflicts_with_all = ["input", "output"])]
    live: bool,
    /// Samples per processing buffer (the real-time engine's block; 1..=65536).
    #[arg(long, default_value_t = 256, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..=65536), |v| v as usize))]
    buffer: usize,
    /// Gain in dB applied to the input before the model.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    input_gain: f32,
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), String> {
    let amp = Amp::open(&a.model).map_err(|e| e.to_string())?;
    eprintln!("{}: {}, {} Hz", a.model.display(), amp.describe(), amp.sample_rate);
    if a.live {
        return live(&amp, a);
    }
    let (inp, outp) = (a.input.as_ref().ok_or("--in is required")?, a.output.as_ref().ok_or("--out is required")?);
    let mut reader = hound::WavReader::open(inp).map_err(|e| format!("{}: {e}", inp.display()))?;
    let spec = reader.spec();
    if (spec.sample_rate as f64 - amp.sample_rate).abs() > 0.5 {
        return Err(format!(
            "{} is {} Hz but the model expects {} Hz; resample the input first",
            inp.display(),
            spec.sample_rate,
            amp.sample_rate
        ));
    }
    let ch = spec.channels.max(1) as usize;
    let samples: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader.samples::<f32>().collect::<Result<_, _>>(),
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
            reader.samples::<i32>().map(|s| s.map(|v| v as f32 * scale)).collect::<Result<_, _>>()
        }
    }
    .map_err(|e| format!("{}: {e}", inp.display()))?;
    if ch > 1 {
        eprintln!("{} has {ch} channels: using the first", inp.display());
    }
    let gain = 10f32.powf(a.input_gain / 20.0);
    let mono: Vec<f32> = samples.iter().step_by(ch).map(|s| s * gain).collect();
    let mut out = vec![0.0f32; mono.len()];
    let mut stream = amp.stream(a.buffer.max(1));
    let pb = ProgressBar::new(mono.len() as u64);
    pb.set_style(
        ProgressStyle::with_template("[{bar:30}] {pos}/{len} samples ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let t0 = Instant::now();
    let step = a.buffer.max(1);
    for (i, (x, y)) in mono.chunks(step).zip(out.chunks_mut(step)).enumerate() {
        stream.process(x, y);
        if i % 64 == 0 {
            pb.set_position((i * step) as u64);
        }
    }
    pb.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    let audio = mono.len() as f64 / amp.sample_rate;
    let spec_out = hound::WavSpec {
        channels: 1,
        sample_rate: spec.sample_rate,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(outp, spec_out).map_err(|e| format!("{}: {e}", outp.display()))?;
    for s in &out {
        w.write_sample(*s).map_err(|e| format!("{}: {e}", outp.display()))?;
    }
    w.finalize().map_err(|e| format!("{}: {e}", outp.display()))?;
    eprintln!(
        "{} -> {}: {:.2} s of audio in {:.2} s ({:.1}x real time)",
        inp.display(),
        outp.display(),
        audio,
        secs,
        audio / secs.max(1e-9)
    );
    Ok(())
}

#[cfg(not(feature = "live"))]
fn live(_: &Amp, _: &Args) -> Result<(), String> {
    Err("this build has no live audio: rebuild with `cargo run -p fucina-models --release --features live --bin amp -- \
         model.nam --live` (needs the system audio headers, e.g. libasound2-dev)"
        .into())
}

#[cfg(feature = "live")]
fn live(amp: &Amp, a: &Args) -> Result<(), String> {
    fucina_models::nam::live::run(amp, a.buffer, 10f32.powf(a.input_gain / 20.0))
}
