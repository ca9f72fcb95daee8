//! Harnesses that drive hostile input through the whole language-model path, shared by the
//! cargo-fuzz targets (`fuzz/`, long runs on nightly) and a seeded test on stable
//! (`tests/fuzz_smoke.rs`, a short run in every CI). Each takes a well-formed base file and
//! fuzz bytes that say how to damage it, so the fuzzer spends its time past the parser:
//! metadata values swapped for hostile ones, tensors resized, token types and texts
//! changed, then load, tokenize, and generate two tokens. Any outcome but a panic, abort
//! or hang is a pass: errors are the expected answer to most inputs.

use crate::llm::generate::{generate, GenerateOptions};
use crate::llm::sampling::{Sampler, SamplingParams};
use crate::llm::tokenizer::Tokenizer;
use crate::llm::KvType;
use fucina::formats::gguf::{assign_offsets, parse, write_gguf_to, Array, GgufFile, Value};
use fucina::prelude::*;
use std::borrow::Cow;

/// The most bytes a resized tensor may take (zero-filled): keeps a run's memory bounded.
const MAX_RESIZED: u64 = 8 << 20;

/// Reads fuzz bytes front to back; past the end everything is zero.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |a, i| a | (self.u8() as u64) << (8 * i))
    }
}

/// A hostile value for a metadata slot: small, huge, negative, float, string.
fn value(kind: u8, x: u64) -> Value {
    match kind % 8 {
        0 => Value::U64(x),
        1 => Value::U32(x as u32),
        2 => Value::I32(x as i32),
        3 => Value::F32(f32::from_bits(x as u32)),
        4 => Value::U64(1 << (x % 64)),
        5 => Value::U32((x % 5) as u32),
        6 => Value::String(x.to_le_bytes().to_vec()),
        _ => Value::Bool(x & 1 == 1),
    }
}

/// Damages `base` (a GGUF model image) as `data` says, then loads the result, tokenizes the
/// rest of `data` as a prompt and generates up to two tokens. Returns the first error, if
/// any; must never panic.
pub fn lm_case(base: &[u8], data: &[u8]) -> Result<()> {
    let src = parse(base)?;
    let mut h = src.clone();
    let mut b = Bytes(data);
    let edits = b.u8() % 6;
    let mut resized: Vec<Option<Vec<u64>>> = vec![None; h.tensors.len()];
    for _ in 0..edits {
        let op = b.u8();
        let at = b.u8() as usize;
        let x = b.u64();
        match op % 6 {
            // A metadata value replaced.
            0 | 1 => {
                let i = at % h.metadata.len().max(1);
                if let Some(kv) = h.metadata.get_mut(i) {
                    kv.1 = value(op / 6, x);
                }
            }
            // A metadata key removed.
            2 => {
                if !h.metadata.is_empty() {
                    let i = at % h.metadata.len();
                    h.metadata.remove(i);
                }
            }
            // A tensor dimension changed (its data becomes zeros of the new size).
            3 => {
                let i = at % h.tensors.len().max(1);
                if let Some(t) = h.tensors.get_mut(i) {
                    let d = (x as usize >> 8) % t.dims.len();
                    t.dims[d] = (x & 0xff).max(1) * t.ty.block_size() as u64;
                    resized[i] = Some(t.dims.clone());
                }
            }
            // A token made an empty control token, or a token's text replaced.
            4 => {
                for (k, v) in h.metadata.iter_mut() {
                    match (k.as_str(), v) {
                        ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) if !t.is_empty() => {
                            let n = t.len();
                            t[(x as usize) % n] = 3;
                        }
                        ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) if !t.is_empty() => {
                            let n = t.len();
                            t[(x as usize) % n] =
                                if at.is_multiple_of(2) { Vec::new() } else { vec![at as u8; at % 7] };
                        }
                        _ => {}
                    }
                }
            }
            // Arrays cut short (token types, merges, a router's biases...).
            _ => {
                let i = at % h.metadata.len().max(1);
                if let Some((_, Value::Array(a))) = h.metadata.get_mut(i) {
                    let keep = (x as usize) % (a.len() + 1);
                    let ty = a.type_id();
                    let cut: Vec<Value> = a.iter().take(keep).collect();
                    *a = Array::from_values(ty, cut)?;
                }
            }
        }
    }
    for (t, r) in h.tensors.iter().zip(&resized) {
        if r.is_some() && t.nbytes().map_or(true, |n| n as u64 > MAX_RESIZED) {
            return Err(FucinaError::InvalidArgument { op: "fuzz", msg: "resized tensor too large".into() });
        }
    }
    assign_offsets(&mut h)?;
    let mut image = Vec::new();
    write_gguf_to(&mut image, &h, |i| {
        Ok(match &resized[i] {
            Some(_) => Cow::Owned(vec![0u8; h.tensors[i].nbytes()?]),
            None => Cow::Borrowed(fucina::formats::gguf::tensor_bytes(base, &src, &src.tensors[i])?),
        })
    })?;
    let prompt = String::from_utf8_lossy(b.0).into_owned();
    run_image(&image, &prompt)
}

