//! The kernels' format vocabulary: which GGML weight formats they run natively, how a
//! packed tile of each is laid out, and the per-block activation metadata. A leaf: it
//! imports nothing from the crate, and packing, quantization and every SIMD path import
//! it, so the layout is written down once.
//!
//! A matrix is packed in 32-column tiles. Along k, a tile is a run of *groups*, each one
//! contiguous and 64-byte aligned: a group holds one 32-value block for the block formats
//! (Q4_0, Q4_1, Q5_0, Q8_0) and one 256-value super-block for the K formats (Q4_K, Q5_K,
//! Q6_K).
//! A group starts with a header (the K formats' f16 super-block scales of the 32 columns),
//! then one *block record* per 32 values of k: that block's per-column scales, then its
//! quants as 64-byte vectors, vector `(p, g)` at `quant_offset + (2p + g) · 64`, where `g`
//! is the 16-column half of the tile and column `c` of the half owns bytes `4c..4c+4`.
//!
//! | format | header | block record | bytes per column and 32 values |
//! |---|---|---|---|
//! | Q8_0 | - | 32 f16 d, 8 vectors of q + 128 | 34 (the file's 34) |
//! | Q4_0 | - | 32 f16 d, 4 nibble vectors | 18 (18) |
//! | Q4_1 | - | 32 f16 d, 32 f16 m, 4 nibble vectors | 20 (20) |
//! | Q5_0 | - | 32 f16 d, 4 nibble vectors, 2 fifth-bit vectors | 22 (22) |
//! | Q4_K | 32 f16 d, 32 f16 dmin | 32 u8 scales, 32 u8 mins, 4 nibble vectors | 18.5 (18) |
//! | Q5_K | 32 f16 d, 32 f16 dmin | as Q4_K, then 2 fifth-bit vectors | 22.5 (22) |
//! | Q6_K | 32 f16 d | 2 × 32 i8 scales, 4 nibble vectors, 4 high-bit vectors | 26.25 (26.25) |
//!
//! Nibble vectors: byte `4c + i` of vector `(p, g)` holds value `k = 4p + i` in its low
//! nibble and `k = 16 + 4p + i` in its high one, so one AND and one shift+AND give the
//! unsigned operands of two k-quads. The extra bits of the wider formats sit in vectors
//! of the same byte positions, bit-planed so that a shift and an AND move them into place:
//! - Q5_0 and Q5_K, fifth-bit vector `g` (after the nibbles): bit `p` of byte `4c + i` is
//!   the fifth bit of `k = 4p + i`, bit `4 + p` that of `k = 16 + 4p + i`;
//! - Q6_K, high vector `(h, g)` at `576 + (2h + g) · 64` of the block record: byte
//!   `4c + i` holds, two bits each from the bottom, the high bits of `k = 4p + i`,
//!   `16 + 4p + i`, `4(p + 1) + i` and `16 + 4(p + 1) + i` for `p = 2h`.
//!
//! Q4_K's and Q5_K's unpacked 6-bit scales cost 0.5 bytes per 32 values more than the
//! file's 12 packed bytes per 256 (2.8% and 2.3%); unpacking them in the kernel would cost
//! more than reading them. Every value is the file's own, exactly.

/// Values per activation block and per block record (GGML `QK`).
pub(crate) const QK: usize = 32;
/// Output columns per tile.
pub(crate) const TILE: usize = 32;
/// Bytes of one array of 32 f16 (a block's scales or mins, a super-block's d or dmin).
pub(crate) const SCALES: usize = TILE * 2;
/// Values of a K-format super-block.
pub(crate) const SUPER: usize = 256;

/// GGML quantized weight formats this crate packs and runs natively.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// f16 d, 16 bytes of nibbles: w = d · (nib − 8).
    Q4_0,
    /// f16 d, f16 m, 16 bytes of nibbles: w = d · nib + m.
    Q4_1,
    /// f16 d, 32 × i8: w = d · q.
    Q8_0,
    /// f16 d, 32 fifth bits, 16 bytes of nibbles: w = d · (q − 16), q of 5 bits.
    Q5_0,
    /// Super-blocks of 256: f16 d and dmin, a 6-bit scale and min per 32 values, nibbles:
    /// w = d · sc · q − dmin · m.
    Q4_K,
    /// Q4_K with a fifth bit per quant (32 bytes of them per super-block): q of 5 bits.
    Q5_K,
    /// Super-blocks of 256: f16 d, an i8 scale per 16 values, 6-bit quants:
    /// w = d · sc · (q − 32).
    Q6_K,
}

