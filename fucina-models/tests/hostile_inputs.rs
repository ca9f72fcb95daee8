//! One crafted input per class of hostile value that passes parsing, each answered with a
//! clear error (or handled) instead of a panic, abort, hang or destroyed file: metadata
//! sizes that overflow or allocate, short router biases, empty control tokens, quadratic
//! BPE inputs, KV caches past memory, big-endian files, unbounded flags, quantize onto its
//! own input, and hostile `.nam` files.

use fucina::formats::gguf::{assign_offsets, parse, tensor_bytes, write_gguf_to, Array, GgufHeader, TensorInfo, Value};
use fucina::quant::GgmlType;
use fucina_models::fuzzing::run_image;
use fucina_models::llm::KvType;
use fucina_models::llm::Tokenizer;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn asset(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets").join(name)
}

/// The image of `base` with its header edited by `edit`; tensors whose size changed get
/// zeros.
fn edited(base: &str, edit: impl FnOnce(&mut GgufHeader)) -> Vec<u8> {
    let bytes = std::fs::read(asset(base)).unwrap();
    let src = parse(&bytes).unwrap();
    let mut h = src.clone();
    edit(&mut h);
    assign_offsets(&mut h).unwrap();
    let mut out = Vec::new();
    write_gguf_to(&mut out, &h, |i| {
        let t = &h.tensors[i];
        Ok(match src.tensors.iter().find(|s| s.name == t.name && s.dims == t.dims && s.ty == t.ty) {
            Some(s) => Cow::Borrowed(tensor_bytes(&bytes, &src, s)?),
            None => Cow::Owned(vec![0u8; t.nbytes()?]),
        })
    })
    .unwrap();
    out
}

fn set(h: &mut GgufHeader, key: &str, v: Value) {
    match h.metadata.iter_mut().find(|(k, _)| k == key) {
        Some(kv) => kv.1 = v,
        None => h.metadata.push((key.to_string(), v)),
    }
}

/// Runs the image through load -> tokenize -> generate and returns the error text.
fn error_of(image: &[u8]) -> String {
    let t0 = Instant::now();
    let e = run_image(image, "hello").expect_err("a hostile file must be refused").to_string();
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}: {e}", t0.elapsed());
    e
}

#[test]
fn metadata_sizes_are_checked_before_arithmetic_and_allocation() {
    // A head count near 2^62 used to wrap when multiplied by the head width.
    let e = error_of(&edited("qwen3-tiny-f32.gguf", |h| set(h, "qwen3.attention.head_count", Value::U64(1 << 62))));
    assert!(e.contains("head_count") && e.contains("beyond any model"), "{e}");
    // Within the per-value cap, the product is checked.
    let e = error_of(&edited("qwen3-tiny-f32.gguf", |h| {
        set(h, "qwen3.attention.head_count", Value::U64(1 << 30));
        set(h, "qwen3.attention.head_count_kv", Value::U64(1 << 30));
        set(h, "qwen3.attention.key_length", Value::U64(1 << 30));
    }));
    assert!(e.contains("multiply past"), "{e}");
    // A layer count of 2^40 never reaches Vec::with_capacity; a million is checked against
    // the tensors the file has.
    let e = error_of(&edited("qwen3-tiny-f32.gguf", |h| set(h, "qwen3.block_count", Value::U64(1 << 40))));
    assert!(e.contains("block_count") && e.contains("beyond any model"), "{e}");
    let e = error_of(&edited("qwen3-tiny-f32.gguf", |h| set(h, "qwen3.block_count", Value::U64(1_000_000))));
    assert!(e.contains("block_count") && e.contains("tensors"), "{e}");
    // A router bias shorter than the expert count.
    let e = error_of(&edited("deepseek-v3-tiny-f32.gguf", |h| {
        for t in h.tensors.iter_mut().filter(|t| t.name.ends_with("exp_probs_b.bias")) {
            t.dims[0] -= 1;
        }
    }));
    assert!(e.contains("exp_probs_b"), "{e}");
}

