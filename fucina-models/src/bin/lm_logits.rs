//! `lm-logits model.gguf --tokens ids.txt --prefill 256 --kv q8_0 --out logits.npy`: the
//! logits a model gives at every position of a token sequence, written as a NumPy array, for
//! comparing with another implementation on the same file (e.g. llama.cpp through its
//! bindings, `benches/kv_q8_0_vs_llama_cpp.py`).

use clap::Parser;
use fucina::prelude::*;
use fucina_models::llm::KvType;
use fucina_models::llm::LogitRows;
use std::io::Write;
use std::path::PathBuf;

/// The largest token file read (bytes).
const MAX_TOKEN_FILE: u64 = 16 << 20;

/// Feed a token sequence to a model, the first `--prefill` tokens as one pass and the rest
/// one at a time (as decoding feeds them), and write the logits of every position as a
/// float32 `.npy` array `[tokens, vocab]`.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// GGUF model file.
    model: PathBuf,
    /// Token ids, separated by white space or commas.
    #[arg(long, value_name = "FILE")]
    tokens: PathBuf,
    /// How many leading tokens go in one pass (the rest are fed one at a time).
    #[arg(long, default_value_t = 0)]
    prefill: usize,
    /// How the KV cache stores keys and values: f32, f16 or q8_0.
    #[arg(long, default_value = "f32")]
    kv: KvType,
    /// Worker threads.
    #[arg(short, long, default_value_t = 2)]
    threads: usize,
    /// Kernels: native (SIMD) or scalar (the specification).
    #[arg(long, default_value = "native", value_parser = ["native", "scalar"])]
    backend: String,
    /// Output `.npy` file.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

fn invalid(msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op: "lm-logits", msg }
}

fn io(path: &std::path::Path, e: std::io::Error) -> FucinaError {
    FucinaError::io(path.display().to_string(), e)
}

fn read_tokens(path: &std::path::Path) -> fucina::Result<Vec<u32>> {
    let len = std::fs::metadata(path).map_err(|e| io(path, e))?.len();
    if len > MAX_TOKEN_FILE {
        return Err(invalid(format!("{}: {len} bytes, more than the {MAX_TOKEN_FILE} read", path.display())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    text.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().map_err(|_| invalid(format!("{}: {s:?} is not a token id", path.display()))))
        .collect()
}

/// A version 1.0 `.npy` header for a little-endian float32 C-order array of `shape`.
fn npy_header(shape: [usize; 2]) -> Vec<u8> {
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", shape[0], shape[1]);
    // Magic (6) + version (2) + length (2) + dict + padding + '\n', a multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    let total = unpadded.div_ceil(64) * 64;
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h.resize(total - 1, b' ');
    h.push(b'\n');
    h
}

fn main() {
    let a = Args::parse();
    let run = || -> fucina::Result<()> {
        let backend = if a.backend == "scalar" { BackendKind::Scalar } else { BackendKind::Native };
        let ctx = ExecContext::with_backend(backend, a.threads.max(1))?;
        let _g = ctx.enter();
        let tokens = read_tokens(&a.tokens)?;
        let lm = fucina_models::lm::open(&a.model, false)?;
        let model = &*lm.model;
        if tokens.is_empty() || tokens.len() > model.context_length() {
            return Err(invalid(format!("{} tokens; the model takes 1 to {}", tokens.len(), model.context_length())));
        }
        if a.prefill > tokens.len() {
            return Err(invalid(format!("--prefill {} exceeds the {} tokens", a.prefill, tokens.len())));
        }
        let vocab = model.vocab_size();
        let mut cache = model.new_cache(tokens.len(), a.kv)?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&a.out).map_err(|e| io(&a.out, e))?);
        out.write_all(&npy_header([tokens.len(), vocab])).map_err(|e| io(&a.out, e))?;
        let mut write = |t: Tensor<axes![seq, vocab]>| -> fucina::Result<()> {
            for v in t.to_f32_vec() {
                out.write_all(&v.to_le_bytes()).map_err(|e| io(&a.out, e))?;
            }
            Ok(())
        };
        let t0 = std::time::Instant::now();
        if a.prefill > 0 {
            write(ctx.run_on_pool(|| model.forward(&tokens[..a.prefill], &mut cache, LogitRows::All))?)?;
        }
        for (i, t) in tokens[a.prefill..].iter().enumerate() {
            write(ctx.run_on_pool(|| model.forward(std::slice::from_ref(t), &mut cache, LogitRows::Last))?)?;
            if (i + 1) % 16 == 0 {
                let done = a.prefill + i + 1;
                eprint!("\r{done}/{} positions, {:.1} tok/s", tokens.len(), done as f64 / t0.elapsed().as_secs_f64());
            }
        }
        eprintln!();
        out.flush().map_err(|e| io(&a.out, e))?;
        eprintln!("{}: {} x {vocab} logits ({}, KV cache {:?})", a.out.display(), tokens.len(), lm.summary, a.kv);
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
