//! Blocked, packed f32 GEMM (BLIS loop order) with AVX-512 (12x32), AVX2/FMA (6x16)
//! and portable (6x16) micro-kernels chosen at run time.
//!
//! Loops: for each K block (KC) B is packed once into NR-wide panels; then tasks
//! over (M block of `mc` rows) x (N chunk) run in parallel, each packing its A block
//! into MR-tall panels and sweeping micro-tiles. f16/bf16 operands are widened to
//! f32 while packing, so the micro-kernels only see f32 and accumulate in f32.

use super::par;
use super::simd::{self, Level};
use crate::backend::{FloatSlice, Gemm, MatRef};
use std::cell::RefCell;

/// The K block of the packed product: `kc <= KC` values per panel, `pc` a multiple of it.
pub const KC: usize = 256;
/// Rows of A per block when one thread runs (A block of 96..144 rows fits in L2).
const MC_ROWS: usize = 96;
const MC_ROWS_MAX: usize = 144;

/// A micro-kernel `C[0..MR, 0..NR] += Apanel * Bpanel` over `kc` steps.
type MicroKernel = unsafe fn(usize, *const f32, *const f32, *mut f32, usize);

/// A raw pointer to C that tasks share; each task writes a disjoint set of tiles.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: tasks write pairwise disjoint tiles of C (distinct (row block, column chunk) pairs).
unsafe impl Send for CPtr {}
// SAFETY: as above; no two tasks touch the same element.
unsafe impl Sync for CPtr {}

/// Entry point used by the native backend.
pub fn gemm(g: &Gemm<'_>, c: &mut [f32]) {
    let (m, n, k) = (g.m, g.n, g.k);
    let per = m * n;
    if per == 0 {
        return;
    }
    if k == 0 {
        c[..g.batch * per].fill(0.0);
        return;
    }
    let work = m * n * k;
    if g.batch > 1 && work < (1 << 20) && par(g.batch * work) {
        // Through the team this thread drives, where it drives one (a model's forward): the
        // batch of small products (the heads of an attention einsum) then runs on the helper
        // already spinning for the next product instead of on a pool thread woken for it.
        super::par_chunks(&mut c[..g.batch * per], per, 1, |bt, cb| gemm_one(g, bt, cb, false));
    } else {
        for (bt, cb) in c[..g.batch * per].chunks_mut(per).enumerate() {
            // Splitting pays from about 4M multiply-adds (same scale as the exec layer's hand-off).
            gemm_one(g, bt, cb, par(work / 256));
        }
    }
}

fn is_f32<'a>(m: &MatRef<'a>) -> Option<&'a [f32]> {
    match m.data {
        FloatSlice::F32(s) => Some(s),
        _ => None,
    }
}

/// One product `c = A[bt] * B[bt]`, `c` contiguous `m x n`.
fn gemm_one(g: &Gemm<'_>, bt: usize, c: &mut [f32], parallel: bool) {
    if gemv(g, bt, c, parallel) {
        return;
    }
    let (a0, b0) = (g.a.offset + bt * g.a.bs, g.b.offset + bt * g.b.bs);
    let sizes = (g.m, g.n, g.k);
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            let pb =
                |pc: usize, kc: usize, j0: usize, panel: &mut [f32]| pack_b::<32>(&g.b, b0, pc, kc, j0, g.n, panel);
            blocked::<12, 32>(sizes, &g.a, a0, &pb, c, parallel, kernel_avx512)
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2Fma => {
            let pb =
                |pc: usize, kc: usize, j0: usize, panel: &mut [f32]| pack_b::<16>(&g.b, b0, pc, kc, j0, g.n, panel);
            blocked::<6, 16>(sizes, &g.a, a0, &pb, c, parallel, kernel_avx2)
        }
        _ => {
            let pb =
                |pc: usize, kc: usize, j0: usize, panel: &mut [f32]| pack_b::<16>(&g.b, b0, pc, kc, j0, g.n, panel);
            blocked::<6, 16>(sizes, &g.a, a0, &pb, c, parallel, kernel_portable::<6, 16>)
        }
    }
}

/// A producer of B panels: `pack(pc, kc, j0, panel)` writes `B[pc..pc+kc, j0..j0+NR]` as
/// `panel[p * NR + jj]`, zero past the last column.
pub type PackB<'a> = dyn Fn(usize, usize, usize, &mut [f32]) + Sync + 'a;