/// Loads a GGUF image, tokenizes `prompt` (as a chat message and as raw text) and generates
/// up to two tokens with a small cache.
pub fn run_image(image: &[u8], prompt: &str) -> Result<()> {
    let file = crate::llm::ModelFile::from_gguf(GgufFile::from_bytes(image)?, crate::lm::ARCHITECTURES)?;
    let lm = crate::lm::load(file, Some(1 << 20))?;
    let tok = Tokenizer::from_gguf(&lm.header)?;
    if tok.vocab_size() != lm.model.vocab_size() {
        return Err(FucinaError::Format { format: "gguf", msg: "tokenizer and model disagree".into() });
    }
    let format = crate::llm::chat::ChatFormat::detect(
        |t| tok.token_id(t).is_some(),
        &lm.arch,
        lm.header.get("tokenizer.chat_template").and_then(|v| v.as_str()),
    );
    let chat = crate::llm::chat::Message::new(crate::llm::chat::Role::User, prompt);
    let mut ids = tok.encode_prompt(&format.prompt(&[chat], false))?;
    let raw = tok.encode(prompt)?;
    let _ = tok.decode(&raw)?;
    ids.truncate(24);
    let mut cache = lm.model.new_cache(lm.model.context_length().min(32), KvType::F32)?;
    let mut sampler = Sampler::new(SamplingParams { temperature: 0.8, seed: 1, ..SamplingParams::default() });
    let opts = GenerateOptions { max_tokens: 2, ..GenerateOptions::default() };
    generate(&*lm.model, &tok, &mut cache, &ids, &mut sampler, &opts, &mut |_| true)?;
    Ok(())
}

/// Tokenizes `data` (lossy UTF-8) with the tokenizer of `base` in all three modes and
/// decodes the ids again.
pub fn tokenizer_case(tok: &Tokenizer, data: &[u8]) -> Result<()> {
    let text = String::from_utf8_lossy(data);
    for ids in [tok.encode(&text)?, tok.encode_literal(&text)?] {
        let _ = tok.decode(&ids)?;
    }
    let m = crate::llm::chat::Message::new(crate::llm::chat::Role::User, text.into_owned());
    let ids = tok.encode_prompt(&crate::llm::chat::ChatFormat::ChatMl.prompt(&[m], true))?;
    tok.decode(&ids).map(|_| ())
}

/// The config keys a Parakeet damage recipe picks from (`encoder_config.` inside).
const PARAKEET_KEYS: [&str; 22] = [
    "encoder_config.hidden_size",
    "encoder_config.num_hidden_layers",
    "encoder_config.num_attention_heads",
    "encoder_config.intermediate_size",
    "encoder_config.conv_kernel_size",
    "encoder_config.subsampling_factor",
    "encoder_config.subsampling_conv_channels",
    "encoder_config.subsampling_conv_kernel_size",
    "encoder_config.subsampling_conv_stride",
    "encoder_config.num_mel_bins",
    "encoder_config.scale_input",
    "encoder_config.hidden_act",
    "vocab_size",
    "pad_token_id",
    "blank_token_id",
    "decoder_hidden_size",
    "num_decoder_layers",
    "durations",
    "max_symbols_per_step",
    "hidden_act",
    "decoder_start_token_id",
    "model_type",
];

