//! Kernels: the small, unchecked, shape-agnostic loops the ops dispatch to.
//!
//! `scalar` is the executable specification; `native` is the fast path (SIMD with
//! runtime feature detection, plus rayon). Both implement [`Kernels`]; the parity
//! suite holds native to scalar. Kernels get validated sizes from the exec layer.

pub mod conv2d;
pub mod delta;
pub mod fdot;
#[cfg(feature = "nam")]
pub mod frames;
pub mod interleave;
pub mod native;
pub mod qdot;
pub mod qdot_k;
pub mod rank;
pub mod rowdot;
pub mod scalar;
pub mod spectrum;
pub mod weights;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use conv2d::{Conv2d, Pool2d, PoolOp};
pub use interleave::Interleaved;
pub use native::team::Team;
pub use rank::{ArgOp, Scan};

/// Whether tasks split by [`for_each_task`] on this thread run on a worker [`Team`] it
/// drives (a model's forward under `ExecContext::run_on_pool`).
pub fn drives_team() -> bool {
    native::team::drives_team()
}

/// Runs tasks `0..n` of `f` on the team this thread drives, else on the rayon pool when this
/// is one of its threads, else serially; each task must compute the same thing on any thread.
pub fn for_each_task(n: usize, f: impl Fn(usize) + Sync) {
    native::team::for_each(n, f)
}
pub use native::{in_serial, serial};
pub use weights::{WeightFormat, WeightJob, WeightMat};

use half::{bf16, f16};

/// Elementwise unary functions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// natural log
    Log,
    /// square root
    Sqrt,
    /// `1/sqrt(x)`
    Rsqrt,
    /// hyperbolic tangent
    Tanh,
    /// `1/(1+e^-x)`
    Sigmoid,
    /// `max(x, 0)`
    Relu,
    /// `x * Phi(x)` with the exact (erf) normal CDF
    Gelu,
    /// `0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))`
    GeluTanh,
    /// `x * sigmoid(x)`
    Silu,
    /// `ln(1 + e^x)`
    Softplus,
    /// `|x|`
    Abs,
    /// `x^2`
    Square,
    /// `1/x`
    Recip,
    /// `a*x + b`
    Affine(f32, f32),
    /// `x^p`
    Powf(f32),
    /// `1` where `x > 0`, else `0` (derivative of relu)
    Step,
    /// `-1`, `0` or `1`
    Sign,
    /// `x` limited to `[lo, hi]` (NaN stays NaN, as `torch.clamp`)
    Clamp(f32, f32),
    /// `1` where `lo <= x <= hi`, else `0` (derivative of `Clamp`)
    InRange(f32, f32),
    /// derivative of `Gelu`: `Phi(x) + x phi(x)`
    GeluDeriv,
    /// derivative of `GeluTanh`
    GeluTanhDeriv,
    /// derivative of `Silu`: `s (1 + x (1 - s))` with `s = sigmoid(x)`
    SiluDeriv,
}

/// Elementwise binary functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `max(a, b)`
    Max,
    /// `min(a, b)`
    Min,
    /// `1` where `a > b`, else `0`
    Gt,
    /// `1` where `a == b`, else `0`
    Eq,
    /// `1` where `a >= b`, else `0`
    Ge,
    /// `1` where `a < b`, else `0`
    Lt,
    /// `1` where `a <= b`, else `0`
    Le,
    /// `1` where `a != b` (or either is NaN), else `0`
    Ne,
}

/// A distribution for [`Kernels::fill_random`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Normal with this mean and standard deviation (Box-Muller on pairs of draws).
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
    },
    /// Uniform in `[lo, hi)`.
    Uniform {
        /// Lower bound (included).
        lo: f32,
        /// Upper bound (excluded).
        hi: f32,
    },
}

