//! GGUF: parsing a gguf-py file with every metadata type, byte-identical re-emit,
//! zero-copy tensor views, and errors (not panics) on every truncation and corruption.

use fucina::formats::gguf::{parse, tensor_bytes, write_gguf, Array, GgufFile, Value};
use fucina::quant::GgmlType;

const FILE: &[u8] = include_bytes!("goldens/gguf/all_types.gguf");

fn golden_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/gguf/all_types.gguf")
}

#[test]
fn parses_every_metadata_type() {
    let h = parse(FILE).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.get("general.architecture").and_then(Value::as_str), Some("llama"));
    assert_eq!(h.get("test.u8"), Some(&Value::U8(200)));
    assert_eq!(h.get("test.i8"), Some(&Value::I8(-100)));
    assert_eq!(h.get("test.u16"), Some(&Value::U16(60000)));
    assert_eq!(h.get("test.i16"), Some(&Value::I16(-30000)));
    assert_eq!(h.get("test.u32"), Some(&Value::U32(4_000_000_000)));
    assert_eq!(h.get("test.i32"), Some(&Value::I32(-2_000_000_000)));
    assert_eq!(h.get("test.f32"), Some(&Value::F32(3.25)));
    assert_eq!(h.get("test.bool_true"), Some(&Value::Bool(true)));
    assert_eq!(h.get("test.bool_false"), Some(&Value::Bool(false)));
    assert_eq!(h.get("test.string").and_then(Value::as_str), Some("fucina ünïcødé ✓"));
    assert_eq!(h.get("test.u64"), Some(&Value::U64((1 << 63) + 5)));
    assert_eq!(h.get("test.i64"), Some(&Value::I64(-(1 << 62))));
    assert_eq!(h.get("test.f64"), Some(&Value::F64(-1.0e-300)));
    assert_eq!(h.get("test.array_i32"), Some(&Value::Array(Array::I32(vec![1, -2, 3, -4]))));
    match h.get("test.array_str") {
        Some(Value::Array(Array::String(v))) => {
            assert_eq!(v.iter().map(|s| std::str::from_utf8(s).unwrap()).collect::<Vec<_>>(), ["alpha", "", "γάμμα"])
        }
        other => panic!("{other:?}"),
    }
    match h.get("test.array_nested") {
        Some(Value::Array(Array::Array(v))) => assert_eq!(v.len(), 2),
        other => panic!("{other:?}"),
    }
    let types: Vec<GgmlType> = h.tensors.iter().map(|t| t.ty).collect();
    for t in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        assert!(types.contains(&t), "{t:?} missing");
    }
}

#[test]
fn re_emits_byte_identically() {
    let h = parse(FILE).unwrap();
    let out = write_gguf(&h, |i| tensor_bytes(FILE, &h, &h.tensors[i])).unwrap();
    assert_eq!(out.len(), FILE.len());
    assert!(out == FILE, "re-emitted file differs from gguf-py's");
}

#[test]
fn tensors_are_zero_copy_views_of_the_map() {
    let f = GgufFile::open(golden_path()).unwrap();
    let data = f.tensor_data("t.q8_0").unwrap();
    let map = f.bytes().as_ptr_range();
    assert!(map.contains(&data.as_ptr()), "tensor bytes must point into the mapped file");
    let (shape, v) = f.tensor_f32("t.f32").unwrap();
    assert_eq!(shape, vec![4, 8]);
    assert!((v[0] - ((1.3f64 * 20.0).sin() + 0.1) as f32).abs() < 1e-6);
    let (shape, _) = f.tensor_f32("t.q4_k").unwrap();
    assert_eq!(shape, vec![1, 512]);
    assert!(f.tensor_data("nope").is_err());
}

/// Releasing pages (the DeepSeek expert budget does, after `--no-mmap` too) never changes a
/// byte: the file's pages are read again, and a copy in anonymous memory is left alone (its
/// dropped pages would read back as zeros).
#[test]
fn releasing_pages_keeps_every_byte() {
    let all = [
        GgufFile::open(golden_path()).unwrap(),
        GgufFile::open_resident(golden_path()).unwrap(),
        GgufFile::from_bytes(FILE).unwrap(),
    ];
    for f in all {
        let before = f.tensor_f32("t.f32").unwrap();
        f.release(0, f.bytes().len());
        assert_eq!(&f.bytes()[..FILE.len()], FILE);
        assert_eq!(f.tensor_f32("t.f32").unwrap(), before);
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    // Only the trailing padding after the last tensor may be cut; any shorter prefix is an error.
    let h = parse(FILE).unwrap();
    let data_end =
        h.tensors.iter().map(|t| h.data_offset as usize + t.offset as usize + t.nbytes().unwrap()).max().unwrap();
    assert!(data_end < FILE.len());
    for n in 0..FILE.len() {
        let r = std::panic::catch_unwind(|| parse(&FILE[..n]));
        match r {
            Ok(Err(e)) => {
                assert!(n < data_end, "a {n}-byte prefix holds every tensor but was refused: {e}");
                assert!(e.to_string().contains("gguf"), "{n}: {e}");
            }
            Ok(Ok(_)) => assert!(n >= data_end, "a {n}-byte prefix (data ends at {data_end}) parsed as a whole file"),
            Err(_) => panic!("parser panicked on a {n}-byte prefix"),
        }
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let header_len = parse(FILE).unwrap().data_offset as usize;
    for _ in 0..3000 {
        let mut f = FILE.to_vec();
        for _ in 0..1 + rnd() % 4 {
            let at = (rnd() as usize) % header_len;
            f[at] = rnd() as u8;
        }
        let r = std::panic::catch_unwind(|| parse(&f).map(|h| h.tensors.len()));
        assert!(r.is_ok(), "parser panicked on a corrupted header");
    }
    // Specific bad values are named.
    let mut f = FILE.to_vec();
    f[4] = 9;
    assert!(parse(&f).unwrap_err().to_string().contains("version 9"));
    let mut f = FILE.to_vec();
    f[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(parse(&f).unwrap_err().to_string().contains("tensor count"));
}
