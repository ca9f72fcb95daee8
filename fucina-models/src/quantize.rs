//! Re-encoding a GGUF file's weights in another block format (the `quantize` binary).

use fucina::formats::gguf::{assign_offsets, tensor_bytes, write_gguf_to, GgufFile, Value};
use fucina::quant::{dequantize, quantize, GgmlType};
use fucina::{FucinaError, Result};
use std::borrow::Cow;
use std::path::Path;

/// Single-format targets and their llama.cpp `general.file_type` numbers.
pub const TARGETS: &[(&str, GgmlType, u32)] = &[
    ("F32", GgmlType::F32, 0),
    ("F16", GgmlType::F16, 1),
    ("BF16", GgmlType::BF16, 32),
    ("Q8_0", GgmlType::Q8_0, 7),
    ("Q4_0", GgmlType::Q4_0, 2),
    ("Q4_1", GgmlType::Q4_1, 3),
    ("Q5_0", GgmlType::Q5_0, 8),
    ("Q5_1", GgmlType::Q5_1, 9),
    ("Q2_K", GgmlType::Q2_K, 10),
    ("Q3_K", GgmlType::Q3_K, 11),
    ("Q4_K", GgmlType::Q4_K, 14),
    ("Q5_K", GgmlType::Q5_K, 16),
    ("Q6_K", GgmlType::Q6_K, 18),
];

/// What a run encodes to: one format for every weight, or llama.cpp's `_M` mixes, which keep
/// the embedding, the output head and some layers' `attn_v`/`ffn_down` in Q6_K.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every eligible weight in this format.
    Uniform(GgmlType),
    /// `base` for most weights, Q6_K for the sensitive ones (Q4_K_M, Q5_K_M).
    Mix(GgmlType),
}

impl Target {
    /// The format of tensor `name` (`blk.N.` prefixes give the layer of `n_layer`).
    pub fn format_for(self, name: &str, n_layer: usize) -> GgmlType {
        match self {
            Target::Uniform(t) => t,
            Target::Mix(base) => {
                if name == "output.weight" || name == "token_embd.weight" {
                    return GgmlType::Q6_K;
                }
                let layer = name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|i| i.parse().ok());
                let sensitive = name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight");
                match layer {
                    Some(i) if sensitive && use_more_bits(i, n_layer) => GgmlType::Q6_K,
                    _ => base,
                }
            }
        }
    }
}

/// llama.cpp's choice of layers that get more bits: the first and last eighth, and every
/// third layer between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The target named `name` and its llama.cpp `general.file_type` number.
pub fn parse_target(name: &str) -> Result<(Target, u32)> {
    if name.eq_ignore_ascii_case("Q4_K_M") {
        return Ok((Target::Mix(GgmlType::Q4_K), 15));
    }
    if name.eq_ignore_ascii_case("Q5_K_M") {
        return Ok((Target::Mix(GgmlType::Q5_K), 17));
    }
    TARGETS.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(name)).map(|(_, t, f)| (Target::Uniform(*t), *f)).ok_or_else(
        || {
            let known: Vec<&str> = TARGETS.iter().map(|(n, _, _)| *n).collect();
            FucinaError::InvalidArgument {
                op: "quantize",
                msg: format!("unknown target `{name}` (supported: {}, Q4_K_M, Q5_K_M)", known.join(", ")),
            }
        },
    )
}

/// Whether tensor `ty`/`dims` is re-encoded: 2-D (or more) float or block-quantized weights
/// whose rows are whole blocks of the target. Integer tensors (I8..I64) and F64 are data,
/// not weights: they are copied.
pub fn eligible(ty: GgmlType, dims: &[u64], target: GgmlType) -> bool {
    is_weight_type(ty) && dims.len() >= 2 && dims[0].is_multiple_of(target.block_size() as u64)
}

fn is_weight_type(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::Q8_K | GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64 | GgmlType::F64)
}

/// The format a weight gets when its rows are not whole blocks of `target`, as
/// llama-quantize chooses it: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0
/// (llama.cpp takes IQ4_NL there, which fucina does not encode); F16 when the row does not
/// hold whole 32-blocks either. `None`: the target needs no fallback (its blocks are 1 or 32
/// wide, and a row that does not fit stays as it is, like llama.cpp's 1-D tensors).
pub fn fallback(target: GgmlType, row: u64) -> Option<GgmlType> {
    let alt = match target {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => return None,
    };
    Some(if row.is_multiple_of(alt.block_size() as u64) { alt } else { GgmlType::F16 })
}

/// What [`quantize_file`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantizeReport {
    /// Tensors re-encoded.
    pub reencoded: usize,
    /// Tensors copied as they were.
    pub copied: usize,
    /// Weights whose rows are not whole blocks of their target: name, the target, and the
    /// format they got instead.
    pub fallbacks: Vec<(String, GgmlType, GgmlType)>,
}

/// Whether `a` and `b` name the same file (same device and inode where the OS has them).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