/// Element `i` of a random fill: a pure function of the RNG, the base counter and `i`, so
/// any split of the work over threads gives the same numbers.
pub fn random_value(rng: &crate::rng::Philox, base: u64, dist: Distribution, i: usize) -> f32 {
    use crate::rng::{box_muller, u32_to_open01};
    match dist {
        Distribution::Normal { mean, std } => {
            let b = rng.at(0, base + (i / 2) as u64);
            let (z0, z1) = box_muller(b[0], b[1]);
            mean + std * if i.is_multiple_of(2) { z0 } else { z1 }
        }
        Distribution::Uniform { lo, hi } => {
            let b = rng.at(0, base + (i / 4) as u64);
            let u = 1.0 - u32_to_open01(b[i % 4]);
            lo + (hi - lo) * u
        }
    }
}

/// Reductions over one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// sum
    Sum,
    /// maximum
    Max,
    /// minimum
    Min,
    /// `ln(sum(exp(x)))`, computed stably
    LogSumExp,
}

/// A strided f32 operand of a binary op, over the output's shape (stride 0 broadcasts).
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a> {
    /// The storage.
    pub data: &'a [f32],
    /// Offset of element 0.
    pub offset: usize,
    /// Strides, one per output axis.
    pub strides: &'a [usize],
}

/// A borrowed slice of float elements of any supported dtype.
#[derive(Debug, Clone, Copy)]
pub enum FloatSlice<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f16 elements.
    F16(&'a [f16]),
    /// bf16 elements.
    BF16(&'a [bf16]),
}

impl FloatSlice<'_> {
    /// Element `i` as f32.
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            FloatSlice::F32(s) => s[i],
            FloatSlice::F16(s) => s[i].to_f32(),
            FloatSlice::BF16(s) => s[i].to_f32(),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            FloatSlice::F32(s) => s.len(),
            FloatSlice::F16(s) => s.len(),
            FloatSlice::BF16(s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One operand of a batched GEMM: element `(b, i, j)` is at `offset + b*bs + i*rs + j*cs`.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    /// The storage.
    pub data: FloatSlice<'a>,
    /// Offset of element (0, 0, 0).
    pub offset: usize,
    /// Stride between batches (0 broadcasts one matrix).
    pub bs: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

/// `C[b] = A[b] (m x k) * B[b] (k x n)`, C contiguous `[batch, m, n]`, f32 accumulation.
#[derive(Debug, Clone, Copy)]
pub struct Gemm<'a> {
    /// Number of independent products.
    pub batch: usize,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// The contracted size.
    pub k: usize,
    /// Left operand.
    pub a: MatRef<'a>,
    /// Right operand.
    pub b: MatRef<'a>,
}

/// The storage of [`HeadRows`]: float elements, or Q8_0 blocks (32 elements per 34-byte
/// block: an f16 scale and 32 int8; element `e` is in block `e / 32`).
#[derive(Debug, Clone, Copy)]
pub enum RowStore<'a> {
    /// Float elements.
    Float(FloatSlice<'a>),
    /// Q8_0 blocks; every offset and stride of the rows is a multiple of 32 elements.
    Q8_0(&'a [u8]),
}

impl RowStore<'_> {
    /// Element `i` as f32 (a Q8_0 element decoded: scale times integer).
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            RowStore::Float(f) => f.get(i),
            RowStore::Q8_0(b) => {
                let at = i / 32 * qdot::Q8_0_BYTES;
                let d = f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
                d * (b[at + 2 + i % 32] as i8) as f32
            }
        }
    }
}

/// Keys or values of [`Attention`]: rows of `dim` contiguous elements, `head` stride
/// between heads and `row` stride between positions (in elements).
#[derive(Debug, Clone, Copy)]
pub struct HeadRows<'a> {
    /// The storage.
    pub data: RowStore<'a>,
    /// Offset of head 0, position 0.
    pub offset: usize,
    /// Stride between heads.
    pub head: usize,
    /// Stride between positions.
    pub row: usize,
}

