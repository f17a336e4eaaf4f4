//! Weight repacking: GGML blocks → 32-column tiles in the layout `format.rs` describes.
//!
//! A matrix may stack parts of different formats along n (a Q4_K_M file stores `attn_q`
//! and `attn_k` as Q4_K and `attn_v` as Q6_K): each run of one format is a [`Segment`]
//! of whole tiles with its own layout, so every weight is the file's own and one matmul
//! still covers q, k and v. `n` is padded to whole tiles with zero columns whose results
//! are never written.

use crate::align::AlignedBuf;
use crate::block_quant::quantize_row_q8_0_ggml;
use crate::error::KernelError;
use crate::format::{quant_place, Segment, WeightFormat, QK, SCALES, TILE};
use crate::simd::Weights;
use half::f16;

/// A weight matrix repacked for the kernels. Immutable; `Send + Sync`.
pub struct PackedMatrix {
    n: usize,
    k: usize,
    segments: Vec<Segment>,
    buf: AlignedBuf,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("formats", &self.formats().collect::<Vec<_>>())
            .field("n", &self.n)
            .field("k", &self.k)
            .finish()
    }
}

fn check_shape(format: WeightFormat, n: usize, k: usize) -> Result<(), KernelError> {
    let block = format.block_values();
    if k == 0 || !k.is_multiple_of(block) {
        return Err(KernelError::BadK {
            k,
            block,
            format: format.name(),
        });
    }
    if n == 0 {
        return Err(KernelError::EmptyMatrix);
    }
    // The packed buffer (padded n × k bytes plus scales) must stay addressable.
    n.checked_add(TILE)
        .and_then(|p| p.checked_mul(k))
        .and_then(|p| p.checked_mul(2))
        .map(|_| ())
        .ok_or(KernelError::ShapeOverflow { n, k })
}

impl PackedMatrix {
    /// `bytes`: n rows × (k / block values) GGML blocks of `format`, row-major as stored
    /// in a GGUF file.
    pub fn from_ggml(
        format: WeightFormat,
        bytes: &[u8],
        n: usize,
        k: usize,
    ) -> Result<Self, KernelError> {
        Self::stack(&[(format, bytes, n)], k)
    }

    /// Matrices sharing `k`, stacked along n in order: `(format, bytes, n)` each, bytes as
    /// for [`PackedMatrix::from_ggml`]. Consecutive parts of one format are packed as one;
    /// where the format changes, the columns before must fill whole 32-column tiles.
    pub fn stack(parts: &[(WeightFormat, &[u8], usize)], k: usize) -> Result<Self, KernelError> {
        // Runs of one format: (format, first part, end part, columns).
        let mut runs: Vec<(WeightFormat, usize, usize, usize)> = Vec::new();
        for (i, &(format, bytes, n)) in parts.iter().enumerate() {
            check_shape(format, n, k)?;
            let expected = n * (k / format.block_values()) * format.block_bytes();
            if bytes.len() != expected {
                return Err(KernelError::WeightBytes {
                    expected,
                    actual: bytes.len(),
                });
            }
            match runs.last_mut() {
                Some(run) if run.0 == format => {
                    run.2 = i + 1;
                    run.3 += n;
                }
                last => {
                    if let Some(&mut (_, _, _, cols)) = last {
                        if !cols.is_multiple_of(TILE) {
                            return Err(KernelError::RaggedStack { columns: cols });
                        }
                    }
                    runs.push((format, i, i + 1, n));
                }
            }
        }
        let Some(&(first, ..)) = runs.first() else {
            return Err(KernelError::EmptyMatrix);
        };
        let n: usize = runs.iter().map(|r| r.3).sum();
        check_shape(first, n, k)?;
        let kb = k / QK;
        let (mut segments, mut tile0, mut offset) = (Vec::new(), 0, 0);
        for &(format, _, _, cols) in &runs {
            let tiles = cols.div_ceil(TILE);
            segments.push(Segment {
                format,
                tile0,
                tiles,
                cols,
                offset,
            });
            tile0 += tiles;
            offset += tiles * kb * format.record_bytes();
        }
        let mut buf = AlignedBuf::zeroed(offset);
        let dst = buf.as_mut_slice();
        for (seg, &(format, p0, p1, _)) in segments.iter().zip(&runs) {
            let tile_bytes = kb * format.record_bytes();
            let row_bytes = k / format.block_values() * format.block_bytes();
            let rows = parts[p0..p1]
                .iter()
                .flat_map(|p| p.1.chunks_exact(row_bytes));
            for (c, row) in rows.enumerate() {
                let at = seg.offset + (c / TILE) * tile_bytes;
                pack_row(format, row, c % TILE, &mut dst[at..at + tile_bytes]);
            }
        }
        Ok(PackedMatrix {
            n,
            k,
            segments,
            buf,
        })
    }