/// `c [m, n] = x [m, k] * B` for a row-major f32 `x` and a `B [k, n]` given by its panel
/// producer (e.g. weight rows decoded from a file format as they are packed); [`packed_nr`] is
/// the panel width the producer writes and [`KC`] bounds its `kc`. The micro-kernels are
/// those of `gemm`; the loop order is `streamed`'s.
pub fn gemm_packed(m: usize, n: usize, k: usize, x: &[f32], pack: &PackB<'_>, c: &mut [f32], parallel: bool) {
    assert!(x.len() >= m * k && c.len() >= m * n, "gemm_packed: sizes");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    let c = &mut c[..m * n];
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => streamed::<12, 32>((m, n, k), x, pack, c, parallel, kernel_avx512),
        #[cfg(target_arch = "x86_64")]
        Level::Avx2Fma => streamed::<6, 16>((m, n, k), x, pack, c, parallel, kernel_avx2),
        _ => streamed::<6, 16>((m, n, k), x, pack, c, parallel, kernel_portable::<6, 16>),
    }
}

/// Activation rows per block of [`streamed`]: a packed `STREAM_MB x KC` block (256 KiB)
/// stays in L2 while the task's B panels pass through L1.
const STREAM_MB: usize = 256;

/// The loop order of [`gemm_packed`], for a B that is produced panel by panel (decoded
/// weights, read once from memory): tasks own ranges of B's columns; each packs an A block
/// (at most [`STREAM_MB`] rows by [`KC`]), then produces one B panel at a time into L1 and
/// runs every row tile of the block against it before the next.
fn streamed<const MR: usize, const NR: usize>(
    (m, n, k): (usize, usize, usize),
    x: &[f32],
    pack: &PackB<'_>,
    c: &mut [f32],
    parallel: bool,
    kern: MicroKernel,
) {
    c.fill(0.0);
    let a = MatRef { data: FloatSlice::F32(x), offset: 0, bs: 0, rs: k, cs: 1 };
    let panels = n.div_ceil(NR);
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    // About four column ranges per thread (whole panels), so a slow worker is covered.
    let per = if threads > 1 { panels.div_ceil(4 * threads).max(1) } else { panels };
    let cp = CPtr(c.as_mut_ptr());
    let task = |t: usize| {
        let (p0, p1) = (t * per, ((t + 1) * per).min(panels));
        let out = cp;
        let mut bp = [0.0f32; KC * 32];
        let bp = &mut bp[..KC * NR];
        let mut i0 = 0;
        while i0 < m {
            let rows = STREAM_MB.min(m - i0);
            let mut pc = 0;
            while pc < k {
                let kc = KC.min(k - pc);
                with_buffer(&APACK, rows.div_ceil(MR) * MR * kc, |ap| {
                    pack_a::<MR>(&a, 0, i0, rows, pc, kc, ap);
                    for jp in p0..p1 {
                        let panel = &mut bp[..kc * NR];
                        pack(pc, kc, jp * NR, panel);
                        let j0 = jp * NR;
                        // SAFETY: this task alone writes columns of panels p0..p1 (so j0..j0+NR
                        // clipped to n), rows i0..i0+rows; `bp` holds the one panel at index 0.
                        unsafe {
                            macro_block::<MR, NR>(
                                ap,
                                panel,
                                kc,
                                i0,
                                rows,
                                0,
                                NR.min(n - j0),
                                n,
                                CPtr(out.0.add(j0)),
                                kern,
                            )
                        };
                    }
                });
                pc += kc;
            }
            i0 += rows;
        }
    };
    let tasks = panels.div_ceil(per);
    if parallel {
        super::team::for_each(tasks, task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// The panel width [`gemm_packed`]'s producer writes on this CPU.
pub fn packed_nr() -> usize {
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => 32,
        _ => 16,
    }
}

/// The skinny-left-operand (decode-style mat-vec) paths; false when they do not apply.
fn gemv(g: &Gemm<'_>, bt: usize, c: &mut [f32], parallel: bool) -> bool {
    let (m, n, k) = (g.m, g.n, g.k);
    let a0 = g.a.offset + bt * g.a.bs;
    let b0 = g.b.offset + bt * g.b.bs;
    // Skinny left operand (decode-style mat-vec): stream B once with dot products or axpys.
    if m <= 2 {
        if let (Some(a), Some(b)) = (is_f32(&g.a), is_f32(&g.b)) {
            if g.b.rs == 1 && g.a.cs == 1 {
                gemv_dot(a, a0, g.a.rs, b, b0, g.b.cs, m, n, k, c, parallel);
                return true;
            }
            if g.b.cs == 1 {
                gemv_axpy(a, a0, g.a.rs, g.a.cs, b, b0, g.b.rs, m, n, k, c, parallel);
                return true;
            }
        }
    }
    false
}

/// The packed, blocked product with an `MR x NR` micro-kernel.
fn blocked<const MR: usize, const NR: usize>(
    (m, n, k): (usize, usize, usize),
    a: &MatRef<'_>,
    a0: usize,
    pack: &PackB<'_>,
    c: &mut [f32],
    parallel: bool,
    kern: MicroKernel,
) {
    c.fill(0.0);
    let n_pad = n.div_ceil(NR) * NR;
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    // Row blocks: MC rows normally; smaller so that every thread gets at least two blocks.
    let mc = if threads > 1 { m.div_ceil(2 * threads).div_ceil(MR).max(2) * MR } else { MC_ROWS.div_ceil(MR) * MR };
    let mc = mc.min(MC_ROWS_MAX.div_ceil(MR) * MR);
    let m_blocks = m.div_ceil(mc);
    // Column chunks only when there are too few row blocks to keep the threads busy.
    let n_chunks = if m_blocks >= 2 * threads { 1 } else { (2 * threads).div_ceil(m_blocks).min(n.div_ceil(NR)) };
    let nchunk = n.div_ceil(n_chunks).div_ceil(NR) * NR;
    let n_chunks = n.div_ceil(nchunk);
    let cp = CPtr(c.as_mut_ptr());
    with_buffer(&BPACK, KC.min(k) * n_pad, |bp_all| {
        let mut pc = 0;
        while pc < k {
            let kc = KC.min(k - pc);
            let bp = &mut bp_all[..kc * n_pad];
            let pack_panel = |(jp, panel): (usize, &mut [f32])| pack(pc, kc, jp * NR, panel);
            if parallel {
                super::par_chunks(bp, kc * NR, 1, |jp, panel| pack_panel((jp, panel)));
            } else {
                bp.chunks_mut(kc * NR).enumerate().for_each(pack_panel);
            }
            let bp: &[f32] = bp;
            let task = |t: usize| {
                let (ib, jb) = (t / n_chunks, t % n_chunks);
                let (i0, rows) = (ib * mc, mc.min(m - ib * mc));
                let (j0, cols) = (jb * nchunk, nchunk.min(n - jb * nchunk));
                with_buffer(&APACK, rows.div_ceil(MR) * MR * kc, |ap| {
                    pack_a::<MR>(a, a0, i0, rows, pc, kc, ap);
                    // SAFETY: task (ib, jb) writes only rows i0..i0+rows and columns j0..j0+cols of C.
                    unsafe { macro_block::<MR, NR>(ap, bp, kc, i0, rows, j0, cols, n, cp, kern) };
                });
            };
            if parallel {
                super::team::for_each(m_blocks * n_chunks, task);
            } else {
                (0..m_blocks * n_chunks).for_each(task);
            }
            pc += kc;
        }
    });
}

thread_local! {
    static APACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static BPACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a thread-local scratch buffer of at least `len` floats (contents unspecified).
fn with_buffer<R>(
    key: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0.0);
            }
            f(&mut v[..len])
        }
        // Re-entered on this thread (a nested gemm): use a fresh buffer.
        Err(_) => f(&mut vec![0.0f32; len]),
    })
}

