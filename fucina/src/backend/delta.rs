//! Recurrent sequence mixers with carried state (Qwen3.5's Gated DeltaNet): a causal
//! depthwise convolution whose last inputs carry over from one call to the next, and the
//! gated delta rule, in its recurrent form (one position at a time, the specification) and
//! its chunked form (blocks of [`CHUNK`] positions solved with a unit lower-triangular system,
//! as prefill kernels compute it). The two forms are the same function of their inputs; the
//! parity suite holds them together.
//!
//! Layouts (row-major, contiguous): queries and keys `[s, kh, dk]`, values `[s, vh, dv]`,
//! decays and update strengths `[s, vh]`, the state `[vh, dk, dv]`, the output `[s, vh, dv]`.

use crate::error::{FucinaError, Result};

/// Positions per block of the chunked form.
pub const CHUNK: usize = 64;

/// Which key head each value head reads (when there are more value heads than key heads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeadMap {
    /// Value head `h` reads key head `h % kh` (llama.cpp's GGUF order, where the converter
    /// tiles the value heads).
    Tiled,
    /// Value head `h` reads key head `h / (vh / kh)` (the Hugging Face checkpoints' order).
    Grouped,
}

/// Which form of the delta rule a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeltaForm {
    /// The backend chooses (the scalar and native backends run the recurrent form, the faster
    /// one on CPUs).
    Auto,
    /// One position at a time.
    Recurrent,
    /// Blocks of [`CHUNK`] positions.
    Chunked,
}

/// One gated delta rule call: the sizes and the operands (queries and keys `[s, kh, dk]`,
/// values `[s, vh, dv]`, log decays and update strengths `[s, vh]`).
#[derive(Clone, Copy)]
pub struct DeltaRule<'a> {
    /// Positions.
    pub s: usize,
    /// Key (and query) heads.
    pub kh: usize,
    /// Value heads (a multiple of `kh`), one state each.
    pub vh: usize,
    /// Key width.
    pub dk: usize,
    /// Value width.
    pub dv: usize,
    /// Factor on the queries (`1 / sqrt(dk)` in Qwen3.5).
    pub scale: f32,
    /// Key head of each value head.
    pub map: HeadMap,
    /// Queries.
    pub q: &'a [f32],
    /// Keys.
    pub k: &'a [f32],
    /// Values.
    pub v: &'a [f32],
    /// Log decays (`<= 0`: the state is multiplied by `exp(g)`).
    pub g: &'a [f32],
    /// Update strengths.
    pub beta: &'a [f32],
}

impl std::fmt::Debug for DeltaRule<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeltaRule {{ s: {}, kh: {}, vh: {}, dk: {}, dv: {}, scale: {}, map: {:?} }}",
            self.s, self.kh, self.vh, self.dk, self.dv, self.scale, self.map
        )
    }
}

impl DeltaRule<'_> {
    /// The key head value head `h` reads.
    pub fn key_head(&self, h: usize) -> usize {
        match self.map {
            HeadMap::Tiled => h % self.kh,
            HeadMap::Grouped => h / (self.vh / self.kh),
        }
    }

    /// Checks the sizes (nonzero heads and widths, `vh` a multiple of `kh`, no overflow) and
    /// the lengths of every operand, the state `[vh, dk, dv]` and the output `[s, vh, dv]`.
    pub fn check(&self, state: &[f32], out: &[f32]) -> Result<()> {
        let bad = |msg: String| FucinaError::InvalidArgument { op: "gated_delta_rule", msg };
        if self.kh == 0 || self.vh == 0 || self.dk == 0 || self.dv == 0 || !self.vh.is_multiple_of(self.kh) {
            return Err(bad(format!(
                "{} value heads over {} key heads, widths {} and {}",
                self.vh, self.kh, self.dk, self.dv
            )));
        }
        let n = |a: usize, b: usize, c: usize| a.checked_mul(b).and_then(|x| x.checked_mul(c));
        for (name, len, want) in [
            ("queries", self.q.len(), n(self.s, self.kh, self.dk)),
            ("keys", self.k.len(), n(self.s, self.kh, self.dk)),
            ("values", self.v.len(), n(self.s, self.vh, self.dv)),
            ("decays", self.g.len(), n(self.s, self.vh, 1)),
            ("update strengths", self.beta.len(), n(self.s, self.vh, 1)),
            ("state", state.len(), n(self.vh, self.dk, self.dv)),
            ("output", out.len(), n(self.s, self.vh, self.dv)),
        ] {
            if want != Some(len) {
                return Err(bad(format!("{name}: {len} values for {self:?}")));
            }
        }
        Ok(())
    }
}

