//! Weight layouts repacked at load for the machine: blocks of sixteen rows interleaved so
//! that one 64-byte load feeds sixteen rows' integer dot products at once and the per-row
//! scale work is shared. Three layouts exist, each exactly as large as the file's rows:
//!
//! - [`WeightFormat::Q4KX16`](super::WeightFormat::Q4KX16): Q4_K. Super-block `b` of a group
//!   of sixteen rows is 2304 bytes:
//!
//!   | bytes | content |
//!   | --- | --- |
//!   | `0..32` | `d` of rows 0..16 (f16) |
//!   | `32..64` | `dmin` of rows 0..16 (f16) |
//!   | `64..256` | the twelve packed scale bytes, transposed: byte `i` of row `r` at `64 + 16 i + r` |
//!   | `256..2304` | the nibbles: for chunk `c` (32 bytes of a row: sub-blocks `2c` low, `2c + 1` high) and step `t` (4 bytes), row `r`'s bytes `32c + 4t .. 32c + 4t + 4` at `256 + 64 (8c + t) + 4r` |
//!
//! - [`WeightFormat::Q6KX16`](super::WeightFormat::Q6KX16): Q6_K. Super-block `b` of a group
//!   is 3360 bytes: `d` of rows 0..16 (f16) at `0..32`; the sixteen int8 scales transposed
//!   (scale `g` of row `r` at `32 + 16 g + r`); then, in the order the kernel reads them, for
//!   half `c` (128 values) and step `t` (0..8) 192 bytes: the four low-bit bytes
//!   `64c + 4t ..` of each row, the four `64c + 32 + 4t ..`, and the four high-bit bytes
//!   `32c + 4t ..` (row `r`'s at `4 r` in each 64).
//!
//! - [`WeightFormat::Q8_0X16`](super::WeightFormat::Q8_0X16): Q8_0, two blocks at a time.
//!   Blocks `2b` and `2b + 1` (64 values) of a group are 1088 bytes, seventeen cache lines:
//!   `d` of rows 0..16 (f16) of the first block at `0..32` and of the second at `32..64`,
//!   then the int8 of the first block, for step `t` (4 values) row `r`'s four at
//!   `64 + 64 t + 4 r`, then those of the second at `576 + 64 t + 4 r`. (One block at a time
//!   would be 544 bytes, and every other block's 64-byte loads would straddle two lines.)
//!
//! A matrix is cut into groups of sixteen rows, each stored as its blocks in order. The
//! values and the products are those of the plain rows (the integer path of
//! [`super::weights`] at every batch size); only where the bytes lie differs.
//! [`interleave`] and [`gather_row`] convert, and the scalar spec reads the gathered rows.

use super::qdot::Q8_0_BYTES;
use super::qdot_k::QK_K;

/// Rows per interleaved group.
pub const X16: usize = 16;

/// Bytes of one Q4_K super-block.
const Q4K_BYTES: usize = 144;

/// Offset of the transposed scale bytes in an interleaved Q4_K super-block.
pub const X16_SCALES: usize = 64;

/// Offset of the nibbles in an interleaved Q4_K super-block.
pub const X16_QS: usize = 256;

/// Bytes of one interleaved Q4_K super-block (sixteen rows).
pub const X16_BLOCK: usize = X16 * Q4K_BYTES;

/// Bytes of one interleaved pair of Q8_0 blocks (sixteen rows, 64 values each).
pub const X16_Q8_BLOCK: usize = X16 * 2 * Q8_0_BYTES;

/// Offset of the second block's int8 in an interleaved pair of Q8_0 blocks.
pub const X16_Q8_SECOND: usize = 64 + 8 * 64;

/// Bytes of one Q6_K super-block.
const Q6K_BYTES: usize = 210;

/// Bytes of one interleaved Q6_K super-block (sixteen rows).
pub const X16_Q6_BLOCK: usize = X16 * Q6K_BYTES;

/// Offset of the transposed scales in an interleaved Q6_K super-block.
pub const X16_Q6_SCALES: usize = 32;