impl HeadRows<'_> {
    /// Element `d` of position `j` of head `h`, as f32.
    #[inline(always)]
    pub fn get(&self, h: usize, j: usize, d: usize) -> f32 {
        self.data.get(self.offset + h * self.head + j * self.row + d)
    }

    /// The Q8_0 blocks of row `j` of head `h` (`dim` elements), when stored as Q8_0.
    pub fn q8_0_row(&self, h: usize, j: usize, dim: usize) -> Option<&[u8]> {
        match self.data {
            RowStore::Q8_0(b) => {
                let at = (self.offset + h * self.head + j * self.row) / 32 * qdot::Q8_0_BYTES;
                Some(&b[at..at + dim / 32 * qdot::Q8_0_BYTES])
            }
            RowStore::Float(_) => None,
        }
    }
}

/// Scaled dot-product attention with grouped query heads: query `[s, h, g, dk]`
/// (contiguous; `g` query heads share each of the `h` key/value heads), keys `[h, t, dk]`,
/// values `[h, t, dv]`, output `[s, h, g, dv]`. Which keys a query sees is its [`Mask`].
///
/// Keys stored as Q8_0 are scored with integer dot products, as llama.cpp does with a
/// quantized cache: each query row is quantized to Q8_0 ([`qdot::quantize_row_q8_0`]) and
/// a score is `scale * sum_blocks d_q d_k sum_i q_i k_i`. Values stored as Q8_0 are decoded
/// (`d * v_i`) into the weighted sum.
#[derive(Debug, Clone, Copy)]
pub struct Attention<'a> {
    /// Queries, contiguous `[s, h, g, dk]`.
    pub q: &'a [f32],
    /// Keys.
    pub k: HeadRows<'a>,
    /// Values.
    pub v: HeadRows<'a>,
    /// Query positions.
    pub s: usize,
    /// Key/value heads.
    pub h: usize,
    /// Query heads per key/value head.
    pub g: usize,
    /// Key positions.
    pub t: usize,
    /// Width of queries and keys.
    pub dk: usize,
    /// Width of values.
    pub dv: usize,
    /// Factor on the scores (usually `1/sqrt(dk)`).
    pub scale: f32,
    /// Which keys each query sees.
    pub mask: Mask,
}

/// The operands of an attention backward: contiguous f32 `q [s, h, g, dk]`, `k [h, t, dk]`,
/// `v [h, t, dv]` and the output's gradient `gy [s, h, g, dv]`, with the forward's sizes.
#[derive(Debug, Clone, Copy)]
pub struct AttentionGrad<'a> {
    /// Queries.
    pub q: &'a [f32],
    /// Keys.
    pub k: &'a [f32],
    /// Values.
    pub v: &'a [f32],
    /// Gradient of the output.
    pub gy: &'a [f32],
    /// Query positions.
    pub s: usize,
    /// Key/value heads.
    pub h: usize,
    /// Query heads per key/value head.
    pub g: usize,
    /// Key positions.
    pub t: usize,
    /// Width of queries and keys.
    pub dk: usize,
    /// Width of values.
    pub dv: usize,
    /// Factor on the scores.
    pub scale: f32,
    /// Which keys each query sees.
    pub mask: Mask,
}

