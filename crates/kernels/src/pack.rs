//! Weight repacking: GGML blocks → 32-column tiles laid out for `vpdpbusd`.
//!
//! Per (tile, k-block) one contiguous, 64-byte-aligned record:
//! - 32 × f16 block scales `d` (columns 0..32 of the tile, the file's own bits), and for
//!   Q4_1 then 32 × f16 mins: the kernels widen them to f32 (exact), so a record is no
//!   larger than the GGML blocks it holds and a forward streams the file's bytes, not
//!   20% more;
//! - the quants as 64-byte vectors, vector `(p, g)` at `quant_offset + (2p + g) · 64`,
//!   where `g` is the 16-column group and column `c` of the group owns bytes `4c..4c+4`:
//!   - Q8_0, `p` in 0..8: weights `q + 128` (unsigned) for k = 4p..4p+4;
//!   - Q4_0 / Q4_1, `p` in 0..4: byte = GGML byte `4p + i`, i.e. the low nibble holds
//!     k = 4p + i and the high nibble k = 16 + 4p + i, so one AND and one shift+AND give
//!     the unsigned operands for two k-quads.
//!
//! The 256-bit kernels read the same vectors as two halves (columns 0..8 and 8..16).
//! `n` is padded to whole tiles with zero columns whose results are never written.

use crate::align::AlignedBuf;
use crate::error::KernelError;
use crate::quant::{quantize_row_q8_0_ggml, QK};
use half::f16;

/// Output columns per tile.
pub(crate) const TILE: usize = 32;
/// Bytes of the f16 scale (or min) array of one record.
pub(crate) const SCALES: usize = TILE * 2;

/// GGML quantized weight formats this crate packs.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// f16 d, 16 bytes of nibbles: w = d · (nib − 8).
    Q4_0,
    /// f16 d, f16 m, 16 bytes of nibbles: w = d · nib + m.
    Q4_1,
    /// f16 d, 32 × i8: w = d · q.
    Q8_0,
}

impl WeightFormat {
    /// Every format, in declaration order ([`WeightFormat::index`]).
    pub const ALL: [WeightFormat; 3] = [WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q8_0];

    /// Its place in [`WeightFormat::ALL`]: for arrays with one entry per format.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The GGML type's name.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Q4_0 => "Q4_0",
            WeightFormat::Q4_1 => "Q4_1",
            WeightFormat::Q8_0 => "Q8_0",
        }
    }

    /// Bytes of one GGML block of 32 values.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_0 => 18,
            WeightFormat::Q4_1 => 20,
            WeightFormat::Q8_0 => 34,
        }
    }

    /// Offset of the quant vectors inside a packed record.
    pub(crate) fn quant_offset(self) -> usize {
        match self {
            WeightFormat::Q4_1 => 2 * SCALES,
            _ => SCALES,
        }
    }

    /// Bytes of one packed (tile, k-block) record; always a multiple of 64.
    pub(crate) fn record_bytes(self) -> usize {
        let quants = match self {
            WeightFormat::Q8_0 => TILE * QK,
            _ => TILE * QK / 2,
        };
        self.quant_offset() + quants
    }
}

/// A weight matrix repacked for the kernels. Immutable; `Send + Sync`.
pub struct PackedMatrix {
    format: WeightFormat,
    n: usize,
    k: usize,
    buf: AlignedBuf,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("format", &self.format)
            .field("n", &self.n)
            .field("k", &self.k)
            .finish()
    }
}

fn check_shape(n: usize, k: usize) -> Result<(), KernelError> {
    if k == 0 || !k.is_multiple_of(QK) {
        return Err(KernelError::BadK { k });
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
    /// `bytes`: n rows × (k/32) GGML blocks of `format`, row-major as stored in a GGUF file.
    pub fn from_ggml(
        format: WeightFormat,
        bytes: &[u8],
        n: usize,
        k: usize,
    ) -> Result<Self, KernelError> {
        check_shape(n, k)?;
        let kb = k / QK;
        let bs = format.block_bytes();
        let expected = n * kb * bs;
        if bytes.len() != expected {
            return Err(KernelError::WeightBytes {
                expected,
                actual: bytes.len(),
            });
        }
        let rec = format.record_bytes();
        let n_tiles = n.div_ceil(TILE);
        let mut buf = AlignedBuf::zeroed(n_tiles * kb * rec);
        let dst = buf.as_mut_slice();
        for (c, row) in bytes.chunks_exact(kb * bs).enumerate() {
            let (t, j) = (c / TILE, c % TILE);
            for (b, block) in row.chunks_exact(bs).enumerate() {
                let r = &mut dst[(t * kb + b) * rec..][..rec];
                pack_block(format, block, j, r);
            }
        }
        Ok(PackedMatrix { format, n, k, buf })
    }

    /// Quantize f32 weights `[n][k]` to Q8_0 exactly as ggml does and pack them.
    pub fn from_f32(w: &[f32], n: usize, k: usize) -> Result<Self, KernelError> {
        check_shape(n, k)?;
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

    pub fn format(&self) -> WeightFormat {
        self.format
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

    pub(crate) fn data(&self) -> &[u8] {
        self.buf.as_slice()
    }
}

fn f16_le(b: &[u8], at: usize) -> f16 {
    f16::from_le_bytes([b[at], b[at + 1]])
}

/// Writes column `j` (0..32) of one record from one GGML block.
fn pack_block(format: WeightFormat, block: &[u8], j: usize, rec: &mut [u8]) {
    let (g, c) = (j / 16, j % 16);
    rec[2 * j..2 * j + 2].copy_from_slice(&f16_le(block, 0).to_ne_bytes());
    let qo = format.quant_offset();
    let qs = match format {
        WeightFormat::Q4_1 => {
            let m = f16_le(block, 2).to_ne_bytes();
            rec[SCALES + 2 * j..SCALES + 2 * j + 2].copy_from_slice(&m);
            &block[4..]
        }
        _ => &block[2..],
    };
    let quads = match format {
        WeightFormat::Q8_0 => 8,
        _ => 4,
    };
    for p in 0..quads {
        let v = &mut rec[qo + (2 * p + g) * 64 + 4 * c..][..4];
        for i in 0..4 {
            let q = qs[4 * p + i];
            // Q8_0: q + 128 as unsigned is a flip of the sign bit.
            v[i] = if format == WeightFormat::Q8_0 {
                q ^ 0x80
            } else {
                q
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sizes_are_whole_lines() {
        for f in [WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q8_0] {
            assert_eq!(f.record_bytes() % 64, 0);
        }
        // No larger than the GGML blocks they hold (32 columns × 34, 20, 18 bytes).
        assert_eq!(WeightFormat::Q8_0.record_bytes(), 1088);
        assert_eq!(WeightFormat::Q4_1.record_bytes(), 640);
        assert_eq!(WeightFormat::Q4_0.record_bytes(), 576);
    }

    #[test]
    fn q8_layout() {
        // One column (j = 17: group 1, column 1), one block, q = 0..32 - 16.
        let mut block = vec![0u8; 34];
        block[..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        for i in 0..32 {
            block[2 + i] = (i as i8 - 16) as u8;
        }
        let mut rec = vec![0u8; WeightFormat::Q8_0.record_bytes()];
        pack_block(WeightFormat::Q8_0, &block, 17, &mut rec);
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
}