impl WeightFormat {
    /// Every format, in declaration order ([`WeightFormat::index`]).
    pub const ALL: [WeightFormat; 7] = [
        WeightFormat::Q4_0,
        WeightFormat::Q4_1,
        WeightFormat::Q8_0,
        WeightFormat::Q5_0,
        WeightFormat::Q4_K,
        WeightFormat::Q5_K,
        WeightFormat::Q6_K,
    ];

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
            WeightFormat::Q5_0 => "Q5_0",
            WeightFormat::Q4_K => "Q4_K",
            WeightFormat::Q5_K => "Q5_K",
            WeightFormat::Q6_K => "Q6_K",
        }
    }

    /// Values of one GGML block (32, or 256 for the K formats): `k` must be a multiple.
    pub fn block_values(self) -> usize {
        if self.is_k() {
            SUPER
        } else {
            QK
        }
    }

    /// Bytes of one GGML block of [`WeightFormat::block_values`] values.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_0 => 18,
            WeightFormat::Q4_1 => 20,
            WeightFormat::Q8_0 => 34,
            WeightFormat::Q5_0 => 22,
            WeightFormat::Q4_K => 144,
            WeightFormat::Q5_K => 176,
            WeightFormat::Q6_K => 210,
        }
    }

    /// Byte offsets of the f16 fields of a GGML block (scales, and Q4_1's and Q4_K's
    /// mins); the other bytes are quants and integer sub-block scales.
    pub fn f16_offsets(self) -> &'static [usize] {
        match self {
            WeightFormat::Q4_1 | WeightFormat::Q4_K | WeightFormat::Q5_K => &[0, 2],
            WeightFormat::Q6_K => &[208],
            _ => &[0],
        }
    }

    /// Whether it is a super-block (K) format.
    pub(crate) fn is_k(self) -> bool {
        matches!(
            self,
            WeightFormat::Q4_K | WeightFormat::Q5_K | WeightFormat::Q6_K
        )
    }

    /// Block records per group (1, or 8 for the K formats).
    pub(crate) fn blocks_per_group(self) -> usize {
        self.block_values() / QK
    }

    /// Bytes of a group's header (the K formats' super-block scales).
    pub(crate) fn header_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_K | WeightFormat::Q5_K => 2 * SCALES,
            WeightFormat::Q6_K => SCALES,
            _ => 0,
        }
    }

    /// Offset of the nibble (or Q8_0 byte) vectors inside a block record.
    pub(crate) fn quant_offset(self) -> usize {
        match self {
            WeightFormat::Q4_1 => 2 * SCALES,
            _ => SCALES,
        }
    }

    /// Bytes of one block record; always a multiple of 64.
    pub(crate) fn block_record_bytes(self) -> usize {
        let nibbles = TILE * QK / 2;
        self.quant_offset()
            + match self {
                WeightFormat::Q8_0 => TILE * QK,
                WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q4_K => nibbles,
                WeightFormat::Q5_0 | WeightFormat::Q5_K => nibbles + 2 * 64,
                WeightFormat::Q6_K => nibbles + 4 * 64,
            }
    }

    /// Bytes of one group (header and its block records).
    pub(crate) fn group_bytes(self) -> usize {
        self.header_bytes() + self.blocks_per_group() * self.block_record_bytes()
    }

    /// A tile's bytes per 32 values of k: `kb` of them make the tile. A multiple of 64
    /// for the block formats, of 8 for the K formats (whose groups are).
    pub(crate) fn record_bytes(self) -> usize {
        self.group_bytes() / self.blocks_per_group()
    }

    /// Offset of block `b`'s record from the start of its tile.
    #[inline(always)]
    pub(crate) fn block_offset(self, b: usize) -> usize {
        let g = self.blocks_per_group();
        (b / g) * self.group_bytes() + self.header_bytes() + (b % g) * self.block_record_bytes()
    }

    /// Offset of block `b`'s group (its header) from the start of its tile.
    #[inline(always)]
    pub(crate) fn group_offset(self, b: usize) -> usize {
        (b / self.blocks_per_group()) * self.group_bytes()
    }
}

/// Where a quant's bits sit in a block record: `(byte, shift, mask)` of its low bits (all
/// 8 for Q8_0, the nibble otherwise) and, for Q5_0, Q5_K and Q6_K, of its high bits. The one
/// statement of the layout above that packing writes through and the portable kernel and
/// the tests read through.
#[derive(Clone, Copy)]
pub(crate) struct QuantPlace {
    pub low: (usize, u32, u8),
    pub high: Option<(usize, u32, u8)>,
}