/// Writes `rows` (`nr` rows of `kc` values at stride `stride`; rows past `cols` are ignored)
/// transposed into a B panel: `panel[p * nr + jj] = rows[jj * stride + p]`, zero for
/// `jj >= cols`. `nr` is a multiple of 8 ([`packed_nr`]).
pub fn transpose_into_panel(rows: &[f32], stride: usize, cols: usize, kc: usize, nr: usize, panel: &mut [f32]) {
    assert!(nr.is_multiple_of(8) && cols <= nr && panel.len() >= kc * nr, "transpose_into_panel: sizes");
    assert!(cols == 0 || rows.len() >= (cols - 1) * stride + kc, "transpose_into_panel: rows");
    let mut p0 = 0;
    #[cfg(target_arch = "x86_64")]
    if simd::level().has_avx2() && cols == nr {
        p0 = kc / 8 * 8;
        for g in 0..nr / 8 {
            for p in (0..p0).step_by(8) {
                // SAFETY: AVX2 is present; rows g*8..g*8+8 hold values p..p+8 (p + 8 <= kc and
                // all nr rows are given); panel rows p..p+8 have nr values.
                unsafe {
                    x86_transpose8(
                        rows.as_ptr().add(g * 8 * stride + p),
                        stride,
                        panel.as_mut_ptr().add(p * nr + g * 8),
                        nr,
                    )
                };
            }
        }
    }
    for p in p0..kc {
        let out = &mut panel[p * nr..(p + 1) * nr];
        for (jj, o) in out.iter_mut().enumerate() {
            *o = if jj < cols { rows[jj * stride + p] } else { 0.0 };
        }
    }
}

