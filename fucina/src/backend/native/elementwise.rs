//! Native elementwise kernels: unary maps, broadcasting binary ops, strided copies.

use super::par;
use super::simd::{self, Fused, MulAdd, Unfused};
use crate::backend::{binary_scalar, strided_offset, unary_scalar, BinaryOp, FloatSlice, Strided, UnaryOp};

/// Elements per parallel task.
const CHUNK: usize = 1 << 14;

#[inline(always)]
fn unary_body<M: MulAdd>(op: UnaryOp, x: &[f32], y: &mut [f32]) {
    macro_rules! map {
        (|$v:ident| $e:expr) => {
            for (o, $v) in y.iter_mut().zip(x) {
                let $v = *$v;
                *o = $e;
            }
        };
    }
    match op {
        UnaryOp::Neg => map!(|v| -v),
        UnaryOp::Exp => map!(|v| simd::exp::<M>(v)),
        UnaryOp::Sqrt => map!(|v| v.sqrt()),
        UnaryOp::Rsqrt => map!(|v| 1.0 / v.sqrt()),
        UnaryOp::Tanh => map!(|v| simd::tanh::<M>(v)),
        UnaryOp::Sigmoid => map!(|v| simd::sigmoid::<M>(v)),
        UnaryOp::Relu => map!(|v| v.max(0.0)),
        UnaryOp::Silu => map!(|v| v * simd::sigmoid::<M>(v)),
        UnaryOp::GeluTanh => {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            map!(|v| 0.5 * v * (1.0 + simd::tanh::<M>(c * (v + 0.044715 * v * v * v))))
        }
        UnaryOp::Abs => map!(|v| v.abs()),
        UnaryOp::Square => map!(|v| v * v),
        UnaryOp::Recip => map!(|v| 1.0 / v),
        UnaryOp::Affine(a, b) => map!(|v| M::mul_add(a, v, b)),
        UnaryOp::Gelu => map!(|v| simd::gelu::<M>(v)),
        UnaryOp::GeluDeriv => map!(|v| simd::gelu_deriv::<M>(v)),
        UnaryOp::Step => map!(|v| if v > 0.0 { 1.0 } else { 0.0 }),
        UnaryOp::SiluDeriv => map!(|v| {
            let s = simd::sigmoid::<M>(v);
            s * M::mul_add(v, 1.0 - s, 1.0)
        }),
        UnaryOp::Clamp(lo, hi) => map!(|v| if v < lo {
            lo
        } else if v > hi {
            hi
        } else {
            v
        }),
        UnaryOp::Log
        | UnaryOp::Softplus
        | UnaryOp::Powf(_)
        | UnaryOp::Sign
        | UnaryOp::GeluTanhDeriv
        | UnaryOp::InRange(..) => {
            map!(|v| unary_scalar(op, v))
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn unary_avx2(op: UnaryOp, x: &[f32], y: &mut [f32]) {
    unary_body::<Fused>(op, x, y)
}

fn unary_chunk(op: UnaryOp, x: &[f32], y: &mut [f32]) {
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU has AVX2 and FMA.
        l if l.has_avx2() => unsafe { unary_avx2(op, x, y) },
        _ => unary_body::<Unfused>(op, x, y),
    }
}

/// `y = op(x)` in parallel chunks.
pub fn unary(op: UnaryOp, x: &[f32], y: &mut [f32]) {
    if x.len() <= CHUNK || !par(x.len()) {
        unary_chunk(op, x, y);
    } else {
        super::par_chunks(y, CHUNK, 1, |c, yc| unary_chunk(op, &x[c * CHUNK..c * CHUNK + yc.len()], yc));
    }
}

#[inline(always)]
fn binary_row_body(op: BinaryOp, a: &[f32], sa: usize, b: &[f32], sb: usize, out: &mut [f32]) {
    macro_rules! go {
        ($f:expr) => {{
            let f = $f;
            match (sa, sb) {
                (1, 1) => out.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (x, y))| *o = f(*x, *y)),
                (1, 0) => {
                    let y = b[0];
                    out.iter_mut().zip(a).for_each(|(o, x)| *o = f(*x, y))
                }
                (0, 1) => {
                    let x = a[0];
                    out.iter_mut().zip(b).for_each(|(o, y)| *o = f(x, *y))
                }
                _ => out.iter_mut().enumerate().for_each(|(j, o)| *o = f(a[j * sa], b[j * sb])),
            }
        }};
    }
    match op {
        BinaryOp::Add => go!(|x: f32, y: f32| x + y),
        BinaryOp::Sub => go!(|x: f32, y: f32| x - y),
        BinaryOp::Mul => go!(|x: f32, y: f32| x * y),
        BinaryOp::Div => go!(|x: f32, y: f32| x / y),
        BinaryOp::Max => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Max, x, y)),
        BinaryOp::Min => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Min, x, y)),
        BinaryOp::Gt => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Gt, x, y)),
        BinaryOp::Eq => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Eq, x, y)),
        BinaryOp::Ge => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Ge, x, y)),
        BinaryOp::Lt => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Lt, x, y)),
        BinaryOp::Le => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Le, x, y)),
        BinaryOp::Ne => go!(|x: f32, y: f32| binary_scalar(BinaryOp::Ne, x, y)),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn binary_row_avx2(op: BinaryOp, a: &[f32], sa: usize, b: &[f32], sb: usize, out: &mut [f32]) {
    binary_row_body(op, a, sa, b, sb, out)
}