/// A hostile JSON value: zero, one, huge, negative, fractional, a string, null, a list.
fn json_value(kind: u8, x: u64) -> serde_json::Value {
    use serde_json::json;
    match kind % 9 {
        0 => json!(0),
        1 => json!(1),
        2 => json!(x),
        3 => json!(-((x % 1000) as i64) - 1),
        4 => json!(1u64 << (x % 64)),
        5 => json!(f64::from(x as u32) / 7.0),
        6 => json!(["parakeet_ctc", "parakeet_tdt", "parakeet_rnnt", "gelu", "relu", "tanh", ""][(x % 7) as usize]),
        7 => serde_json::Value::Null,
        _ => json!((0..(x % 70)).map(|i| i.wrapping_mul(x) % 9).collect::<Vec<_>>()),
    }
}

/// Damages a Parakeet safetensors file (`base`: CTC, TDT or RNN-T) as `data` says (config
/// values replaced or removed, tensors resized to zeros, the vocabulary cut), writes it to
/// `scratch`, then loads it and recognizes a short signal whole and streamed. Returns the
/// first error, if any; must never panic.
pub fn parakeet_case(base: &std::path::Path, data: &[u8], scratch: &std::path::Path) -> Result<()> {
    use crate::parakeet::{Recognizer, Stream, StreamOptions};
    use fucina::formats::safetensors::{save, SafeTensors};
    let st = SafeTensors::open(base)?;
    let mut metadata = st.metadata().clone();
    let mut config: serde_json::Value = serde_json::from_str(metadata.get("config").map_or("{}", |s| s.as_str()))
        .map_err(|e| FucinaError::InvalidArgument { op: "fuzz", msg: e.to_string() })?;
    let mut tensors = Vec::new();
    for name in st.tensors().keys() {
        if let Ok(t) = st.load(name) {
            tensors.push((name.clone(), t));
        }
    }
    let mut b = Bytes(data);
    for _ in 0..b.u8() % 5 {
        let (op, at, x) = (b.u8(), b.u8() as usize, b.u64());
        match op % 4 {
            0 | 1 => {
                let key = PARAKEET_KEYS[at % PARAKEET_KEYS.len()];
                let (parent, leaf) = key.rsplit_once('.').map_or((None, key), |(p, l)| (Some(p), l));
                let slot = match parent {
                    Some(p) => &mut config[p],
                    None => &mut config,
                };
                if let Some(o) = slot.as_object_mut() {
                    if op % 4 == 0 {
                        o.insert(leaf.to_string(), json_value(op / 4, x));
                    } else {
                        o.remove(leaf);
                    }
                }
            }
            2 => {
                if !tensors.is_empty() {
                    let i = at % tensors.len();
                    let mut shape = tensors[i].1.shape().to_vec();
                    if !shape.is_empty() {
                        let d = (x as usize >> 8) % shape.len();
                        shape[d] = (x & 0x3f) as usize;
                        let n: usize = shape.iter().product();
                        if n * 4 <= MAX_RESIZED as usize {
                            let zeros = fucina::storage::Buffer::F32(vec![0f32; n]);
                            tensors[i].1 = fucina::tensor::RawTensor::from_buffer(zeros, &shape)?;
                        }
                    }
                }
            }
            _ => {
                if let Some(v) = metadata.get_mut("vocab") {
                    let keep = (x as usize) % (v.len() + 1);
                    v.truncate(v.floor_char_boundary(keep));
                }
            }
        }
    }
    metadata.insert("config".into(), config.to_string());
    save(scratch, &tensors, &metadata)?;
    let rec = Recognizer::load(&SafeTensors::open(scratch)?)?;
    let audio: Vec<f32> = (0..8000).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
    rec.transcribe(&audio)?;
    let mut s = Stream::new(&rec, StreamOptions { chunk: 2, left: 3, right: 1 })?;
    for piece in audio.chunks(1000) {
        s.push(piece)?;
    }
    s.finish()?;
    Ok(())
}
