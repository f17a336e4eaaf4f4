//! GGML tensor types and their block geometry.

/// A GGML tensor element type, as stored in GGUF tensor infos.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE half float.
    F16,
    /// 4-bit weights in blocks of 32 with one f16 scale (4.5 bits per weight).
    Q4_0,
    /// 4-bit weights in blocks of 32 with an f16 scale and minimum (5 bits per weight).
    Q4_1,
    /// 5-bit weights in blocks of 32 with one f16 scale (5.5 bits per weight).
    Q5_0,
    /// 5-bit weights in blocks of 32 with an f16 scale and minimum (6 bits per weight).
    Q5_1,
    /// 8-bit weights in blocks of 32 with one f16 scale (8.5 bits per weight).
    Q8_0,
    /// 8-bit values in blocks of 32 with a scale and the block sum (llama.cpp's activation
    /// format for the `_1` types).
    Q8_1,
    /// k-quant: 2-bit weights in super-blocks of 256 with 4-bit sub-block scales and mins.
    Q2_K,
    /// k-quant: 3-bit weights in super-blocks of 256 with 6-bit sub-block scales.
    Q3_K,
    /// k-quant: 4-bit weights in super-blocks of 256 with 6-bit sub-block scales and mins.
    Q4_K,
    /// k-quant: 5-bit weights in super-blocks of 256 with 6-bit sub-block scales and mins.
    Q5_K,
    /// k-quant: 6-bit weights in super-blocks of 256 with 8-bit sub-block scales.
    Q6_K,
    /// k-quant: 8-bit values in blocks of 256 with an f32 scale (llama.cpp's activation format
    /// for the k-quants).
    Q8_K,
    /// i-quant: about 2.06 bits per weight from a lattice codebook, super-blocks of 256.
    IQ2_XXS,
    /// i-quant: about 2.31 bits per weight, super-blocks of 256.
    IQ2_XS,
    /// i-quant: about 3.06 bits per weight, super-blocks of 256.
    IQ3_XXS,
    /// i-quant: about 1.56 bits per weight, super-blocks of 256.
    IQ1_S,
    /// i-quant: 4-bit non-linear levels in blocks of 32 with an f16 scale.
    IQ4_NL,
    /// i-quant: about 3.44 bits per weight, super-blocks of 256.
    IQ3_S,
    /// i-quant: about 2.56 bits per weight, super-blocks of 256.
    IQ2_S,
    /// i-quant: 4-bit non-linear levels in super-blocks of 256 (4.25 bits per weight).
    IQ4_XS,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 64-bit IEEE float.
    F64,
    /// i-quant: 1.75 bits per weight, super-blocks of 256.
    IQ1_M,
    /// bfloat16 (the top 16 bits of an f32).
    BF16,
    /// Ternary weights packed at about 1.69 bits per weight, super-blocks of 256.
    TQ1_0,
    /// Ternary weights at 2 bits each (2.06 bits per weight), super-blocks of 256.
    TQ2_0,
}

impl GgmlType {
    /// Maps the on-disk type id; `None` for ids this reader does not know.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            _ => return None,
        })
    }

    /// The on-disk type id (the inverse of [`GgmlType::from_id`]).
    pub fn id(self) -> u32 {
        // Every id maps to one type, so searching the small id space inverts `from_id`
        // without a second table to keep in step.
        (0..64)
            .find(|&id| Self::from_id(id) == Some(self))
            .expect("every type has an id")
    }

    /// (elements per block, bytes per block).
    pub fn block_geometry(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2_K => (256, 84),
            Q3_K => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q6_K => (256, 210),
            Q8_K => (256, 292),
            IQ2_XXS => (256, 66),
            IQ2_XS => (256, 74),
            IQ3_XXS => (256, 98),
            IQ1_S => (256, 50),
            IQ4_NL => (32, 18),
            IQ3_S => (256, 110),
            IQ2_S => (256, 82),
            IQ4_XS => (256, 136),
            IQ1_M => (256, 56),
            TQ1_0 => (256, 54),
            TQ2_0 => (256, 66),
        }
    }

    /// Bytes needed for `elements` values, or `None` if they are not whole blocks.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        let (bs, bytes) = self.block_geometry();
        let bs = bs as u64;
        if !elements.is_multiple_of(bs) {
            return None;
        }
        (elements / bs).checked_mul(bytes as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::GgmlType;

    #[test]
    fn ids_round_trip() {
        for id in 0..64 {
            if let Some(t) = GgmlType::from_id(id) {
                assert_eq!(t.id(), id);
            }
        }
    }
}