/// Transposes an 8x8 block: `dst[q * ld_dst + r] = src[r * ld_src + q]`.
///
/// # Safety
/// AVX2 is present; `src` holds 8 rows of 8 floats at stride `ld_src`, `dst` 8 rows at `ld_dst`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn x86_transpose8(src: *const f32, ld_src: usize, dst: *mut f32, ld_dst: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's bounds.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * ld_src)));
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let o = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (q, v) in o.into_iter().enumerate() {
            _mm256_storeu_ps(dst.add(q * ld_dst), v);
        }
    }
}

/// Packs `B[pc..pc+kc, j0..j0+NR]` into `panel[p*NR + jj]`, zero-padding past `n`.
fn pack_b<const NR: usize>(b: &MatRef<'_>, b0: usize, pc: usize, kc: usize, j0: usize, n: usize, panel: &mut [f32]) {
    let cols = NR.min(n - j0);
    if let (FloatSlice::F32(s), 1) = (b.data, b.cs) {
        for p in 0..kc {
            let src = b0 + (pc + p) * b.rs + j0;
            panel[p * NR..p * NR + cols].copy_from_slice(&s[src..src + cols]);
            panel[p * NR + cols..p * NR + NR].fill(0.0);
        }
        return;
    }
    if let (FloatSlice::F32(s), 1, true) = (b.data, b.rs, cols == NR) {
        // Column-contiguous B (a weight `[n, k]` used transposed, as every `x W^T` is): the
        // NR columns are NR rows of the weight, transposed 8x8 at a time.
        let base = b0 + j0 * b.cs + pc;
        transpose_into_panel(&s[base..base + (NR - 1) * b.cs + kc], b.cs, NR, kc, NR, panel);
        return;
    }
    if cols < NR {
        panel.fill(0.0);
    }
    for jj in 0..cols {
        let base = b0 + (j0 + jj) * b.cs + pc * b.rs;
        match b.data {
            FloatSlice::F32(s) => {
                for p in 0..kc {
                    panel[p * NR + jj] = s[base + p * b.rs];
                }
            }
            other => {
                for p in 0..kc {
                    panel[p * NR + jj] = other.get(base + p * b.rs);
                }
            }
        }
    }
}

/// Packs `A[i0..i0+mc, pc..pc+kc]` into MR-row panels `ap[ip*kc*MR + p*MR + ii]`.
fn pack_a<const MR: usize>(a: &MatRef<'_>, a0: usize, i0: usize, mc: usize, pc: usize, kc: usize, ap: &mut [f32]) {
    for (ip, panel) in ap.chunks_mut(kc * MR).enumerate() {
        let rows = MR.min(mc - ip * MR);
        if rows < MR {
            panel.fill(0.0);
        }
        if let (FloatSlice::F32(src), 1, true) = (a.data, a.cs, rows == MR) {
            // Row-major A, full panel: read MR rows side by side, write the panel sequentially.
            let base = a0 + (i0 + ip * MR) * a.rs + pc;
            let r: [&[f32]; MR] = std::array::from_fn(|ii| &src[base + ii * a.rs..base + ii * a.rs + kc]);
            for (p, out) in panel.chunks_exact_mut(MR).enumerate() {
                for ii in 0..MR {
                    out[ii] = r[ii][p];
                }
            }
            continue;
        }
        for ii in 0..rows {
            let base = a0 + (i0 + ip * MR + ii) * a.rs + pc * a.cs;
            match a.data {
                FloatSlice::F32(s) if a.cs == 1 => {
                    for (p, v) in s[base..base + kc].iter().enumerate() {
                        panel[p * MR + ii] = *v;
                    }
                }
                other => {
                    for p in 0..kc {
                        panel[p * MR + ii] = other.get(base + p * a.cs);
                    }
                }
            }
        }
    }
}