/// The place of column `j` (0..32), value `kk` (0..32) of a block record.
#[inline(always)]
pub(crate) fn quant_place(format: WeightFormat, j: usize, kk: usize) -> QuantPlace {
    let (g, c) = (j / 16, j % 16);
    let qo = format.quant_offset();
    if format == WeightFormat::Q8_0 {
        let byte = qo + (2 * (kk / 4) + g) * 64 + 4 * c + kk % 4;
        return QuantPlace {
            low: (byte, 0, 0xff),
            high: None,
        };
    }
    let (upper, p, i) = (kk / 16, (kk % 16) / 4, kk % 4);
    let byte = 4 * c + i;
    let nibbles = TILE * QK / 2;
    let high = match format {
        WeightFormat::Q5_0 | WeightFormat::Q5_K => {
            Some((qo + nibbles + g * 64 + byte, (4 * upper + p) as u32, 1))
        }
        WeightFormat::Q6_K => {
            let (h, e) = (p / 2, p % 2);
            let at = qo + nibbles + (2 * h + g) * 64 + byte;
            Some((at, (4 * e + 2 * upper) as u32, 3))
        }
        _ => None,
    };
    QuantPlace {
        low: (qo + (2 * p + g) * 64 + byte, 4 * upper as u32, 15),
        high,
    }
}

/// The unsigned quant (Q8_0: q + 128) of column `j`, value `kk` of a block record.
#[inline(always)]
pub(crate) fn quant_at(format: WeightFormat, rec: &[u8], j: usize, kk: usize) -> u8 {
    let read = |(at, shift, mask): (usize, u32, u8)| (rec[at] >> shift) & mask;
    let place = quant_place(format, j, kk);
    read(place.low) | place.high.map_or(0, |h| read(h) << 4)
}

/// A run of whole tiles of one format inside a packed matrix (the last may be ragged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub format: WeightFormat,
    /// Its first tile in the matrix, and how many.
    pub tile0: usize,
    pub tiles: usize,
    /// Its columns (`tiles · 32` except for the matrix's ragged last tile).
    pub cols: usize,
    /// Byte offset of its first tile in the packed data.
    pub offset: usize,
}

/// Per (row, block of 32) values the kernels' float epilogue and integer offsets need.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub(crate) struct BlockMeta {
    /// Block scale dx.
    pub d: f32,
    /// dx · Σq, for the Q4_1, Q4_K and Q5_K min terms.
    pub sx: f32,
    /// −8 · Σq: offset of Q4_0's unsigned nibbles (twice it is Q5_0's −16 · Σq).
    pub c8: i32,
    /// −128 · Σq: offset of Q8_0 weights stored as q + 128.
    pub c128: i32,
    /// −32 · Σq over the block's first and second 16 values: offsets of Q6_K's unsigned
    /// 6-bit quants, whose scales change every 16 values.
    pub c32: [i32; 2],
}

impl BlockMeta {
    /// A block's meta from its scale `d`, the sum of its quants and the sum of its first
    /// 16 quants.
    #[inline(always)]
    pub(crate) fn new(d: f32, sum: i32, first_half: i32) -> BlockMeta {
        BlockMeta {
            d,
            sx: d * sum as f32,
            c8: -8 * sum,
            c128: -128 * sum,
            c32: [-32 * first_half, -32 * (sum - first_half)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_whole_lines_and_the_files_size() {
        for f in WeightFormat::ALL {
            assert_eq!(f.block_record_bytes() % 64, 0, "{f:?}");
            assert_eq!(f.group_bytes() % 64, 0, "{f:?}");
            assert_eq!(f.record_bytes() * f.blocks_per_group(), f.group_bytes());
        }
        // 32 columns of the file's blocks, except Q4_K's and Q5_K's unpacked scales.
        for f in [
            WeightFormat::Q4_0,
            WeightFormat::Q4_1,
            WeightFormat::Q8_0,
            WeightFormat::Q5_0,
            WeightFormat::Q6_K,
        ] {
            assert_eq!(f.group_bytes(), TILE * f.block_bytes(), "{f:?}");
        }
        assert_eq!(WeightFormat::Q4_K.group_bytes(), TILE * (144 + 4));
        assert_eq!(WeightFormat::Q5_K.group_bytes(), TILE * (176 + 4));
    }

    #[test]
    fn block_offsets_walk_the_groups() {
        for f in WeightFormat::ALL {
            let g = f.blocks_per_group();
            assert_eq!(f.block_offset(0), f.header_bytes());
            assert_eq!(f.block_offset(g), f.group_bytes() + f.header_bytes());
            assert_eq!(f.group_offset(2 * g - 1), f.group_bytes());
            assert_eq!(
                f.block_offset(g - 1) + f.block_record_bytes(),
                f.group_bytes()
            );
        }
    }
}