fn binary_row(op: BinaryOp, a: &[f32], sa: usize, b: &[f32], sb: usize, out: &mut [f32]) {
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU has AVX2 and FMA.
        l if l.has_avx2() => unsafe { binary_row_avx2(op, a, sa, b, sb, out) },
        _ => binary_row_body(op, a, sa, b, sb, out),
    }
}

/// Merges adjacent axes that every operand walks contiguously, and drops size-1 axes.
fn coalesce(shape: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut sh: Vec<usize> = Vec::new();
    let mut st: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable =
            !sh.is_empty() && strides.iter().enumerate().all(|(o, s)| st[o][sh.len() - 1] == s[d] * shape[d]);
        if mergeable {
            let last = sh.len() - 1;
            sh[last] *= shape[d];
            for (o, s) in strides.iter().enumerate() {
                st[o][last] = s[d];
            }
        } else {
            sh.push(shape[d]);
            for (o, s) in strides.iter().enumerate() {
                st[o].push(s[d]);
            }
        }
    }
    if sh.is_empty() {
        sh.push(1);
        st.iter_mut().for_each(|s| s.push(0));
    }
    (sh, st)
}

/// `out = op(a, b)` over `shape`, operands strided (broadcast by stride 0).
pub fn binary(op: BinaryOp, shape: &[usize], a: Strided<'_>, b: Strided<'_>, out: &mut [f32]) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let (sh, st) = coalesce(shape, &[a.strides, b.strides]);
    let last = *sh.last().unwrap_or(&1);
    let (sa, sb) = (st[0][sh.len() - 1], st[1][sh.len() - 1]);
    let row = |(r, o): (usize, &mut [f32])| {
        let oa = strided_offset(r * last, &sh, &st[0], a.offset);
        let ob = strided_offset(r * last, &sh, &st[1], b.offset);
        let la = (last - 1) * sa + 1;
        let lb = (last - 1) * sb + 1;
        binary_row(op, &a.data[oa..oa + la], sa, &b.data[ob..ob + lb], sb, o);
    };
    if last >= CHUNK && sa <= 1 && sb <= 1 && par(n) {
        // Long rows: split each row into parallel chunks.
        let rows = n / last;
        for r in 0..rows {
            let oa = strided_offset(r * last, &sh, &st[0], a.offset);
            let ob = strided_offset(r * last, &sh, &st[1], b.offset);
            super::par_chunks(&mut out[r * last..(r + 1) * last], CHUNK, 1, |c, o| {
                let j0 = c * CHUNK;
                let (xa, xb) = (&a.data[oa + j0 * sa..], &b.data[ob + j0 * sb..]);
                binary_row(op, xa, sa, xb, sb, o);
            });
        }
    } else if n >= CHUNK && par(n) {
        super::par_chunks(out, last, (CHUNK / last).max(1), |r, o| row((r, o)));
    } else {
        out.chunks_mut(last).enumerate().for_each(row);
    }
}

/// Gathers a strided view into contiguous f32, converting half types.
pub fn copy_strided(src: FloatSlice<'_>, offset: usize, shape: &[usize], strides: &[usize], out: &mut [f32]) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let (sh, st) = coalesce(shape, &[strides]);
    let last = *sh.last().unwrap_or(&1);
    let s_last = st[0][sh.len() - 1];
    let row = |(r, o): (usize, &mut [f32])| {
        let base = strided_offset(r * last, &sh, &st[0], offset);
        match (src, s_last) {
            (FloatSlice::F32(s), 1) => o.copy_from_slice(&s[base..base + last]),
            (FloatSlice::F32(s), _) => o.iter_mut().enumerate().for_each(|(j, v)| *v = s[base + j * s_last]),
            (other, _) => o.iter_mut().enumerate().for_each(|(j, v)| *v = other.get(base + j * s_last)),
        }
    };
    if n >= CHUNK && par(n) {
        super::par_chunks(out, last, (CHUNK / last).max(1), |r, o| row((r, o)));
    } else {
        out.chunks_mut(last).enumerate().for_each(row);
    }
}

/// `out = cond != 0 ? t : f` over `shape`, in parallel rows.
pub fn select(shape: &[usize], cond: Strided<'_>, t: Strided<'_>, f: Strided<'_>, out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    let (sh, st) = coalesce(shape, &[cond.strides, t.strides, f.strides]);
    let last = *sh.last().unwrap_or(&1);
    let d = sh.len() - 1;
    let row = |(r, o): (usize, &mut [f32])| {
        let oc = strided_offset(r * last, &sh, &st[0], cond.offset);
        let ot = strided_offset(r * last, &sh, &st[1], t.offset);
        let of = strided_offset(r * last, &sh, &st[2], f.offset);
        for (j, v) in o.iter_mut().enumerate() {
            let c = cond.data[oc + j * st[0][d]];
            *v = if c != 0.0 { t.data[ot + j * st[1][d]] } else { f.data[of + j * st[2][d]] };
        }
    };
    if out.len() >= CHUNK && par(out.len()) {
        super::par_chunks(out, last, (CHUNK / last).max(1), |r, o| row((r, o)));
    } else {
        out.chunks_mut(last).enumerate().for_each(row);
    }
}