/// Offset of the bits in an interleaved Q6_K super-block.
pub const X16_Q6_QS: usize = 288;

/// The plain block formats that have an interleaved layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interleaved {
    /// Q4_K ([`super::WeightFormat::Q4KX16`]).
    Q4K,
    /// Q6_K ([`super::WeightFormat::Q6KX16`]).
    Q6K,
    /// Q8_0 ([`super::WeightFormat::Q8_0X16`]).
    Q8_0,
}

impl Interleaved {
    /// Values per block of one row (for Q8_0, a pair of the format's blocks: the unit the
    /// layout interleaves).
    pub fn block(self) -> usize {
        match self {
            Interleaved::Q4K | Interleaved::Q6K => QK_K,
            Interleaved::Q8_0 => 64,
        }
    }

    /// Bytes per block of one row (for Q8_0, a pair of the format's blocks).
    pub fn block_bytes(self) -> usize {
        match self {
            Interleaved::Q4K => Q4K_BYTES,
            Interleaved::Q6K => Q6K_BYTES,
            Interleaved::Q8_0 => 2 * Q8_0_BYTES,
        }
    }

    /// Whether a `[rows, cols]` matrix can take this layout: whole groups of sixteen rows and
    /// whole blocks.
    pub fn fits(self, rows: usize, cols: usize) -> bool {
        rows > 0 && rows.is_multiple_of(X16) && cols > 0 && cols.is_multiple_of(self.block())
    }

    /// Where byte `i` of row `r`'s block lies inside the interleaved block.
    fn offset(self, r: usize, i: usize) -> usize {
        let quad = |base: usize, i: usize| base + 64 * (i / 4) + 4 * r + i % 4;
        match (self, i) {
            (Interleaved::Q6K, 0..128) => {
                let (c, p, t) = (i / 64, (i % 64) / 32, (i % 32) / 4);
                X16_Q6_QS + 192 * (8 * c + t) + 64 * p + 4 * r + i % 4
            }
            (Interleaved::Q6K, 128..192) => {
                let q = i - 128;
                X16_Q6_QS + 192 * (8 * (q / 32) + (q % 32) / 4) + 128 + 4 * r + q % 4
            }
            (Interleaved::Q6K, 192..208) => X16_Q6_SCALES + X16 * (i - 192) + r,
            (Interleaved::Q6K, _) => 2 * r + (i - 208),
            (_, 0..2) => 2 * r + i,
            (Interleaved::Q8_0, 2..34) => quad(64, i - 2),
            (Interleaved::Q8_0, 34..36) => 32 + 2 * r + (i - 34),
            (Interleaved::Q8_0, _) => quad(X16_Q8_SECOND, i - 36),
            (Interleaved::Q4K, 2..4) => 32 + 2 * r + (i - 2),
            (Interleaved::Q4K, 4..16) => X16_SCALES + X16 * (i - 4) + r,
            (Interleaved::Q4K, _) => {
                let q = i - 16;
                let (c, t, byte) = (q / 32, (q % 32) / 4, q % 4);
                X16_QS + 64 * (8 * c + t) + 4 * r + byte
            }
        }
    }
}

/// Repacks a row-major matrix `[rows, cols]` of `f`'s blocks (`src`) into the interleaved
/// layout, into `out` of the same length. Panics unless [`Interleaved::fits`] and the lengths
/// agree (callers check).
pub fn interleave(f: Interleaved, rows: usize, cols: usize, src: &[u8], out: &mut [u8]) {
    let (nb, bb) = (cols / f.block(), f.block_bytes());
    let row_bytes = nb * bb;
    assert!(
        (rows == 0 || f.fits(rows, cols)) && src.len() == rows * row_bytes && out.len() == src.len(),
        "interleave: sizes"
    );
    let offsets: Vec<usize> = (0..X16 * bb).map(|ri| f.offset(ri / bb, ri % bb)).collect();
    for g in 0..rows / X16 {
        for b in 0..nb {
            let dst = &mut out[(g * nb + b) * X16 * bb..(g * nb + b + 1) * X16 * bb];
            for r in 0..X16 {
                let row = g * X16 + r;
                let blk = &src[row * row_bytes + b * bb..row * row_bytes + (b + 1) * bb];
                for (v, o) in blk.iter().zip(&offsets[r * bb..(r + 1) * bb]) {
                    dst[*o] = *v;
                }
            }
        }
    }
}

