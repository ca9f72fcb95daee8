//! Products with weight matrices kept in their file's format: the seam between the
//! `quant` layer (which owns the formats' encoders and the typed `QWeight`) and the
//! kernels. Every path of `y [m, n] = x [m, k] W^T` is chosen here, by the backend:
//!
//! - **bf16** (`m >= BF16_BATCH`, `k % 32 == 0`, a block format or BF16, on a CPU with
//!   AVX-512 BF16: [`WeightFormat::takes_bf16`]): activations and decoded weights rounded to
//!   bf16 (nearest even), products summed in f32;
//! - **float** (F32, F16, BF16 weights otherwise): the stored values times f32 activations,
//!   summed in f32;
//! - **integer** (block formats otherwise): each activation row quantized to Q8_0 (32-value
//!   formats) or Q8_K (K-quants) and dotted block by block in integers, one or two f32
//!   products per block.
//!
//! The scalar backend computes each path in the plainest order ([`weight_matmul_scalar`]);
//! the native backend the same values with SIMD and threads, up to summation order.

use super::fdot::{self, FloatRow};
use super::interleave::Interleaved;
use super::qdot::{self, Q8_0_BYTES};
use super::qdot_k::{self, KFormat, Q8_K_BYTES, QK_K};
use half::f16;

/// From this many activation rows on, block-format and BF16 weights take the bf16 path.
pub const BF16_BATCH: usize = 8;

/// The formats a weight matrix may be stored in for products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// f32, f16 or bf16 values.
    Float(FloatRow),
    /// 32 int8 and an f16 scale per block.
    Q8_0,
    /// 32 nibbles (minus 8) and an f16 scale per block.
    Q4_0,
    /// A 256-value K-quant.
    K(KFormat),
    /// Q4_K with super-blocks of sixteen rows interleaved ([`super::interleave`]): the
    /// layout a backend may ask for at load ([`super::Kernels::weight_layout`]). Products take
    /// the integer path at every batch size; a row's bytes, gathered
    /// ([`WeightMat::gather_row`]), are its Q4_K bytes.
    Q4KX16,
    /// Q6_K with super-blocks of sixteen rows interleaved, as [`WeightFormat::Q4KX16`] is for
    /// Q4_K.
    Q6KX16,
    /// Q8_0 with blocks of sixteen rows interleaved, as [`WeightFormat::Q4KX16`] is for Q4_K.
    Q8_0X16,
}

impl WeightFormat {
    /// Values per block.
    pub fn block(self) -> usize {
        match self {
            WeightFormat::Float(_) => 1,
            WeightFormat::Q8_0 | WeightFormat::Q4_0 | WeightFormat::Q8_0X16 => 32,
            WeightFormat::K(_) | WeightFormat::Q4KX16 | WeightFormat::Q6KX16 => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::Float(f) => f.width(),
            WeightFormat::Q8_0 | WeightFormat::Q8_0X16 => Q8_0_BYTES,
            WeightFormat::Q4_0 => qdot::Q4_0_BYTES,
            WeightFormat::K(f) => f.block_bytes(),
            WeightFormat::Q4KX16 => KFormat::Q4K.block_bytes(),
            WeightFormat::Q6KX16 => KFormat::Q6K.block_bytes(),
        }
    }

    /// The interleaved layout this format is, if it is one.
    pub fn interleaved(self) -> Option<Interleaved> {
        match self {
            WeightFormat::Q4KX16 => Some(Interleaved::Q4K),
            WeightFormat::Q6KX16 => Some(Interleaved::Q6K),
            WeightFormat::Q8_0X16 => Some(Interleaved::Q8_0),
            _ => None,
        }
    }

    /// The format of one row's bytes as [`WeightMat::gather_row`] returns them: the format
    /// itself, or the plain format of an interleaved layout.
    pub fn plain(self) -> WeightFormat {
        match self {
            WeightFormat::Q4KX16 => WeightFormat::K(KFormat::Q4K),
            WeightFormat::Q6KX16 => WeightFormat::K(KFormat::Q6K),
            WeightFormat::Q8_0X16 => WeightFormat::Q8_0,
            f => f,
        }
    }

    /// Bytes of a row of `cols` values (`cols` a multiple of the block).
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / self.block() * self.block_bytes()
    }

    /// Whether a product of `m` rows with reduction length `k` takes the bf16 path: from
    /// [`BF16_BATCH`] rows, for block formats and BF16, on CPUs whose bf16 dot products run
    /// at twice the f32 rate (AVX-512 BF16). Elsewhere the bf16 tiles would run widened to
    /// f32 with a slow decode, and block formats stay on the integer path (four activation
    /// rows per weight unpack), BF16 on the float one. The choice is per CPU, made the same
    /// way by every backend, so the scalar spec computes the path the native kernels take.
    pub fn takes_bf16(self, m: usize, k: usize) -> bool {
        m >= BF16_BATCH
            && k.is_multiple_of(32)
            && !matches!(
                self,
                WeightFormat::Float(FloatRow::F32)
                    | WeightFormat::Float(FloatRow::F16)
                    | WeightFormat::Q4KX16
                    | WeightFormat::Q6KX16
                    | WeightFormat::Q8_0X16
            )
            && super::native::has_bf16_dot()
    }
}

