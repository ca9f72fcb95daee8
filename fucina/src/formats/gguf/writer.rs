//! The GGUF writer: header, metadata and tensor infos in order, zero padding to the
//! alignment, then each tensor's bytes at its offset (gaps zero-filled).

use super::{Array, GgufHeader, Value, MAGIC};
use crate::error::{FucinaError, Result};
use std::borrow::Cow;
use std::io::Write;

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s);
        }
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.type_id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => out.extend(v.iter().map(|x| *x as u8)),
        Array::Bool(v) => out.extend(v.iter().map(|x| *x as u8)),
        Array::U16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::I16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::U32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::I32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::U64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::I64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::F64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Array::String(v) => {
            for s in v {
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s);
            }
        }
        Array::Array(v) => v.iter().for_each(|x| put_array(out, x)),
    }
}

/// Writes a GGUF image: `header` and, for each of its tensors in order, `data(i)`.
pub fn write_gguf<'a>(header: &GgufHeader, mut data: impl FnMut(usize) -> Result<&'a [u8]>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write_gguf_to(&mut out, header, |i| data(i).map(Cow::Borrowed))?;
    Ok(out)
}

/// Streams a GGUF file to `w`: header, metadata, tensor infos, then each tensor's bytes
/// (`data(i)` is asked for one tensor at a time, so nothing holds the whole file).
pub fn write_gguf_to<'a, W: Write>(
    w: &mut W,
    header: &GgufHeader,
    mut data: impl FnMut(usize) -> Result<Cow<'a, [u8]>>,
) -> Result<u64> {
    let io = |e: std::io::Error| FucinaError::io("gguf output", e);
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&header.version.to_le_bytes());
    out.extend_from_slice(&(header.tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(header.metadata.len() as u64).to_le_bytes());
    for (k, v) in &header.metadata {
        put_value(&mut out, &Value::String(k.as_bytes().to_vec()));
        out.extend_from_slice(&v.type_id().to_le_bytes());
        put_value(&mut out, v);
    }
    for t in &header.tensors {
        put_value(&mut out, &Value::String(t.name.as_bytes().to_vec()));
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.id().to_le_bytes());
        out.extend_from_slice(&t.offset.to_le_bytes());
    }
    let align = header.alignment;
    let padded = |n: u64| n.div_ceil(align) * align;
    let head = padded(out.len() as u64);
    out.resize(head as usize, 0);
    w.write_all(&out).map_err(io)?;
    let mut pos = 0u64; // within the data section
    for (i, t) in header.tensors.iter().enumerate() {
        if t.offset < pos {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("tensor `{}` overlaps the previous one", t.name),
            });
        }
        w.write_all(&vec![0u8; (t.offset - pos) as usize]).map_err(io)?;
        let d = data(i)?;
        if d.len() != t.nbytes()? {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("tensor `{}`: {} bytes given, {} expected", t.name, d.len(), t.nbytes()?),
            });
        }
        w.write_all(&d).map_err(io)?;
        let end = t.offset + d.len() as u64;
        pos = padded(end);
        w.write_all(&vec![0u8; (pos - end) as usize]).map_err(io)?;
    }
    Ok(head + pos)
}

/// Lays the tensors out back to back from offset 0, each start aligned (as gguf-py does).
pub fn assign_offsets(header: &mut GgufHeader) -> Result<()> {
    let mut at = 0u64;
    for t in &mut header.tensors {
        t.offset = at;
        at = (at + t.nbytes()? as u64).div_ceil(header.alignment) * header.alignment;
    }
    Ok(())
}
