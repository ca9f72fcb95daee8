//! Re-encoding a GGUF file's weights in another block format (the `quantize` binary).

use fucina::formats::gguf::{assign_offsets, tensor_bytes, write_gguf_to, GgufFile, Value};
use fucina::quant::{dequantize, quantize, GgmlType};
use fucina::{FucinaError, Result};
use std::borrow::Cow;
use std::path::Path;

/// Target formats the encoder supports so far.
pub const TARGETS: &[(&str, GgmlType, u32)] = &[
    ("F32", GgmlType::F32, 0),
    ("F16", GgmlType::F16, 1),
    ("BF16", GgmlType::BF16, 32),
    ("Q8_0", GgmlType::Q8_0, 7),
    ("Q4_0", GgmlType::Q4_0, 2),
    ("Q4_1", GgmlType::Q4_1, 3),
    ("Q5_0", GgmlType::Q5_0, 8),
    ("Q5_1", GgmlType::Q5_1, 9),
];

/// The target format named `name` and its llama.cpp `general.file_type` number.
pub fn parse_target(name: &str) -> Result<(GgmlType, u32)> {
    TARGETS.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(name)).map(|(_, t, f)| (*t, *f)).ok_or_else(|| {
        let known: Vec<&str> = TARGETS.iter().map(|(n, _, _)| *n).collect();
        FucinaError::InvalidArgument {
            op: "quantize",
            msg: format!(
                "unknown or not yet supported target `{name}` (supported: {}; K-quants are not yet)",
                known.join(", ")
            ),
        }
    })
}

/// Whether tensor `ty`/`dims` is re-encoded: 2-D (or more) float weights whose rows are whole blocks.
pub fn eligible(ty: GgmlType, dims: &[u64], target: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
    ) && dims.len() >= 2
        && dims[0] % target.block_size() as u64 == 0
}

/// Re-encodes `input` into `output`; `progress(done, total, name)` is called per tensor.
/// Returns (tensors re-encoded, tensors copied).
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: GgmlType,
    file_type: u32,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<(usize, usize)> {
    let src = GgufFile::open(input)?;
    let mut header = src.header().clone();
    let total = header.tensors.len();
    let mut plan = Vec::with_capacity(total);
    for t in header.tensors.iter_mut() {
        let re = eligible(t.ty, &t.dims, target) && t.ty != target;
        plan.push((re, t.ty));
        if re {
            t.ty = target;
        }
    }
    match header.metadata.iter_mut().find(|(k, _)| k == "general.file_type") {
        Some((_, v)) => *v = Value::U32(file_type),
        None => header.metadata.push(("general.file_type".into(), Value::U32(file_type))),
    }
    assign_offsets(&mut header)?;
    let io = |e: std::io::Error| FucinaError::Io { path: output.display().to_string(), msg: e.to_string() };
    let mut w = std::io::BufWriter::new(std::fs::File::create(output).map_err(io)?);
    let (mut re_n, mut copied) = (0, 0);
    let src_header = src.header();
    write_gguf_to(&mut w, &header, |i| {
        let t = &src_header.tensors[i];
        progress(i, total, &t.name);
        let bytes = tensor_bytes(src.bytes(), src_header, t)?;
        if plan[i].0 {
            re_n += 1;
            let x = dequantize(plan[i].1, bytes, t.numel() as usize)?;
            Ok(Cow::Owned(quantize(target, &x)?))
        } else {
            copied += 1;
            Ok(Cow::Borrowed(bytes))
        }
    })?;
    std::io::Write::flush(&mut w).map_err(io)?;
    progress(total, total, "");
    Ok((re_n, copied))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_the_weights_and_copies_the_rest() {
        let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fucina/tests/goldens/gguf/all_types.gguf");
        let out = std::env::temp_dir().join(format!("fucina-quantize-{}.gguf", std::process::id()));
        let (t, ft) = parse_target("q8_0").unwrap();
        let mut calls = 0;
        let (re, copied) = quantize_file(&input, &out, t, ft, |_, _, _| calls += 1).unwrap();
        let src = GgufFile::open(&input).unwrap();
        let dst = GgufFile::open(&out).unwrap();
        assert_eq!(re + copied, src.header().tensors.len());
        assert!(re >= 4 && calls > re);
        assert_eq!(dst.header().get("general.file_type"), Some(&Value::U32(7)));
        // Every metadata key survives; eligible tensors are Q8_0 and decode close to the source.
        for (k, _) in &src.header().metadata {
            assert!(dst.header().get(k).is_some(), "{k}");
        }
        let (shape, a) = src.tensor_f32("t.q5_1").unwrap();
        let info = dst.header().tensors.iter().find(|x| x.name == "t.q5_1").unwrap();
        assert_eq!(info.ty, GgmlType::Q8_0);
        let (shape2, b) = dst.tensor_f32("t.q5_1").unwrap();
        assert_eq!(shape, shape2);
        let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= amax / 127.0));
        // Rows that are not whole blocks (t.f32 has rows of 8) and K-quant tensors are copied unchanged.
        assert_eq!(dst.tensor_data("t.f32").unwrap(), src.tensor_data("t.f32").unwrap());
        assert_eq!(dst.tensor_data("t.q4_k").unwrap(), src.tensor_data("t.q4_k").unwrap());
        std::fs::remove_file(&out).ok();
        assert!(parse_target("Q4_K").unwrap_err().to_string().contains("not yet"));
    }
}