/// A dot product in eight interleaved partial sums (the order the specification fixes, and
/// one the compiler vectorizes).
#[inline(always)]
pub(crate) fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// The specification of the attention backward for key/value head `hh`, recomputing the
/// probabilities: with `P = softmax(S)`, `dV = P^T dY`, `dP = dY V^T`,
/// `dS = P (dP - rowsum(dP P))`, `dQ = scale dS K`, `dK = scale dS^T Q`. Writes the head's
/// query gradients into `dq [s, g, dk]` and adds its key and value gradients into
/// `dk [t, dk]` and `dv [t, dv]` (queries in order, so the sums are fixed).
///
/// Inlined into its callers, so a backend can compile it for wider vectors (the order of
/// every sum is the code's, so the results do not change).
#[inline(always)]
pub fn attention_backward_head(p: &AttentionGrad<'_>, hh: usize, dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]) {
    let mut prob = vec![0.0f32; p.t];
    let mut dp = vec![0.0f32; p.t];
    let (kh, vh) = (&p.k[hh * p.t * p.dk..][..p.t * p.dk], &p.v[hh * p.t * p.dv..][..p.t * p.dv]);
    for i in 0..p.s {
        let keys = p.mask.keys(i, p.t);
        let (j0, n) = (keys.start, keys.end);
        for gi in 0..p.g {
            let row = (i * p.h + hh) * p.g + gi;
            let qr = &p.q[row * p.dk..(row + 1) * p.dk];
            let gr = &p.gy[row * p.dv..(row + 1) * p.dv];
            for j in j0..n {
                prob[j] = p.scale * dot8(qr, &kh[j * p.dk..][..p.dk]);
            }
            let m = prob[j0..n].iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut z = 0.0f32;
            for pj in prob[j0..n].iter_mut() {
                *pj = (*pj - m).exp();
                z += *pj;
            }
            let mut dot = 0.0f32;
            for j in j0..n {
                prob[j] /= z;
                dp[j] = dot8(gr, &vh[j * p.dv..][..p.dv]);
                dot += dp[j] * prob[j];
                for (o, gv) in dv[j * p.dv..][..p.dv].iter_mut().zip(gr) {
                    *o += prob[j] * gv;
                }
            }
            let dqr = &mut dq[(i * p.g + gi) * p.dk..][..p.dk];
            for j in j0..n {
                let ds = p.scale * prob[j] * (dp[j] - dot);
                for (o, kv) in dqr.iter_mut().zip(&kh[j * p.dk..][..p.dk]) {
                    *o += ds * kv;
                }
                for (o, qv) in dk[j * p.dk..][..p.dk].iter_mut().zip(qr) {
                    *o += ds * qv;
                }
            }
        }
    }
}

/// Copies head `hh`'s query gradients `[s, g, dk]` into their rows of `dq [s, h, g, dk]`.
pub fn scatter_query_grads(p: &AttentionGrad<'_>, hh: usize, local: &[f32], dq: &mut [f32]) {
    let w = p.g * p.dk;
    for i in 0..p.s {
        dq[(i * p.h + hh) * w..][..w].copy_from_slice(&local[i * w..][..w]);
    }
}

/// Which keys each query of an attention sees.
///
/// ```
/// use fucina::backend::Mask;
/// // Query 2 of a block starting at position 5 sits at 7: causal sees keys 0..=7, a window
/// // of 3 sees keys 5..=7.
/// assert_eq!(Mask::Causal(5).keys(2, 100), 0..8);
/// assert_eq!(Mask::Sliding { start: 5, window: 3 }.keys(2, 100), 5..8);
/// assert_eq!(Mask::Full.keys(2, 100), 0..100);
/// // Sequences of 4 end to end: query 6 (the third of the second) sees keys 4..=6.
/// assert_eq!(Mask::Blocks { len: 4 }.keys(6, 8), 4..7);
/// assert_eq!(Mask::from(Some(5)), Mask::Causal(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mask {
    /// Every key.
    #[default]
    Full,
    /// Query `i` sits at position `p0 + i` of the keys and sees keys `0..=p0 + i`.
    Causal(usize),
    /// Causal from position `start`, and only the last `window` keys of those: query `i`
    /// sees keys `start + i + 1 - window ..= start + i` (sliding-window attention: Mistral,
    /// Gemma's local layers).
    Sliding {
        /// Position of the first query among the keys.
        start: usize,
        /// Keys each query sees at most, itself included.
        window: usize,
    },
    /// Several sequences of `len` positions laid end to end, queries and keys alike, each
    /// attending causally to itself only: query `i` sees keys `i - i % len ..= i` (a
    /// block-diagonal causal mask: one call for a batch of equal-length sequences).
    Blocks {
        /// Positions per sequence.
        len: usize,
    },
}

impl From<Option<usize>> for Mask {
    /// `Some(p0)`: causal from `p0`; `None`: every key.
    fn from(causal: Option<usize>) -> Mask {
        causal.map_or(Mask::Full, Mask::Causal)
    }
}

impl Mask {
    /// The position of the first query for causal masks.
    pub fn start(self) -> Option<usize> {
        match self {
            Mask::Full => None,
            Mask::Causal(p0) | Mask::Sliding { start: p0, .. } => Some(p0),
            Mask::Blocks { .. } => Some(0),
        }
    }

