//! Weight layouts repacked at load for the machine: [`WeightFormat::Q4KX16`], Q4_K
//! super-blocks of sixteen rows interleaved so that one 64-byte load feeds sixteen rows'
//! integer dot products at once and the per-row scale work is shared.
//!
//! A Q4_K matrix whose row count is a multiple of [`X16`] is cut into groups of sixteen
//! rows; each group is stored as its super-blocks in order, and super-block `b` of a group is
//! 2304 bytes (sixteen Q4_K blocks' worth, so the repacked matrix is exactly as large as the
//! file's):
//!
//! | bytes | content |
//! | --- | --- |
//! | `0..32` | `d` of rows 0..16 (f16) |
//! | `32..64` | `dmin` of rows 0..16 (f16) |
//! | `64..256` | the twelve packed scale bytes, transposed: byte `i` of row `r` at `64 + 16 i + r` |
//! | `256..2304` | the nibbles: for chunk `c` (32 bytes of a row: sub-blocks `2c` low, `2c + 1` high) and step `t` (4 bytes), row `r`'s bytes `32c + 4t .. 32c + 4t + 4` at `256 + 64 (8c + t) + 4r` |
//!
//! The values and the products are those of the Q4_K rows (the integer path of
//! [`super::weights`], with Q8_K activations, at every batch size); only where the bytes lie
//! differs. [`interleave_q4k`] and [`gather_row_q4k`] convert, the scalar spec reads the
//! gathered rows.

use super::qdot_k::QK_K;

/// Rows per interleaved group.
pub const X16: usize = 16;

/// Bytes of one Q4_K super-block.
const Q4K_BYTES: usize = 144;

/// Offset of the transposed scale bytes in an interleaved super-block.
pub const X16_SCALES: usize = 64;

/// Offset of the nibbles in an interleaved super-block.
pub const X16_QS: usize = 256;

/// Bytes of one interleaved super-block (sixteen rows).
pub const X16_BLOCK: usize = X16 * Q4K_BYTES;

/// Whether a `[rows, cols]` Q4_K matrix can take the interleaved layout.
pub fn fits_x16(rows: usize, cols: usize) -> bool {
    rows > 0 && rows.is_multiple_of(X16) && cols > 0 && cols.is_multiple_of(QK_K)
}

/// Where byte `i` of row `r`'s Q4_K super-block lies inside the interleaved super-block.
fn x16_offset(r: usize, i: usize) -> usize {
    match i {
        0..2 => 2 * r + i,
        2..4 => 32 + 2 * r + (i - 2),
        4..16 => X16_SCALES + X16 * (i - 4) + r,
        _ => {
            let q = i - 16;
            let (c, t, byte) = (q / 32, (q % 32) / 4, q % 4);
            X16_QS + 64 * (8 * c + t) + 4 * r + byte
        }
    }
}

/// Repacks a row-major Q4_K matrix `[rows, cols]` (`src`, `rows * cols / 256 * 144` bytes)
/// into the interleaved layout, into `out` of the same length. The caller checks
/// [`fits_x16`] and the lengths.
pub fn interleave_q4k(rows: usize, cols: usize, src: &[u8], out: &mut [u8]) {
    let nb = cols / QK_K;
    let row_bytes = nb * Q4K_BYTES;
    assert!(fits_x16(rows, cols) && src.len() == rows * row_bytes && out.len() == src.len(), "interleave_q4k: sizes");
    for g in 0..rows / X16 {
        for b in 0..nb {
            let dst = &mut out[(g * nb + b) * X16_BLOCK..(g * nb + b + 1) * X16_BLOCK];
            for r in 0..X16 {
                let row = g * X16 + r;
                let blk = &src[row * row_bytes + b * Q4K_BYTES..row * row_bytes + (b + 1) * Q4K_BYTES];
                for (i, v) in blk.iter().enumerate() {
                    dst[x16_offset(r, i)] = *v;
                }
            }
        }
    }
}

/// Gathers row `j` of an interleaved matrix with `cols` columns back into its Q4_K bytes
/// (`out`, `cols / 256 * 144` bytes).
pub fn gather_row_q4k(data: &[u8], cols: usize, j: usize, out: &mut [u8]) {
    let nb = cols / QK_K;
    let (g, r) = (j / X16, j % X16);
    assert!(out.len() == nb * Q4K_BYTES && data.len() >= (g + 1) * nb * X16_BLOCK, "gather_row_q4k: sizes");
    for b in 0..nb {
        let blk = &data[(g * nb + b) * X16_BLOCK..(g * nb + b + 1) * X16_BLOCK];
        for (i, o) in out[b * Q4K_BYTES..(b + 1) * Q4K_BYTES].iter_mut().enumerate() {
            *o = blk[x16_offset(r, i)];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_cover_the_block_once() {
        let mut seen = vec![false; X16_BLOCK];
        for r in 0..X16 {
            for i in 0..Q4K_BYTES {
                let o = x16_offset(r, i);
                assert!(!seen[o], "offset {o} twice");
                seen[o] = true;
            }
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn gather_inverts_interleave() {
        let (rows, cols) = (32, 512);
        let src: Vec<u8> = (0..rows * cols / QK_K * Q4K_BYTES).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut packed = vec![0u8; src.len()];
        interleave_q4k(rows, cols, &src, &mut packed);
        assert_ne!(packed, src);
        let mut row = vec![0u8; cols / QK_K * Q4K_BYTES];
        for j in 0..rows {
            gather_row_q4k(&packed, cols, j, &mut row);
            assert_eq!(row, src[j * row.len()..(j + 1) * row.len()], "row {j}");
        }
    }
}