/// The layout a `[rows, cols]` weight of `format` takes on this CPU: Q4_K, Q6_K and Q8_0
/// matrices whose rows come in whole groups of sixteen take the interleaved layouts
/// ([`super::interleave`]) where the AVX-512 VNNI kernels run (F/BW/VL/VNNI and F16C, not
/// turned off with `FUCINA_NO_AVX512`), and Q4_K and Q8_0 matrices also where only AVX2 and
/// F16C do (their AVX2 kernels; not turned off with `FUCINA_NO_SIMD`), unless
/// `FUCINA_NO_REPACK` is set; everything else
/// keeps the file's rows. A repacked product takes the integer path at every batch size,
/// which on these CPUs beats the bf16 path from decode up to long prefills
/// (docs/BENCHMARK.md).
pub fn layout_for(format: WeightFormat, rows: usize, cols: usize) -> WeightFormat {
    let (f, to) = match format {
        WeightFormat::K(KFormat::Q4K) => (Interleaved::Q4K, WeightFormat::Q4KX16),
        WeightFormat::K(KFormat::Q6K) => (Interleaved::Q6K, WeightFormat::Q6KX16),
        WeightFormat::Q8_0 => (Interleaved::Q8_0, WeightFormat::Q8_0X16),
        _ => return format,
    };
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *OFF.get_or_init(|| std::env::var_os("FUCINA_NO_REPACK").is_some());
    // Q8_0 and Q4_K also where AVX2 runs: their interleaved AVX2 kernels add eight rows'
    // block sums per instruction without a horizontal reduction (Q6_K's AVX2 kernels work on
    // the file's rows).
    let kernels = super::native::simd::has_avx512_int() || super::native::has_avx2_kernel(f);
    if f.fits(rows, cols) && kernels && !off {
        to
    } else {
        format
    }
}

/// A weight matrix `[rows, cols]` in a [`WeightFormat`], rows contiguous.
#[derive(Debug, Clone, Copy)]
pub struct WeightMat<'a> {
    /// Storage format.
    pub format: WeightFormat,
    /// Output size `n`.
    pub rows: usize,
    /// Reduction size `k`.
    pub cols: usize,
    /// `rows * format.row_bytes(cols)` bytes.
    pub data: &'a [u8],
}

/// One product of a group ([`super::Kernels::weight_matmul_group`]): `y [m, w.rows] =
/// x [m, w.cols] W^T`, as [`super::Kernels::weight_matmul`] computes it.
#[derive(Debug)]
pub struct WeightJob<'a> {
    /// The weight.
    pub w: WeightMat<'a>,
    /// `[m, w.cols]` activations.
    pub x: &'a [f32],
    /// Activation rows.
    pub m: usize,
    /// `[m, w.rows]` output, overwritten.
    pub y: &'a mut [f32],
}

impl WeightMat<'_> {
    /// The bytes of row `j` of a row-major format (an interleaved layout's rows are not
    /// contiguous: [`WeightMat::gather_row`] collects them).
    pub fn row(&self, j: usize) -> &[u8] {
        debug_assert!(self.format.interleaved().is_none(), "WeightMat::row of an interleaved layout");
        let rb = self.format.row_bytes(self.cols);
        &self.data[j * rb..(j + 1) * rb]
    }

    /// The bytes of row `j` in the plain format ([`WeightFormat::plain`]): borrowed for a
    /// row-major format, gathered into `buf` for an interleaved one.
    pub fn gather_row<'s>(&'s self, j: usize, buf: &'s mut Vec<u8>) -> &'s [u8] {
        if let Some(f) = self.format.interleaved() {
            buf.resize(self.format.row_bytes(self.cols), 0);
            super::interleave::gather_row(f, self.data, self.cols, j, buf);
            return buf;
        }
        self.row(j)
    }

    /// Panics unless the sizes agree (a caller bug, never input-dependent: `QWeight` checks).
    pub fn check(&self, x: &[f32], m: usize, y: &[f32]) {
        assert!(
            self.cols.is_multiple_of(self.format.block())
                && self.data.len() == self.rows * self.format.row_bytes(self.cols)
                && self.format.interleaved().is_none_or(|f| f.fits(self.rows, self.cols))
                && x.len() == m * self.cols
                && y.len() == m * self.rows,
            "weight_matmul: sizes"
        );
    }
}

/// f32 -> bf16 bits as ggml rounds (nearest even, NaN made quiet).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let n = x.to_bits();
    let n = if n & 0x7fff_ffff > 0x7f80_0000 { (n & 0xffff_0000) | (64 << 16) } else { n };
    ((n as u64 + (0x7fff + ((n >> 16) & 1)) as u64) >> 16) as u16
}