/// Value head `h` over every position, one at a time: the specification. `state` is the
/// head's `[dk, dv]` state (updated), `out` its `[s, dv]` output rows. Per position `t`, with
/// `k`, `q` the key and query of the head's key head:
/// `S = exp(g_t) S`, `d = beta_t (v_t - S^T k)`, `S += k d^T`, `o_t = scale S^T q`.
pub fn recurrent_head(p: &DeltaRule<'_>, h: usize, state: &mut [f32], out: &mut [f32]) {
    let (q, k, v, g, beta) = (p.q, p.k, p.v, p.g, p.beta);
    let (dk, dv, kh) = (p.dk, p.dv, p.key_head(h));
    let mut delta = vec![0.0f32; dv];
    for t in 0..p.s {
        let kt = &k[(t * p.kh + kh) * dk..][..dk];
        let qt = &q[(t * p.kh + kh) * dk..][..dk];
        let vt = &v[(t * p.vh + h) * dv..][..dv];
        let decay = g[t * p.vh + h].exp();
        let b = beta[t * p.vh + h];
        state.iter_mut().for_each(|x| *x *= decay);
        delta.copy_from_slice(vt);
        for (i, &ki) in kt.iter().enumerate() {
            for (d, s) in delta.iter_mut().zip(&state[i * dv..(i + 1) * dv]) {
                *d -= s * ki;
            }
        }
        delta.iter_mut().for_each(|d| *d *= b);
        let o = &mut out[t * dv..(t + 1) * dv];
        o.fill(0.0);
        for (i, (&ki, &qi)) in kt.iter().zip(qt).enumerate() {
            let row = &mut state[i * dv..(i + 1) * dv];
            let qs = qi * p.scale;
            for ((s, d), o) in row.iter_mut().zip(&delta).zip(o.iter_mut()) {
                *s += ki * d;
                *o += *s * qs;
            }
        }
    }
}