    /// The keys (of `t`) query `i` sees.
    pub fn keys(self, i: usize, t: usize) -> std::ops::Range<usize> {
        match self {
            Mask::Full => 0..t,
            Mask::Causal(p0) => 0..p0.saturating_add(i).saturating_add(1).min(t),
            Mask::Sliding { start, window } => {
                let end = start.saturating_add(i).saturating_add(1).min(t);
                end.saturating_sub(window).min(end)..end
            }
            Mask::Blocks { len } => {
                let end = i.saturating_add(1).min(t);
                (i - i % len.max(1)).min(end)..end
            }
        }
    }
}

impl Attention<'_> {
    /// Keys query `i` sees are below this.
    pub fn visible(&self, i: usize) -> usize {
        self.mask.keys(i, self.t).end
    }

    /// The first key query `i` sees.
    pub fn first(&self, i: usize) -> usize {
        self.mask.keys(i, self.t).start
    }
}

/// A 1-D convolution over contiguous `x [batch, cin, t]` and `w [cout, cin, k]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv1d {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Input length.
    pub t_in: usize,
    /// Kernel size.
    pub k: usize,
    /// Dilation between kernel taps.
    pub dilation: usize,
    /// Zeros added before the signal.
    pub pad_left: usize,
    /// Zeros added after the signal.
    pub pad_right: usize,
}

impl Conv1d {
    /// Output length (the exec layer checks it is positive).
    pub fn t_out(&self) -> usize {
        (self.t_in + self.pad_left + self.pad_right).saturating_sub(self.dilation * (self.k - 1))
    }
}