#[test]
fn kv_cache_beyond_memory_is_an_error() {
    let image = edited("qwen3-tiny-f32.gguf", |h| set(h, "qwen3.context_length", Value::U64(1 << 32)));
    let file = fucina_models::llm::ModelFile::from_gguf(
        fucina::formats::gguf::GgufFile::from_bytes(&image).unwrap(),
        fucina_models::lm::ARCHITECTURES,
    )
    .unwrap();
    let lm = fucina_models::lm::load(file, None).unwrap();
    let e = lm.model.new_cache(1 << 32, KvType::F32).unwrap_err();
    assert!(matches!(e, fucina::FucinaError::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().contains("KV cache"), "{e}");
}

#[test]
fn tokenizer_inputs_that_used_to_hang() {
    // An empty control token used to make `encode` loop forever.
    let image = edited("qwen3-tiny-f32.gguf", |h| {
        // The first control token loses its text (no merge refers to control tokens).
        let Some(Value::Array(Array::I32(types))) = h.get("tokenizer.ggml.token_type") else { panic!() };
        let id = types.iter().position(|t| *t == 3).unwrap();
        for (k, v) in h.metadata.iter_mut() {
            if let ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) = (k.as_str(), v) {
                t[id] = Vec::new();
            }
        }
    });
    let tok = Tokenizer::from_gguf(&parse(&image).unwrap()).unwrap();
    let t0 = Instant::now();
    assert!(!tok.encode("hello <|im_end|> world").unwrap().is_empty());
    // BPE on one long pre-token was quadratic: 100k spaces and a 120 KB word.
    let spaces = " ".repeat(100_000);
    let word = "ab".repeat(60_000);
    let n1 = tok.encode(&spaces).unwrap().len();
    let n2 = tok.encode(&word).unwrap().len();
    assert!(n1 > 0 && n2 > 0);
    assert_eq!(tok.decode(&tok.encode(&word).unwrap()).unwrap(), word);
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
}

#[test]
fn metadata_arrays_stay_compact_and_big_endian_is_named() {
    // A byte array is stored as bytes (it used to cost ~65x its size in RAM).
    let mut h = parse(&std::fs::read(asset("qwen3-tiny-f32.gguf")).unwrap()).unwrap();
    h.metadata.push(("test.blob".into(), Value::Array(Array::U8(vec![7; 1 << 20]))));
    h.tensors.clear();
    let mut image = Vec::new();
    write_gguf_to(&mut image, &h, |_| Ok(Cow::Borrowed(&[][..]))).unwrap();
    match parse(&image).unwrap().get("test.blob") {
        Some(Value::Array(Array::U8(b))) => assert_eq!(b.len(), 1 << 20),
        other => panic!("{other:?}"),
    }
    image[4..8].copy_from_slice(&3u32.to_be_bytes());
    let e = parse(&image).unwrap_err().to_string();
    assert!(e.contains("big-endian"), "{e}");
}

fn bin(name: &str) -> Command {
    Command::new(match name {
        "qwen3" => env!("CARGO_BIN_EXE_qwen3"),
        "amp" => env!("CARGO_BIN_EXE_amp"),
        _ => env!("CARGO_BIN_EXE_quantize"),
    })
}

/// Runs a binary; (success, stderr, stdout, seconds).
fn run(cmd: &mut Command) -> (bool, String, String, f64) {
    let t0 = Instant::now();
    let out = cmd.output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), s(&out.stderr), s(&out.stdout), t0.elapsed().as_secs_f64())
}

#[test]
fn unbounded_flags_are_refused_quickly() {
    let (ok, err, _, secs) = run(bin("qwen3").args(["--threads", "10000", "--prompt", "hi"]));
    assert!(!ok && err.contains("limit is 1024") && secs < 10.0, "{err} ({secs} s)");
    let (ok, err, _, _) = run(bin("qwen3").args(["--ctx", "100000000", "--prompt", "hi"]));
    assert!(!ok && err.contains("--ctx"), "{err}");
    let (ok, err, out, _) = run(bin("qwen3").args(["--max-tokens", "0", "--prompt", "hi", "--threads", "1"]));
    assert!(ok, "{err}");
    assert!(err.contains("decode 0 tok"), "{err}");
    assert_eq!(out, "hi");
    let nam = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/nam/nano.nam");
    let (ok, err, _, secs) =
        run(bin("amp").arg(&nam).args(["--in", "x.wav", "--out", "y.wav", "--buffer", "4611686018427387904"]));
    assert!(!ok && err.contains("--buffer") && secs < 10.0, "{err}");
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("fucina-hostile-{}-{name}", std::process::id()))
}