/// Decodes one row of `format` (`out.len()` values) to f32: the specification every faster
/// decoder matches. A row of an interleaved layout comes as its gathered plain bytes.
pub fn decode_row(format: WeightFormat, src: &[u8], out: &mut [f32]) {
    match format.plain() {
        WeightFormat::Float(f) => fdot::decode_row(f, src, out),
        WeightFormat::Q8_0 => {
            for (b, o) in src.chunks_exact(Q8_0_BYTES).zip(out.chunks_exact_mut(32)) {
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                for (v, q) in o.iter_mut().zip(&b[2..]) {
                    *v = *q as i8 as f32 * d;
                }
            }
        }
        WeightFormat::Q4_0 => {
            for (b, o) in src.chunks_exact(qdot::Q4_0_BYTES).zip(out.chunks_exact_mut(32)) {
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                for i in 0..16 {
                    o[i] = d * ((b[2 + i] & 0x0F) as i8 - 8) as f32;
                    o[i + 16] = d * ((b[2 + i] >> 4) as i8 - 8) as f32;
                }
            }
        }
        WeightFormat::K(f) => {
            for (b, o) in src.chunks_exact(f.block_bytes()).zip(out.chunks_exact_mut(QK_K)) {
                qdot_k::unpack(f, b).values(o);
            }
        }
        WeightFormat::Q4KX16 | WeightFormat::Q6KX16 | WeightFormat::Q8_0X16 => {
            unreachable!("plain() maps the interleaved layouts to their row formats")
        }
    }
}

/// Bytes of one quantized activation row for the integer path of `format`.
pub fn activation_row_bytes(format: WeightFormat, k: usize) -> usize {
    match format.plain() {
        WeightFormat::K(_) => k / QK_K * Q8_K_BYTES,
        _ => k / 32 * Q8_0_BYTES,
    }
}

/// Quantizes the activation rows `x [m, k]` for the integer path of `format` (Q8_K for the
/// K-quants, Q8_0 otherwise), row after row into `out`.
pub fn quantize_activations(format: WeightFormat, x: &[f32], k: usize, out: &mut [u8]) {
    let a_row = activation_row_bytes(format, k);
    for (row, q) in x.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(a_row.max(1))) {
        match format.plain() {
            WeightFormat::K(_) => qdot_k::quantize_row_q8_k(row, q),
            _ => qdot::quantize_row_q8_0(row, q),
        }
    }
}

/// The scalar-spec integer dot of one weight row (gathered, for an interleaved layout) with
/// one quantized activation row.
pub fn dot_integer_scalar(format: WeightFormat, w: &[u8], a: &[u8]) -> f32 {
    match format.plain() {
        WeightFormat::K(f) => qdot_k::dot_k_q8_k_scalar(f, w, a),
        WeightFormat::Q4_0 => qdot::dot_q4_0_q8_0_scalar(w, a),
        _ => qdot::dot_q8_0_q8_0_scalar(w, a),
    }
}

/// The scalar specification of every path of `y [m, n] = x [m, k] W^T` (module docs).
pub fn weight_matmul_scalar(w: &WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32]) {
    w.check(x, m, y);
    let (n, k) = (w.rows, w.cols);
    let mut wf = vec![0.0f32; k];
    if w.format.takes_bf16(m, k) {
        let bf = |v: f32| f32::from_bits((f32_to_bf16_bits(v) as u32) << 16);
        let xb: Vec<f32> = x.iter().map(|v| bf(*v)).collect();
        for j in 0..n {
            decode_row(w.format, w.row(j), &mut wf);
            wf.iter_mut().for_each(|v| *v = bf(*v));
            for i in 0..m {
                y[i * n + j] = xb[i * k..(i + 1) * k].iter().zip(&wf).map(|(a, b)| a * b).sum();
            }
        }
        return;
    }
    if let WeightFormat::Float(f) = w.format {
        for j in 0..n {
            for i in 0..m {
                y[i * n + j] = fdot::dot_float_scalar(f, w.row(j), &x[i * k..(i + 1) * k]);
            }
        }
        return;
    }
    let a_row = activation_row_bytes(w.format, k);
    let mut qa = vec![0u8; m * a_row];
    quantize_activations(w.format, x, k, &mut qa);
    let mut buf = Vec::new();
    for j in 0..n {
        let row = w.gather_row(j, &mut buf);
        for i in 0..m {
            y[i * n + j] = dot_integer_scalar(w.format, row, &qa[i * a_row..(i + 1) * a_row]);
        }
    }
}

/// The scalar specification of decoding a whole weight matrix to f32 (`out [rows, cols]`).
pub fn weight_decode_scalar(w: &WeightMat<'_>, out: &mut [f32]) {
    assert_eq!(out.len(), w.rows * w.cols, "weight_decode: sizes");
    let mut buf = Vec::new();
    for (j, o) in out.chunks_exact_mut(w.cols.max(1)).enumerate().take(w.rows) {
        decode_row(w.format, w.gather_row(j, &mut buf), o);
    }
}