/// The kernel set every backend provides. All outputs are contiguous f32.
pub trait Kernels: Send + Sync + 'static {
    /// The backend's name.
    fn name(&self) -> &'static str;
    /// `y[i] = op(x[i])`.
    fn unary(&self, op: UnaryOp, x: &[f32], y: &mut [f32]);
    /// `out[t] += x[t] W` over a few short frames ([`frames::frames_gemm_acc_spec`]): no
    /// allocation, lock or thread, so a real-time audio callback may call it. The caller has
    /// run [`frames::FrameGemm::check`].
    #[cfg(feature = "nam")]
    fn frames_gemm_acc(&self, g: frames::FrameGemm, x: &[f32], w: &[f32], out: &mut [f32]);
    /// Squared magnitudes of the real Fourier transforms of `p.frames` frames of `p.n_fft`
    /// values ([`spectrum::power_spectrum_spec`]); the caller has run [`spectrum::Spectrum::check`].
    fn power_spectrum(&self, p: &spectrum::Spectrum, x: &[f32], out: &mut [f32]);
    /// `out[idx] = op(a[idx], b[idx])` over `shape`, operands strided.
    fn binary(&self, op: BinaryOp, shape: &[usize], a: Strided<'_>, b: Strided<'_>, out: &mut [f32]);
    /// Gathers a strided view of any float dtype into a contiguous f32 buffer.
    fn copy_strided(&self, src: FloatSlice<'_>, offset: usize, shape: &[usize], strides: &[usize], out: &mut [f32]);
    /// Reduces the middle axis of contiguous `[outer, len, inner]` into `[outer, inner]`.
    fn reduce(&self, op: ReduceOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]);
    /// Softmax (or log-softmax) over the last axis of contiguous `[rows, cols]`.
    fn softmax(&self, x: &[f32], rows: usize, cols: usize, log: bool, out: &mut [f32]);
    /// RMS norm over the last axis: `x / sqrt(mean(x^2) + eps) * w`.
    fn rms_norm(&self, x: &[f32], rows: usize, cols: usize, w: Option<&[f32]>, eps: f32, out: &mut [f32]);
    /// Layer norm over the last axis: `(x - mean) / sqrt(var + eps) * w + b`.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        x: &[f32],
        rows: usize,
        cols: usize,
        w: Option<&[f32]>,
        b: Option<&[f32]>,
        eps: f32,
        out: &mut [f32],
    );
    /// Batched matrix product into contiguous `c`.
    fn gemm(&self, g: &Gemm<'_>, c: &mut [f32]);
    /// Grouped-query attention into `out [s, h, g, dv]` (see [`Attention`]).
    fn attention(&self, p: &Attention<'_>, out: &mut [f32]);
    /// The gradients of an attention's queries `dq [s, h, g, dk]`, keys `dk [h, t, dk]` and
    /// values `dv [h, t, dv]` (zeroed by the caller): [`attention_backward_head`] for every
    /// head, in order (the specification).
    fn attention_backward(&self, p: &AttentionGrad<'_>, dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]) {
        let mut local = vec![0.0f32; p.s * p.g * p.dk];
        for hh in 0..p.h {
            local.fill(0.0);
            let (kh, vh) = (&mut dk[hh * p.t * p.dk..][..p.t * p.dk], &mut dv[hh * p.t * p.dv..][..p.t * p.dv]);
            attention_backward_head(p, hh, &mut local, kh, vh);
            scatter_query_grads(p, hh, &local, dq);
        }
    }
    /// 1-D convolution into contiguous `out [batch, cout, t_out]`.
    fn conv1d(&self, p: &Conv1d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]);
    /// `out[idx] = if cond[idx] != 0 { t[idx] } else { f[idx] }` over `shape`, operands strided.
    fn select(&self, shape: &[usize], cond: Strided<'_>, t: Strided<'_>, f: Strided<'_>, out: &mut [f32]);
    /// Rotary position embedding of contiguous `x [s, r, d]` (`r` rows per position) by the
    /// tables `cos`, `sin` `[s, n]` (`2n <= d`): pair `(x[a], x[b])` becomes `(x[a] c - x[b] s,
    /// x[b] c + x[a] s)`, where pair `i < n` is `(i, i + n)` (halves, NeoX) or `(2i, 2i + 1)`
    /// (`pairs`, GPT-J); the values past `2n` are copied (partial rotary embedding). Negating
    /// `sin` gives the inverse rotation.
    #[allow(clippy::too_many_arguments)]
    fn rope(&self, x: &[f32], r: usize, d: usize, n: usize, cos: &[f32], sin: &[f32], pairs: bool, out: &mut [f32]) {
        for (p, (xs, os)) in x.chunks_exact(r * d).zip(out.chunks_exact_mut(r * d)).enumerate() {
            let (c, sn) = (&cos[p * n..(p + 1) * n], &sin[p * n..(p + 1) * n]);
            for (xr, or) in xs.chunks_exact(d).zip(os.chunks_exact_mut(d)) {
                for i in 0..n {
                    let (a, b) = if pairs { (2 * i, 2 * i + 1) } else { (i, i + n) };
                    let (xa, xb) = (xr[a], xr[b]);
                    or[a] = xa * c[i] - xb * sn[i];
                    or[b] = xb * c[i] + xa * sn[i];
                }
                or[2 * n..].copy_from_slice(&xr[2 * n..]);
            }
        }
    }
    /// `out[ids[i], :] += src[i, :]` for rows of `cols` elements (ids checked): the backward of a gather.
    fn scatter_add_rows(&self, cols: usize, ids: &[u32], src: &[f32], out: &mut [f32]) {
        for (i, id) in ids.iter().enumerate() {
            let (o, s) = (*id as usize * cols, i * cols);
            for j in 0..cols {
                out[o + j] += src[s + j];
            }
        }
    }
    /// Backward of [`conv1d`](Kernels::conv1d): `dx` and `dw` (both overwritten) from `g [batch, cout, t_out]`.
    #[allow(clippy::too_many_arguments)]
    fn conv1d_backward(&self, p: &Conv1d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]);
    /// `out[i, :] = table[ids[i], :]` for a contiguous `[rows, cols]` table (ids checked).
    fn gather_rows(&self, table: FloatSlice<'_>, cols: usize, ids: &[u32], out: &mut [f32]);
    /// `y [m, n] = x [m, k] W^T` (every element of `y` overwritten) for a weight in its stored
    /// format; the path (bf16, float or integer) follows from the format and `m` as
    /// [`weights`] specifies, and every backend computes the same values up to summation order.
    fn weight_matmul(&self, w: &WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32]);
    /// Several independent weight products (the experts of a mixture-of-experts layer, the
    /// gate and up projections of a feed-forward block), each computed exactly as
    /// [`weight_matmul`](Kernels::weight_matmul) computes it on this backend: the same bits as
    /// one call per job, whatever the schedule. The specification is one call after another;
    /// a backend may run the group as one parallel region.
    fn weight_matmul_group(&self, jobs: &mut [WeightJob<'_>]) {
        for j in jobs.iter_mut() {
            self.weight_matmul(&j.w, j.x, j.m, j.y);
        }
    }
    /// The whole weight decoded to f32 (`out [rows, cols]`).
    fn weight_decode(&self, w: &WeightMat<'_>, out: &mut [f32]);
    /// The layout a `[rows, cols]` weight of `format` is repacked into at load
    /// ([`interleave`]), or `format` itself to keep the file's rows: per CPU, made the same
    /// way by every backend ([`weights::layout_for`]), so that the scalar spec computes the
    /// path the native kernels take.
    fn weight_layout(&self, format: WeightFormat, rows: usize, cols: usize) -> WeightFormat {
        weights::layout_for(format, rows, cols)
    }
    /// Writes `w` (in a row-major format) repacked into `layout`, an interleaved layout of
    /// that format which fits its shape ([`interleave::Interleaved::fits`]), into `out` (as
    /// many bytes as `w.data`).
    fn weight_repack(&self, w: &WeightMat<'_>, layout: Interleaved, out: &mut [u8]) {
        interleave::interleave(layout, w.rows, w.cols, w.data, out)
    }
    /// `out [outer, inner]`: the index along the middle axis of contiguous `x [outer, len,
    /// inner]` of each line's largest or smallest element ([`rank::arg_line`]; `len >= 1`).
    fn arg_reduce(&self, op: ArgOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [u32]) {
        for o in 0..outer {
            for i in 0..inner {
                out[o * inner + i] = rank::arg_line(op, x, len, inner, o * len * inner + i);
            }
        }
    }
    /// `vals`, `idx` `[outer, k, inner]`: the `k <= len` first elements of each line of
    /// contiguous `x [outer, len, inner]` in [`rank::rank_desc`] order, and their indices.
    #[allow(clippy::too_many_arguments)]
    fn topk(&self, x: &[f32], outer: usize, len: usize, inner: usize, k: usize, vals: &mut [f32], idx: &mut [u32]) {
        for o in 0..outer {
            for i in 0..inner {
                rank::topk_line(x, len, inner, o * len * inner + i, k, vals, idx, o * k * inner + i);
            }
        }
    }
    /// `out [outer, len, inner]`: the running sums of each line of contiguous `x` in the
    /// direction `dir` ([`rank::cumsum_line`]).
    fn cumsum(&self, dir: Scan, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]) {
        for o in 0..outer {
            for i in 0..inner {
                rank::cumsum_line(dir, x, len, inner, o * len * inner + i, out);
            }
        }
    }
    /// 2-D convolution into contiguous `out [batch, cout, oh, ow]` ([`conv2d::conv2d_spec`]).
    fn conv2d(&self, p: &Conv2d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
        conv2d::conv2d_spec(p, x, w, bias, out)
    }
    /// Backward of [`conv2d`](Kernels::conv2d): `dx`, `dw` overwritten
    /// ([`conv2d::conv2d_backward_spec`]).
    fn conv2d_backward(&self, p: &Conv2d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]) {
        conv2d::conv2d_backward_spec(p, x, w, g, dx, dw)
    }
    /// Max or average pooling into `out [planes, oh, ow]` (and, for max, the chosen
    /// elements into `arg`) ([`conv2d::pool2d_spec`]).
    fn pool2d(&self, p: &Pool2d, op: PoolOp, x: &[f32], out: &mut [f32], arg: &mut [u32]) {
        conv2d::pool2d_spec(p, op, x, out, arg)
    }
    /// Backward of average pooling ([`conv2d::avg_pool2d_backward_spec`]).
    fn avg_pool2d_backward(&self, p: &Pool2d, g: &[f32], dx: &mut [f32]) {
        conv2d::avg_pool2d_backward_spec(p, g, dx)
    }
    /// The gated delta rule over `p.s` positions from `state` (updated): the output `[s, vh,
    /// dv]`, in the given form; [`delta::gated_delta_rule_spec`] is the specification.
    fn gated_delta_rule(&self, p: &delta::DeltaRule<'_>, form: delta::DeltaForm, state: &mut [f32], out: &mut [f32]) {
        delta::gated_delta_rule_spec(p, form, state, out)
    }
    /// A causal depthwise convolution that continues from `state` (updated);
    /// [`delta::causal_conv1d_spec`] is the specification.
    fn causal_conv1d(&self, p: &delta::CausalConv, x: &[f32], w: &[f32], state: &mut [f32], out: &mut [f32]) {
        delta::causal_conv1d_spec(p, x, w, state, out)
    }
    /// Fills `out` with [`random_value`]s (`out[i]` is element `i`), in any order.
    fn fill_random(&self, rng: &crate::rng::Philox, base: u64, dist: Distribution, out: &mut [f32]) {
        for (i, v) in out.iter_mut().enumerate() {
            *v = random_value(rng, base, dist, i);
        }
    }
}