    /// Quantize f32 weights `[n][k]` to Q8_0 exactly as ggml does and pack them.
    pub fn from_f32(w: &[f32], n: usize, k: usize) -> Result<Self, KernelError> {
        check_shape(WeightFormat::Q8_0, n, k)?;
        if w.len() != n * k {
            return Err(KernelError::WeightValues {
                expected: n * k,
                actual: w.len(),
            });
        }
        let bs = WeightFormat::Q8_0.block_bytes();
        let mut bytes = vec![0u8; n * (k / QK) * bs];
        for (x, out) in w.chunks_exact(QK).zip(bytes.chunks_exact_mut(bs)) {
            quantize_row_q8_0_ggml(x, out);
        }
        Self::from_ggml(WeightFormat::Q8_0, &bytes, n, k)
    }

    /// Output dimension (rows of W, columns of y).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The formats of the stacked parts in column order, with their column counts (one
    /// entry for a matrix of one format).
    pub fn formats(&self) -> impl Iterator<Item = (WeightFormat, usize)> + '_ {
        self.segments.iter().map(|s| (s.format, s.cols))
    }

    /// Bytes of packed data (what one pass over the matrix reads).
    pub fn packed_bytes(&self) -> usize {
        self.buf.as_slice().len()
    }

    /// The 32-column tiles the matrix is stored in: the unit of work of a matmul.
    pub fn n_tiles(&self) -> usize {
        self.n.div_ceil(TILE)
    }

    /// How many tiles hold `cols` (what `Executor::matmul_columns` computes per row).
    pub fn tiles_of(&self, cols: &[u32]) -> usize {
        let mut tiles: Vec<usize> = cols.iter().map(|&c| c as usize / TILE).collect();
        tiles.sort_unstable();
        tiles.dedup();
        tiles.len()
    }

    /// Byte offset of tile `t` (`t ≤ n_tiles`: the end of the data for `n_tiles`).
    pub(crate) fn tile_offset(&self, t: usize) -> usize {
        let kb = self.k / QK;
        self.segments
            .iter()
            .find(|s| t < s.tile0 + s.tiles)
            .map_or(self.packed_bytes(), |s| {
                s.offset + (t - s.tile0) * kb * s.format.record_bytes()
            })
    }

    /// The matrix as a kernel job reads it.
    pub(crate) fn view(&self) -> Weights<'_> {
        Weights {
            data: self.buf.as_slice(),
            segments: &self.segments,
            n: self.n,
            k: self.k,
        }
    }

    pub(crate) fn data(&self) -> &[u8] {
        self.buf.as_slice()
    }
}

fn f16_bits(b: &[u8], at: usize) -> [u8; 2] {
    f16::from_le_bytes([b[at], b[at + 1]]).to_ne_bytes()
}

/// One 32-value block of one column as the kernels use it: unsigned quants and the
/// block's own scale bytes.
struct Block {
    /// Quants (Q8_0: q + 128; the others unsigned as stored).
    q: [u8; QK],
    /// Q4_K and Q5_K: 6-bit scale and min; Q6_K: the two i8 scales of its 16-value halves.
    scales: [u8; 2],
}

/// Writes column `j` (0..32) of every group of one tile from one row of GGML blocks.
fn pack_row(format: WeightFormat, row: &[u8], j: usize, tile: &mut [u8]) {
    let (bs, gb) = (format.block_bytes(), format.group_bytes());
    for (gi, block) in row.chunks_exact(bs).enumerate() {
        let group = &mut tile[gi * gb..(gi + 1) * gb];
        // The block's f16 fields (d, then Q4_1's m or Q4_K's dmin) as the group's first
        // arrays of 32: the K formats' header, the block formats' record.
        for (i, &at) in format.f16_offsets().iter().enumerate() {
            let to = i * SCALES + 2 * j;
            group[to..to + 2].copy_from_slice(&f16_bits(block, at));
        }
        let (hdr, rb) = (format.header_bytes(), format.block_record_bytes());
        for b in 0..format.blocks_per_group() {
            let rec = &mut group[hdr + b * rb..hdr + (b + 1) * rb];
            write_block(format, &decode(format, block, b), j, rec);
        }
    }
}