/// Runs the micro-kernel over one (row block, column chunk) of C.
///
/// # Safety
/// `c` must point to a row-major `? x ldc` matrix that contains rows `i0..i0+mc` and
/// columns `j0..j0+nc`, and no other thread may access that region meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn macro_block<const MR: usize, const NR: usize>(
    ap: &[f32],
    bp: &[f32],
    kc: usize,
    i0: usize,
    mc: usize,
    j0: usize,
    nc: usize,
    ldc: usize,
    c: CPtr,
    kern: MicroKernel,
) {
    let mut tmp = vec![0.0f32; MR * NR];
    let mut jr = 0;
    while jr < nc {
        let cols = NR.min(nc - jr);
        let bpanel = &bp[(j0 + jr) / NR * kc * NR..][..kc * NR];
        let mut ir = 0;
        while ir < mc {
            let rows = MR.min(mc - ir);
            let apanel = &ap[ir / MR * kc * MR..][..kc * MR];
            // SAFETY: the tile (i0+ir.., j0+jr..) lies inside this task's region of C.
            let ctile = unsafe { c.0.add((i0 + ir) * ldc + j0 + jr) };
            if rows == MR && cols == NR {
                // SAFETY: a full MR x NR tile fits in C at `ctile` with row stride ldc; the panels
                // hold kc*MR and kc*NR floats; `kern` was chosen for a CPU level that is present.
                unsafe { kern(kc, apanel.as_ptr(), bpanel.as_ptr(), ctile, ldc) };
            } else {
                tmp.fill(0.0);
                // SAFETY: `tmp` is an MR x NR buffer with row stride NR; panels as above.
                unsafe { kern(kc, apanel.as_ptr(), bpanel.as_ptr(), tmp.as_mut_ptr(), NR) };
                for r in 0..rows {
                    for cc in 0..cols {
                        // SAFETY: r < rows and cc < cols keep the write inside the tile region.
                        unsafe { *ctile.add(r * ldc + cc) += tmp[r * NR + cc] };
                    }
                }
            }
            ir += MR;
        }
        jr += NR;
    }
}

/// Portable micro-kernel; LLVM vectorizes the NR-wide inner loop (SSE2 / NEON).
///
/// # Safety
/// `a` holds `kc*MR` and `b` `kc*NR` floats; `c` is valid for an MR x NR tile with row stride `ldc`.
unsafe fn kernel_portable<const MR: usize, const NR: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: lengths as documented above.
    let (a, b) = unsafe { (std::slice::from_raw_parts(a, kc * MR), std::slice::from_raw_parts(b, kc * NR)) };
    let mut acc = [[0.0f32; NR]; MR];
    for p in 0..kc {
        let bv = &b[p * NR..p * NR + NR];
        for i in 0..MR {
            let av = a[p * MR + i];
            for j in 0..NR {
                acc[i][j] += av * bv[j];
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            // SAFETY: i < MR, j < NR, inside the tile the caller guarantees.
            unsafe { *c.add(i * ldc + j) += v };
        }
    }
}