/// Repacks groups `g0..` of a row-major matrix into `out`, the interleaved bytes of those
/// groups (whole groups): [`interleave`] for a part of the matrix, so that a backend can
/// split the work.
pub fn interleave_groups(f: Interleaved, cols: usize, src: &[u8], g0: usize, out: &mut [u8]) {
    let (nb, bb) = (cols / f.block(), f.block_bytes());
    let group = X16 * nb * bb;
    assert!(cols.is_multiple_of(f.block()) && out.len().is_multiple_of(group.max(1)), "interleave_groups: sizes");
    let rows = out.len() / group.max(1) * X16;
    let src = &src[g0 * group..g0 * group + out.len()];
    interleave(f, rows, cols, src, out)
}

/// Gathers row `j` of an interleaved matrix of `f`'s blocks with `cols` columns back into its
/// plain bytes (`out`, `cols / block * block_bytes` bytes).
pub fn gather_row(f: Interleaved, data: &[u8], cols: usize, j: usize, out: &mut [u8]) {
    let (nb, bb) = (cols / f.block(), f.block_bytes());
    let (g, r) = (j / X16, j % X16);
    assert!(out.len() == nb * bb && data.len() >= (g + 1) * nb * X16 * bb, "gather_row: sizes");
    for b in 0..nb {
        let blk = &data[(g * nb + b) * X16 * bb..(g * nb + b + 1) * X16 * bb];
        for (i, o) in out[b * bb..(b + 1) * bb].iter_mut().enumerate() {
            *o = blk[f.offset(r, i)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [Interleaved; 3] = [Interleaved::Q4K, Interleaved::Q6K, Interleaved::Q8_0];

    #[test]
    fn offsets_cover_the_block_once() {
        for f in BOTH {
            let bb = f.block_bytes();
            let mut seen = vec![false; X16 * bb];
            for r in 0..X16 {
                for i in 0..bb {
                    let o = f.offset(r, i);
                    assert!(!seen[o], "{f:?}: offset {o} twice");
                    seen[o] = true;
                }
            }
            assert!(seen.iter().all(|s| *s), "{f:?}");
        }
        assert_eq!(Interleaved::Q4K.offset(3, 16 + 32 * 2 + 4 * 5 + 1), X16_QS + 64 * 21 + 13);
        assert_eq!(Interleaved::Q8_0.offset(3, 2 + 4 * 5 + 1), 64 + 64 * 5 + 13);
        assert_eq!(Interleaved::Q8_0.offset(3, 35), 32 + 7);
        assert_eq!(Interleaved::Q8_0.offset(3, 36 + 4 * 5 + 1), X16_Q8_SECOND + 64 * 5 + 13);
        assert_eq!(Interleaved::Q6K.offset(3, 128 + 32 + 4 * 5 + 1), X16_Q6_QS + 192 * 13 + 128 + 13);
        assert_eq!(Interleaved::Q6K.offset(3, 64 + 32 + 4 * 5 + 1), X16_Q6_QS + 192 * 13 + 64 + 13);
        assert_eq!(Interleaved::Q6K.offset(3, 209), 7);
    }

    #[test]
    fn gather_inverts_interleave() {
        for f in BOTH {
            let (rows, cols) = (32, 512);
            let row_bytes = cols / f.block() * f.block_bytes();
            let src: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 + i / 13) as u8).collect();
            let mut packed = vec![0u8; src.len()];
            interleave(f, rows, cols, &src, &mut packed);
            assert_ne!(packed, src);
            let mut row = vec![0u8; row_bytes];
            for j in 0..rows {
                gather_row(f, &packed, cols, j, &mut row);
                assert_eq!(row, src[j * row_bytes..(j + 1) * row_bytes], "{f:?} row {j}");
            }
        }
    }
}