#[test]
fn quantize_never_destroys_its_input_or_leaves_a_partial_file() {
    let input = tmp("in.gguf");
    std::fs::copy(asset("qwen3-tiny-f32.gguf"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    // The same file, by its path and through a hard link.
    let link = tmp("link.gguf");
    let _ = std::fs::remove_file(&link);
    std::fs::hard_link(&input, &link).unwrap();
    for out in [&input, &link] {
        let (ok, err, _, _) = run(bin("quantize").arg(&input).arg(out).arg("Q8_0"));
        assert!(!ok && err.contains("is the input file"), "{err}");
    }
    assert_eq!(std::fs::read(&input).unwrap(), before, "the input changed");
    // A failure after writing began (the output is a directory): no partial file remains.
    let dir = tmp("outdir");
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, _, _, _) = run(bin("quantize").arg(&input).arg(&dir).arg("Q8_0"));
    assert!(!ok);
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name().to_string_lossy().contains(&format!("fucina-hostile-{}-outdir.partial", std::process::id()))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    for p in [&input, &link] {
        std::fs::remove_file(p).ok();
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn quantize_copies_integer_tensors_and_falls_back_on_odd_rows() {
    let mut h = GgufHeader { version: 3, metadata: vec![], tensors: vec![], alignment: 32, data_offset: 0 };
    h.metadata.push(("general.architecture".into(), Value::String(b"test".to_vec())));
    let t = |name: &str, dims: Vec<u64>, ty| TensorInfo { name: name.into(), dims, ty, offset: 0 };
    h.tensors = vec![
        t("ids", vec![32, 2], GgmlType::I32),
        t("w64", vec![64, 4], GgmlType::F32),
        t("w48", vec![48, 2], GgmlType::F32),
    ];
    assign_offsets(&mut h).unwrap();
    let data: Vec<Vec<u8>> =
        h.tensors.iter().map(|t| (0..t.nbytes().unwrap()).map(|i| (i * 37 % 251) as u8 & 0x3f).collect()).collect();
    let input = tmp("mixed.gguf");
    let mut f = std::fs::File::create(&input).unwrap();
    write_gguf_to(&mut f, &h, |i| Ok(Cow::Borrowed(&data[i][..]))).unwrap();
    drop(f);
    let out = tmp("mixed-q4k.gguf");
    let (ok, err, _, _) = run(bin("quantize").arg(&input).arg(&out).arg("Q4_K"));
    assert!(ok, "{err}");
    assert!(err.contains("w64: rows are not whole Q4_K blocks; using Q5_0"), "{err}");
    assert!(err.contains("w48: rows are not whole Q4_K blocks; using F16"), "{err}");
    let q = fucina::formats::gguf::GgufFile::open(&out).unwrap();
    let ty = |n: &str| q.tensor_info(n).unwrap().ty;
    assert_eq!((ty("ids"), ty("w64"), ty("w48")), (GgmlType::I32, GgmlType::Q5_0, GgmlType::F16));
    assert_eq!(q.tensor_data("ids").unwrap(), &data[0][..]);
    std::fs::remove_file(&input).ok();
    std::fs::remove_file(&out).ok();
}

#[test]
fn hostile_nam_files_are_refused() {
    use fucina::formats::nam::NamFile;
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/nam/nano.nam")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    // A weight that is finite as f64 but infinite as f32.
    v["weights"][3] = serde_json::json!(1e300);
    let e = NamFile::parse(v.to_string().as_bytes()).unwrap_err().to_string();
    assert!(e.contains("weight 3") && e.contains("finite"), "{e}");
    // A receptive field of ~67M samples (it used to hang the stream warm-up).
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let layers = &mut v["config"]["layers"][0];
    let n = layers["dilations"].as_array().unwrap().len();
    // Every per-layer list grows to 1024 layers, each dilated by 65536.
    for (_, val) in layers.as_object_mut().unwrap().iter_mut() {
        if let Some(a) = val.as_array().filter(|a| a.len() == n) {
            *val = serde_json::Value::Array(vec![a[0].clone(); 1024]);
        }
    }
    layers["dilations"] = serde_json::json!(vec![65536; 1024]);
    let t0 = Instant::now();
    let e = NamFile::parse(v.to_string().as_bytes()).unwrap_err().to_string();
    assert!(e.contains("receptive field"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}