/// Value head `h` in blocks of [`CHUNK`] positions: the same function as [`recurrent_head`],
/// computed as prefill kernels do. Within a block of `L` positions with cumulative log
/// decays `G`, `T = I + strictly_lower(beta_i (k_i . k_j) exp(G_i - G_j))` is solved by
/// forward substitution for `U = T^-1 (beta v)` and `W = T^-1 (beta exp(G) k)`; then
/// `v'_i = U_i - W_i S`, `o_i = scale (exp(G_i) q_i S + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) v'_j)`
/// and `S = exp(G_last) S + sum_j exp(G_last - G_j) k_j v'_j^T`.
pub fn chunked_head(p: &DeltaRule<'_>, h: usize, state: &mut [f32], out: &mut [f32]) {
    let (q, k, v, g, beta) = (p.q, p.k, p.v, p.g, p.beta);
    let (dk, dv, kh) = (p.dk, p.dv, p.key_head(h));
    let dot = super::dot8;
    let mut cum = vec![0.0f32; CHUNK];
    let mut t_mat = vec![0.0f32; CHUNK * CHUNK];
    let mut u = vec![0.0f32; CHUNK * dv];
    let mut w = vec![0.0f32; CHUNK * dk];
    let mut c0 = 0;
    while c0 < p.s {
        let l = CHUNK.min(p.s - c0);
        let key = |i: usize| &k[((c0 + i) * p.kh + kh) * dk..][..dk];
        let query = |i: usize| &q[((c0 + i) * p.kh + kh) * dk..][..dk];
        let mut acc = 0.0f32;
        for (i, c) in cum.iter_mut().take(l).enumerate() {
            acc += g[(c0 + i) * p.vh + h];
            *c = acc;
        }
        let b = |i: usize| beta[(c0 + i) * p.vh + h];
        for i in 0..l {
            for j in 0..i {
                t_mat[i * CHUNK + j] = b(i) * dot(key(i), key(j)) * (cum[i] - cum[j]).exp();
            }
        }
        // Forward substitution: row i of U and W from the rows before it.
        for i in 0..l {
            let (done, rest) = u.split_at_mut(i * dv);
            let ui = &mut rest[..dv];
            let vi = &v[((c0 + i) * p.vh + h) * dv..][..dv];
            ui.iter_mut().zip(vi).for_each(|(x, y)| *x = b(i) * y);
            let (wdone, wrest) = w.split_at_mut(i * dk);
            let wi = &mut wrest[..dk];
            let e = b(i) * cum[i].exp();
            wi.iter_mut().zip(key(i)).for_each(|(x, y)| *x = e * y);
            for j in 0..i {
                let tij = t_mat[i * CHUNK + j];
                ui.iter_mut().zip(&done[j * dv..(j + 1) * dv]).for_each(|(x, y)| *x -= tij * y);
                wi.iter_mut().zip(&wdone[j * dk..(j + 1) * dk]).for_each(|(x, y)| *x -= tij * y);
            }
        }
        // v'_i = U_i - W_i S, in place in U.
        for i in 0..l {
            let ui = &mut u[i * dv..(i + 1) * dv];
            for (a, &wa) in w[i * dk..(i + 1) * dk].iter().enumerate() {
                ui.iter_mut().zip(&state[a * dv..(a + 1) * dv]).for_each(|(x, s)| *x -= wa * s);
            }
        }
        // Outputs: the old state read through the decayed query, plus the block's own terms.
        for i in 0..l {
            let o = &mut out[(c0 + i) * dv..(c0 + i + 1) * dv];
            o.fill(0.0);
            let e = cum[i].exp();
            for (a, &qa) in query(i).iter().enumerate() {
                let f = qa * e;
                o.iter_mut().zip(&state[a * dv..(a + 1) * dv]).for_each(|(x, s)| *x += f * s);
            }
            for j in 0..=i {
                let f = dot(query(i), key(j)) * (cum[i] - cum[j]).exp();
                o.iter_mut().zip(&u[j * dv..(j + 1) * dv]).for_each(|(x, y)| *x += f * y);
            }
            o.iter_mut().for_each(|x| *x *= p.scale);
        }
        // The state after the block.
        let last = cum[l - 1];
        let e = last.exp();
        state.iter_mut().for_each(|x| *x *= e);
        for j in 0..l {
            let f = (last - cum[j]).exp();
            let vj = &u[j * dv..(j + 1) * dv];
            for (a, &ka) in key(j).iter().enumerate() {
                let c = f * ka;
                state[a * dv..(a + 1) * dv].iter_mut().zip(vj).for_each(|(x, y)| *x += c * y);
            }
        }
        c0 += l;
    }
}

/// Runs value head `h` in the given form (`Auto` is the recurrent form here).
pub fn delta_head(p: &DeltaRule<'_>, form: DeltaForm, h: usize, state: &mut [f32], out: &mut [f32]) {
    match form {
        DeltaForm::Chunked => chunked_head(p, h, state, out),
        _ => recurrent_head(p, h, state, out),
    }
}

/// Copies head `h`'s `[s, dv]` rows into the `[s, vh, dv]` output.
pub fn scatter_head(p: &DeltaRule<'_>, h: usize, local: &[f32], out: &mut [f32]) {
    for (t, row) in local.chunks_exact(p.dv).enumerate().take(p.s) {
        out[(t * p.vh + h) * p.dv..][..p.dv].copy_from_slice(row);
    }
}