/// Re-encodes `input` into `output`; `progress(done, total, name)` is called per tensor.
///
/// The output is written to a temporary file beside it and renamed into place only when it
/// is complete, so a failure leaves no partial file; an output that is the input (the same
/// file by any path or link) is refused before anything is written, since the input is
/// mapped while it is read.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: Target,
    file_type: u32,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<QuantizeReport> {
    if same_file(input, output) {
        return Err(FucinaError::InvalidArgument {
            op: "quantize",
            msg: format!("the output {} is the input file; write to another path", output.display()),
        });
    }
    let src = GgufFile::open(input)?;
    let mut header = src.header().clone();
    let total = header.tensors.len();
    let n_layer =
        header.metadata.iter().find(|(k, _)| k.ends_with(".block_count")).and_then(|(_, v)| v.as_u64()).unwrap_or(0)
            as usize;
    let mut plan = Vec::with_capacity(total);
    let mut report = QuantizeReport::default();
    for t in header.tensors.iter_mut() {
        let mut to = target.format_for(&t.name, n_layer);
        if is_weight_type(t.ty) && t.dims.len() >= 2 && !t.dims[0].is_multiple_of(to.block_size() as u64) {
            if let Some(alt) = fallback(to, t.dims[0]) {
                report.fallbacks.push((t.name.clone(), to, alt));
                to = alt;
            }
        }
        let re = eligible(t.ty, &t.dims, to) && t.ty != to;
        plan.push((re, t.ty, to));
        if re {
            t.ty = to;
        }
    }
    match header.metadata.iter_mut().find(|(k, _)| k == "general.file_type") {
        Some((_, v)) => *v = Value::U32(file_type),
        None => header.metadata.push(("general.file_type".into(), Value::U32(file_type))),
    }
    assign_offsets(&mut header)?;
    let tmp = temp_path(output);
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |e: std::io::Error| FucinaError::io(p.clone(), e)
    };
    let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io(&tmp))?;
    let mut w = std::io::BufWriter::new(file);
    let src_header = src.header();
    let written = write_gguf_to(&mut w, &header, |i| {
        let t = &src_header.tensors[i];
        progress(i, total, &t.name);
        let bytes = tensor_bytes(src.bytes(), src_header, t)?;
        if plan[i].0 {
            report.reencoded += 1;
            let x = dequantize(plan[i].1, bytes, t.numel() as usize)?;
            Ok(Cow::Owned(quantize_rows(plan[i].2, &x, t.dims[0] as usize)?))
        } else {
            report.copied += 1;
            Ok(Cow::Borrowed(bytes))
        }
    })
    .and_then(|_| std::io::Write::flush(&mut w).map_err(io(&tmp)))
    .and_then(|_| w.get_ref().sync_all().map_err(io(&tmp)))
    .and_then(|_| std::fs::rename(&tmp, output).map_err(io(output)));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    progress(total, total, "");
    Ok(report)
}

/// A temporary name beside `output` (same directory, so the rename stays on one file system).
fn temp_path(output: &Path) -> std::path::PathBuf {
    let name = output.file_name().map_or_else(|| "out.gguf".into(), |n| n.to_string_lossy().into_owned());
    output.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Encodes `x` as `ty`, rows of `row` values in parallel (the K-quant searches are slow).
pub fn quantize_rows(ty: GgmlType, x: &[f32], row: usize) -> Result<Vec<u8>> {
    use rayon::prelude::*;
    // Chunks of whole rows, at least 64K values each, so small tensors stay on one thread.
    let rows_per = (65536 / row.max(1)).max(1);
    let parts: Vec<Vec<u8>> = x.par_chunks(row * rows_per).map(|c| quantize(ty, c)).collect::<Result<_>>()?;
    Ok(parts.concat())
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
        let r = quantize_file(&input, &out, t, ft, |_, _, _| calls += 1).unwrap();
        let (re, copied) = (r.reencoded, r.copied);
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
        // Rows that are not whole blocks (t.f32 has rows of 8) are copied unchanged.
        assert_eq!(dst.tensor_data("t.f32").unwrap(), src.tensor_data("t.f32").unwrap());
        std::fs::remove_file(&out).ok();
        assert!(parse_target("Q7_K").unwrap_err().to_string().contains("unknown target `Q7_K`"));
    }

    #[test]
    fn k_quant_targets_and_mixes() {
        let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fucina/tests/goldens/gguf/all_types.gguf");
        let out = std::env::temp_dir().join(format!("fucina-quantize-k-{}.gguf", std::process::id()));
        let (t, ft) = parse_target("Q4_K").unwrap();
        assert_eq!((t, ft), (Target::Uniform(GgmlType::Q4_K), 14));
        quantize_file(&input, &out, t, ft, |_, _, _| {}).unwrap();
        let dst = GgufFile::open(&out).unwrap();
        let src = GgufFile::open(&input).unwrap();
        // t.q6_k has rows of 256: re-encoded from Q6_K to Q4_K, and decodes close to the source.
        let info = dst.header().tensors.iter().find(|x| x.name == "t.q6_k").unwrap();
        assert_eq!(info.ty, GgmlType::Q4_K);
        let (_, a) = src.tensor_f32("t.q6_k").unwrap();
        let (_, b) = dst.tensor_f32("t.q6_k").unwrap();
        let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = a.iter().zip(&b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(err <= amax / 7.0, "Q4_K error {err} vs amax {amax}");
        std::fs::remove_file(&out).ok();
        // The Q4_K_M mix: embeddings, output and some layers' attn_v/ffn_down get Q6_K.
        let (m, ft) = parse_target("q4_k_m").unwrap();
        assert_eq!(ft, 15);
        assert_eq!(m.format_for("output.weight", 28), GgmlType::Q6_K);
        assert_eq!(m.format_for("blk.0.attn_v.weight", 28), GgmlType::Q6_K);
        assert_eq!(m.format_for("blk.5.attn_v.weight", 28), GgmlType::Q6_K);
        assert_eq!(m.format_for("blk.4.attn_v.weight", 28), GgmlType::Q4_K);
        assert_eq!(m.format_for("blk.4.attn_q.weight", 28), GgmlType::Q4_K);
        assert_eq!(m.format_for("blk.27.ffn_down.weight", 28), GgmlType::Q6_K);
    }
}