/// The available backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Plain loops: the specification.
    Scalar,
    /// SIMD + threads.
    Native,
}

impl BackendKind {
    /// The kernel set of the backend.
    pub fn kernels(self) -> &'static dyn Kernels {
        match self {
            BackendKind::Scalar => &scalar::Scalar,
            BackendKind::Native => &native::Native,
        }
    }
}

/// Index helper shared by both backends: the storage offset of flat index `i` of `shape`.
#[inline]
pub fn strided_offset(mut i: usize, shape: &[usize], strides: &[usize], offset: usize) -> usize {
    let mut pos = offset;
    for d in (0..shape.len()).rev() {
        let s = shape[d];
        if s == 0 {
            return offset;
        }
        pos += (i % s) * strides[d];
        i /= s;
    }
    pos
}

/// `erf(x)` to about 1.2e-7 absolute error (Numerical Recipes `erfc` Chebyshev fit).
#[inline]
pub fn erf(x: f32) -> f32 {
    let z = (x as f64).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    let v = 1.0 - r;
    (if x >= 0.0 { v } else { -v }) as f32
}

/// The scalar definition of every unary op (the spec both backends follow).
#[inline]
pub fn unary_scalar(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        UnaryOp::GeluTanh => {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Softplus => {
            if x > 20.0 {
                x
            } else {
                x.exp().ln_1p()
            }
        }
        UnaryOp::Abs => x.abs(),
        UnaryOp::Square => x * x,
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Affine(a, b) => a * x + b,
        UnaryOp::Powf(p) => x.powf(p),
        UnaryOp::Step => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::GeluDeriv => {
            let cdf = 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f32::consts::PI).sqrt();
            cdf + x * pdf
        }
        UnaryOp::GeluTanhDeriv => {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            let inner = c * (x + 0.044715 * x * x * x);
            let t = inner.tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
        }
        UnaryOp::SiluDeriv => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
        UnaryOp::Clamp(lo, hi) => {
            if x < lo {
                lo
            } else if x > hi {
                hi
            } else {
                x
            }
        }
        UnaryOp::InRange(lo, hi) => f32::from(u8::from(lo <= x && x <= hi)),
    }
}

/// The scalar definition of every binary op.
#[inline(always)]
pub fn binary_scalar(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Gt => {
            if a > b {
                1.0
            } else {
                0.0
            }
        }
        BinaryOp::Eq => f32::from(u8::from(a == b)),
        BinaryOp::Ge => f32::from(u8::from(a >= b)),
        BinaryOp::Lt => f32::from(u8::from(a < b)),
        BinaryOp::Le => f32::from(u8::from(a <= b)),
        BinaryOp::Ne => f32::from(u8::from(a != b)),
    }
}