/// Block `b` (of 32 values) of one GGML block.
fn decode(format: WeightFormat, block: &[u8], b: usize) -> Block {
    let mut q = [0u8; QK];
    let mut scales = [0u8; 2];
    match format {
        WeightFormat::Q8_0 => {
            for (o, &v) in q.iter_mut().zip(&block[2..34]) {
                // q + 128 as unsigned is a flip of the sign bit.
                *o = v ^ 0x80;
            }
        }
        WeightFormat::Q4_0 | WeightFormat::Q4_1 => {
            let qs = &block[block.len() - 16..];
            for i in 0..16 {
                (q[i], q[i + 16]) = (qs[i] & 15, qs[i] >> 4);
            }
        }
        WeightFormat::Q5_0 => {
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            let qs = &block[6..22];
            for i in 0..16 {
                let fifth = |k: usize| (((qh >> k) & 1) << 4) as u8;
                (q[i], q[i + 16]) = ((qs[i] & 15) | fifth(i), (qs[i] >> 4) | fifth(i + 16));
            }
        }
        WeightFormat::Q4_K | WeightFormat::Q5_K => {
            // Blocks 2m and 2m + 1 are the low and high nibbles of qs[32m..32m + 32]; Q5_K's
            // qs follow its 32 bytes of fifth bits, block b's being bit b of qh[l].
            let five = format == WeightFormat::Q5_K;
            let at = if five { 48 } else { 16 };
            let qs = &block[at + 32 * (b / 2)..][..32];
            let shift = 4 * (b % 2);
            for (l, (o, &v)) in q.iter_mut().zip(qs).enumerate() {
                let fifth = if five {
                    ((block[16 + l] >> b) & 1) << 4
                } else {
                    0
                };
                *o = ((v >> shift) & 15) | fifth;
            }
            let s: &[u8; 12] = block[4..16].try_into().expect("12 scale bytes");
            scales = scale_min_k4(b, s);
        }
        WeightFormat::Q6_K => {
            // Value v = 128h + 32m + l (l < 32) of the super-block: low nibble from
            // ql[64h + l + 32(m % 2)] (the high nibble for m ≥ 2), high bits from
            // qh[32h + l] at bit 2m; scale scales[v / 16].
            let (h, m) = (b / 4, b % 4);
            for (l, o) in q.iter_mut().enumerate() {
                let low = block[64 * h + l + 32 * (m % 2)] >> (4 * (m / 2));
                let high = (block[128 + 32 * h + l] >> (2 * m)) & 3;
                *o = (low & 15) | (high << 4);
            }
            scales = [block[192 + 2 * b], block[192 + 2 * b + 1]];
        }
    }
    Block { q, scales }
}

/// ggml's `get_scale_min_k4`: scale and min of sub-block `j` (0..8) from the 12 packed
/// bytes of Q4_K and Q5_K (6 bits each; sub-blocks 4..8 borrow their top bits from bytes
/// 0..8).
fn scale_min_k4(j: usize, q: &[u8; 12]) -> [u8; 2] {
    if j < 4 {
        [q[j] & 63, q[j + 4] & 63]
    } else {
        [
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        ]
    }
}

/// Writes column `j` of one block record (its bytes arrive zeroed).
fn write_block(format: WeightFormat, block: &Block, j: usize, rec: &mut [u8]) {
    if format.is_k() {
        rec[j] = block.scales[0];
        rec[TILE + j] = block.scales[1];
    }
    for (kk, &v) in block.q.iter().enumerate() {
        let place = quant_place(format, j, kk);
        let (at, shift, mask) = place.low;
        rec[at] |= (v & mask) << shift;
        match place.high {
            Some((at, shift, mask)) => rec[at] |= ((v >> 4) & mask) << shift,
            None => debug_assert!(v <= mask),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::quant_at;

    #[test]
    fn q8_layout() {
        // One column (j = 17: group 1, column 1), one block, q = 0..32 - 16.
        let mut block = vec![0u8; 34];
        block[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        for i in 0..32 {
            block[2 + i] = (i as i8 - 16) as u8;
        }
        let mut rec = vec![0u8; WeightFormat::Q8_0.record_bytes()];
        pack_row(WeightFormat::Q8_0, &block, 17, &mut rec);
        assert_eq!(
            f16::from_ne_bytes(rec[34..36].try_into().unwrap()).to_f32(),
            0.5
        );
        for kk in 0..32 {
            let (p, i) = (kk / 4, kk % 4);
            let byte = rec[64 + (2 * p + 1) * 64 + 4 + i];
            assert_eq!(byte as i32 - 128, kk as i32 - 16);
        }
    }

    /// Every value written through the layout reads back, for every format, column and
    /// k, with other columns' values around it.
    #[test]
    fn every_quant_reads_back() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for format in WeightFormat::ALL {
            let bits = match format {
                WeightFormat::Q8_0 => 8,
                WeightFormat::Q5_0 | WeightFormat::Q5_K => 5,
                WeightFormat::Q6_K => 6,
                _ => 4,
            };
            let mut rec = vec![0u8; format.block_record_bytes()];
            let mut want = [[0u8; QK]; TILE];
            for (j, col) in want.iter_mut().enumerate() {
                let mut q = [0u8; QK];
                for v in q.iter_mut() {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    *v = (s >> 32) as u8 & ((1u16 << bits) - 1) as u8;
                }
                *col = q;
                let block = Block { q, scales: [0; 2] };
                write_block(format, &block, j, &mut rec);
            }
            for (j, col) in want.iter().enumerate() {
                for (kk, &v) in col.iter().enumerate() {
                    assert_eq!(quant_at(format, &rec, j, kk), v, "{format:?} {j} {kk}");
                }
            }
        }
    }
}