/// Writes an x86 register-blocked micro-kernel: `MR` rows x two vectors of `LANES` floats,
/// one broadcast of A per row and two loads of B per k step, accumulators added into C.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_micro_kernel {
    (
        $(#[$doc:meta])* $name:ident, $feature:literal, mr: $mr:literal, lanes: $lanes:literal,
        zero: $zero:ident, load: $load:ident, store: $store:ident, set1: $set1:ident, fma: $fma:ident, add: $add:ident
    ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must have the enabled features; `a` holds `kc*MR` and `b` `kc*NR` floats
        /// (`NR` = 2 x lanes); `c` is valid for an MR x NR tile with row stride `ldc`.
        #[target_feature(enable = $feature)]
        unsafe fn $name(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize) {
            use std::arch::x86_64::*;
            const MR: usize = $mr;
            const NR: usize = 2 * $lanes;
            let mut acc = [$zero(); 2 * MR];
            let (mut a, mut b) = (a, b);
            for _ in 0..kc {
                // SAFETY: the panels hold kc*NR (b) and kc*MR (a) floats; we advance NR and MR per step.
                unsafe {
                    let b0 = $load(b);
                    let b1 = $load(b.add($lanes));
                    for i in 0..MR {
                        let av = $set1(*a.add(i));
                        acc[2 * i] = $fma(av, b0, acc[2 * i]);
                        acc[2 * i + 1] = $fma(av, b1, acc[2 * i + 1]);
                    }
                    a = a.add(MR);
                    b = b.add(NR);
                }
            }
            for i in 0..MR {
                // SAFETY: row i of the tile, NR floats, inside the caller's bound.
                unsafe {
                    let row = c.add(i * ldc);
                    $store(row, $add($load(row), acc[2 * i]));
                    $store(row.add($lanes), $add($load(row.add($lanes)), acc[2 * i + 1]));
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
x86_micro_kernel!(
    /// AVX-512 12x32 micro-kernel: 24 accumulators, 2 B loads and 12 broadcasts per k.
    kernel_avx512, "avx512f", mr: 12, lanes: 16,
    zero: _mm512_setzero_ps, load: _mm512_loadu_ps, store: _mm512_storeu_ps,
    set1: _mm512_set1_ps, fma: _mm512_fmadd_ps, add: _mm512_add_ps
);

#[cfg(target_arch = "x86_64")]
x86_micro_kernel!(
    /// AVX2+FMA 6x16 micro-kernel: 12 accumulators, 2 B loads and 6 broadcasts per k.
    kernel_avx2, "avx2,fma", mr: 6, lanes: 8,
    zero: _mm256_setzero_ps, load: _mm256_loadu_ps, store: _mm256_storeu_ps,
    set1: _mm256_set1_ps, fma: _mm256_fmadd_ps, add: _mm256_add_ps
);

/// Mat-vec with B's columns contiguous along k: `c[i, j] = dot(A[i, :], B[:, j])`.
#[allow(clippy::too_many_arguments)]
fn gemv_dot(
    a: &[f32],
    a0: usize,
    ars: usize,
    b: &[f32],
    b0: usize,
    bcs: usize,
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
    parallel: bool,
) {
    for i in 0..m {
        let arow = &a[a0 + i * ars..a0 + i * ars + k];
        let crow = &mut c[i * n..(i + 1) * n];
        let f = |(j, cj): (usize, &mut f32)| {
            let col = &b[b0 + j * bcs..b0 + j * bcs + k];
            *cj = simd::dot(arow, col);
        };
        if parallel && n >= 64 {
            super::par_chunks(crow, 16, 1, |ci, cc| cc.iter_mut().enumerate().for_each(|(j, cj)| f((ci * 16 + j, cj))));
        } else {
            crow.iter_mut().enumerate().for_each(f);
        }
    }
}

/// Mat-vec with B's rows contiguous: `c[i, :] = sum_p A[i, p] * B[p, :]`.
#[allow(clippy::too_many_arguments)]
fn gemv_axpy(
    a: &[f32],
    a0: usize,
    ars: usize,
    acs: usize,
    b: &[f32],
    b0: usize,
    brs: usize,
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
    parallel: bool,
) {
    const CH: usize = 512;
    for i in 0..m {
        let crow = &mut c[i * n..(i + 1) * n];
        let f = |(ci, cc): (usize, &mut [f32])| {
            cc.fill(0.0);
            let j0 = ci * CH;
            for p in 0..k {
                let av = a[a0 + i * ars + p * acs];
                let src = b0 + p * brs + j0;
                simd::axpy(av, &b[src..src + cc.len()], cc);
            }
        };
        if parallel {
            super::par_chunks(crow, CH, 1, |ci, cc| f((ci, cc)));
        } else {
            crow.chunks_mut(CH).enumerate().for_each(f);
        }
    }
}