/// The specification of [`Kernels::gated_delta_rule`](super::Kernels::gated_delta_rule):
/// every value head in turn, in the given form (operands checked by [`DeltaRule::check`]).
///
/// ```
/// use fucina::backend::delta::{gated_delta_rule_spec, DeltaForm, DeltaRule, HeadMap};
/// // One head of width 1, no decay, beta 1: the state learns v / k at once.
/// let (q, v) = ([1.0, 1.0], [3.0, 5.0]);
/// let p = DeltaRule {
///     s: 2, kh: 1, vh: 1, dk: 1, dv: 1, scale: 1.0, map: HeadMap::Tiled,
///     q: &q, k: &q, v: &v, g: &[0.0, 0.0], beta: &[1.0, 1.0],
/// };
/// let (mut state, mut out) = ([0.0], [0.0, 0.0]);
/// gated_delta_rule_spec(&p, DeltaForm::Recurrent, &mut state, &mut out);
/// assert_eq!((out, state), ([3.0, 5.0], [5.0]));
/// ```
pub fn gated_delta_rule_spec(p: &DeltaRule<'_>, form: DeltaForm, state: &mut [f32], out: &mut [f32]) {
    let mut local = vec![0.0f32; p.s * p.dv];
    for (h, st) in state.chunks_exact_mut(p.dk * p.dv).enumerate().take(p.vh) {
        delta_head(p, form, h, st, &mut local);
        scatter_head(p, h, &local, out);
    }
}

/// The sizes of one causal depthwise convolution with carried state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CausalConv {
    /// Positions.
    pub s: usize,
    /// Channels (each convolved on its own).
    pub ch: usize,
    /// Kernel taps (the state holds the last `taps - 1` inputs).
    pub taps: usize,
}

impl CausalConv {
    /// Checks the sizes and the lengths of the input `[s, ch]`, weight `[ch, taps]`, state
    /// `[taps - 1, ch]` and output `[s, ch]`.
    pub fn check(&self, x: &[f32], w: &[f32], state: &[f32], out: &[f32]) -> Result<()> {
        let bad = |msg: String| FucinaError::InvalidArgument { op: "causal_conv1d", msg };
        if self.taps == 0 {
            return Err(bad("a convolution of 0 taps".into()));
        }
        for (name, len, want) in [
            ("input", x.len(), self.s.checked_mul(self.ch)),
            ("weight", w.len(), self.ch.checked_mul(self.taps)),
            ("state", state.len(), (self.taps - 1).checked_mul(self.ch)),
            ("output", out.len(), self.s.checked_mul(self.ch)),
        ] {
            if want != Some(len) {
                return Err(bad(format!("{name}: {len} values for {self:?}")));
            }
        }
        Ok(())
    }
}

/// The specification of [`Kernels::causal_conv1d`](super::Kernels::causal_conv1d): with `xx`
/// the state's `taps - 1` rows followed by the input's `s` rows, `out[t][c] = sum_j
/// w[c][j] xx[t + j][c]` (`j` upwards), and the state becomes the last `taps - 1` rows of `xx`.
///
/// ```
/// use fucina::backend::delta::{causal_conv1d_spec, CausalConv};
/// // One channel, taps [1, 10]: each output is the previous input plus ten times this one.
/// let (mut state, mut out) = ([2.0], [0.0; 2]);
/// causal_conv1d_spec(&CausalConv { s: 2, ch: 1, taps: 2 }, &[3.0, 4.0], &[1.0, 10.0], &mut state, &mut out);
/// assert_eq!((out, state), ([32.0, 43.0], [4.0]));
/// ```
pub fn causal_conv1d_spec(p: &CausalConv, x: &[f32], w: &[f32], state: &mut [f32], out: &mut [f32]) {
    let keep = p.taps - 1;
    let row = |t: usize, c: usize| if t < keep { state[t * p.ch + c] } else { x[(t - keep) * p.ch + c] };
    for t in 0..p.s {
        for c in 0..p.ch {
            out[t * p.ch + c] = (0..p.taps).fold(0.0f32, |s, j| s + w[c * p.taps + j] * row(t + j, c));
        }
    }
    shift_state(p, x, state);
}

/// Moves the last `taps - 1` rows of (state, input) into the state.
pub fn shift_state(p: &CausalConv, x: &[f32], state: &mut [f32]) {
    let keep = p.taps - 1;
    if keep == 0 {
        return;
    }
    if p.s >= keep {
        state.copy_from_slice(&x[(p.s - keep) * p.ch..p.s * p.ch]);
    } else {
        state.copy_within(p.s * p.ch.., 0);
        let at = (keep - p.s) * p.ch;
        state[at..].copy_from_slice(&x[..p.s * p.ch]);
    }
}
