//! Tensor element types as the GGUF format numbers them.

/// A tensor element type (`ggml_type` in llama.cpp), with its block geometry.
///
/// Quantized types store elements in fixed-size blocks; a row's length must be a
/// multiple of the block length.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// 4-bit, 32 per block, one f16 scale.
    Q4_0,
    /// 4-bit, 32 per block, f16 scale and minimum.
    Q4_1,
    /// 5-bit, 32 per block, one f16 scale.
    Q5_0,
    /// 5-bit, 32 per block, f16 scale and minimum.
    Q5_1,
    /// 8-bit, 32 per block, one f16 scale.
    Q8_0,
    /// 8-bit, 32 per block, f16 scale and sum (activation format).
    Q8_1,
    /// 2-bit super-blocks of 256.
    Q2_K,
    /// 3-bit super-blocks of 256.
    Q3_K,
    /// 4-bit super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q4_K,
    /// 5-bit super-blocks of 256 with 6-bit sub-block scales and minimums.
    Q5_K,
    /// 6-bit super-blocks of 256 with 8-bit sub-block scales.
    Q6_K,
    /// 8-bit super-blocks of 256 with an f32 scale and block sums (activation format).
    Q8_K,
    /// 8-bit signed integers.
    I8,
    /// 16-bit signed integers.
    I16,
    /// 32-bit signed integers.
    I32,
    /// 64-bit signed integers.
    I64,
    /// 64-bit IEEE float.
    F64,
    /// bfloat16.
    BF16,
    /// 4-bit non-linear, 32 per block: an f16 scale and indices into a
    /// fixed table of 16 values.
    IQ4_NL,
    /// 4-bit non-linear super-blocks of 256: IQ4_NL's table with a 6-bit
    /// scale per 32.
    IQ4_XS,
    /// 2.06-bit lattice super-blocks of 256.
    IQ2_XXS,
    /// 2.31-bit lattice super-blocks of 256.
    IQ2_XS,
    /// 2.5-bit lattice super-blocks of 256.
    IQ2_S,
    /// 3.06-bit lattice super-blocks of 256.
    IQ3_XXS,
    /// 3.44-bit lattice super-blocks of 256.
    IQ3_S,
    /// 1.56-bit lattice super-blocks of 256.
    IQ1_S,
    /// 1.75-bit lattice super-blocks of 256.
    IQ1_M,
    /// Ternary, 1.69 bits, super-blocks of 256 (readable, not supported).
    TQ1_0,
    /// Ternary, 2.06 bits, super-blocks of 256 (readable, not supported).
    TQ2_0,
    /// 4-bit floats (E2M1), 32 per block with an E8M0 scale (readable, not
    /// supported).
    MXFP4,
}

impl GgmlType {
    /// Every type this crate can size, for iteration in tests and tools.
    pub const ALL: [GgmlType; 32] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::BF16,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::MXFP4,
    ];

    /// The lattice IQ types: runs of values named by their index into a
    /// fixed codebook (IQ4_NL and IQ4_XS are table types, not these).
    pub const LATTICE: [GgmlType; 7] = [
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ];

    /// The type for a numeric id from a GGUF file, or `None` when unknown.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            16 => Self::IQ2_XXS,
            17 => Self::IQ2_XS,
            18 => Self::IQ3_XXS,
            19 => Self::IQ1_S,
            20 => Self::IQ4_NL,
            21 => Self::IQ3_S,
            22 => Self::IQ2_S,
            23 => Self::IQ4_XS,
            24 => Self::I8,
            25 => Self::I16,
            26 => Self::I32,
            27 => Self::I64,
            28 => Self::F64,
            29 => Self::IQ1_M,
            30 => Self::BF16,
            34 => Self::TQ1_0,
            35 => Self::TQ2_0,
            39 => Self::MXFP4,
            _ => return None,
        })
    }

    /// The numeric id written in GGUF files.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::I8 => 24,
            Self::I16 => 25,
            Self::I32 => 26,
            Self::I64 => 27,
            Self::F64 => 28,
            Self::BF16 => 30,
            Self::IQ2_XXS => 16,
            Self::IQ2_XS => 17,
            Self::IQ3_XXS => 18,
            Self::IQ1_S => 19,
            Self::IQ4_NL => 20,
            Self::IQ3_S => 21,
            Self::IQ2_S => 22,
            Self::IQ4_XS => 23,
            Self::IQ1_M => 29,
            Self::TQ1_0 => 34,
            Self::TQ2_0 => 35,
            Self::MXFP4 => 39,
        }
    }

    /// The name llama.cpp uses (`q4_K`, `f16`, …), upper-cased as in its tools' output.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::Q8_K => "Q8_K",
            Self::I8 => "I8",
            Self::I16 => "I16",
            Self::I32 => "I32",
            Self::I64 => "I64",
            Self::F64 => "F64",
            Self::BF16 => "BF16",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ4_XS => "IQ4_XS",
            Self::IQ2_XXS => "IQ2_XXS",
            Self::IQ2_XS => "IQ2_XS",
            Self::IQ2_S => "IQ2_S",
            Self::IQ3_XXS => "IQ3_XXS",
            Self::IQ3_S => "IQ3_S",
            Self::IQ1_S => "IQ1_S",
            Self::IQ1_M => "IQ1_M",
            Self::TQ1_0 => "TQ1_0",
            Self::TQ2_0 => "TQ2_0",
            Self::MXFP4 => "MXFP4",
        }
    }

    /// Elements per block (1 for plain types).
    pub fn block_len(self) -> usize {
        match self {
            Self::Q4_0
            | Self::Q4_1
            | Self::Q5_0
            | Self::Q5_1
            | Self::Q8_0
            | Self::Q8_1
            | Self::IQ4_NL
            | Self::MXFP4 => 32,
            Self::Q2_K
            | Self::Q3_K
            | Self::Q4_K
            | Self::Q5_K
            | Self::Q6_K
            | Self::Q8_K
            | Self::IQ4_XS
            | Self::IQ2_XXS
            | Self::IQ2_XS
            | Self::IQ2_S
            | Self::IQ3_XXS
            | Self::IQ3_S
            | Self::IQ1_S
            | Self::IQ1_M
            | Self::TQ1_0
            | Self::TQ2_0 => 256,
            _ => 1,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::I8 => 1,
            Self::I64 | Self::F64 => 8,
            Self::Q4_0 => 2 + 16,
            Self::Q4_1 => 2 + 2 + 16,
            Self::Q5_0 => 2 + 4 + 16,
            Self::Q5_1 => 2 + 2 + 4 + 16,
            Self::Q8_0 => 2 + 32,
            Self::Q8_1 => 4 + 32,
            Self::Q2_K => 16 + 64 + 2 + 2,
            Self::Q3_K => 32 + 64 + 12 + 2,
            Self::Q4_K => 2 + 2 + 12 + 128,
            Self::Q5_K => 2 + 2 + 12 + 32 + 128,
            Self::Q6_K => 128 + 64 + 16 + 2,
            Self::Q8_K => 4 + 256 + 2 * 16,
            // ggml-common.h's static_asserts, term by term.
            Self::IQ4_NL => 2 + 16,
            Self::IQ4_XS => 2 + 2 + 4 + 128,
            Self::IQ2_XXS => 2 + 64,
            Self::IQ2_XS => 2 + 64 + 8,
            Self::IQ2_S => 2 + 64 + 16,
            Self::IQ3_XXS => 2 + 96,
            Self::IQ3_S => 2 + 13 * 8 + 4,
            Self::IQ1_S => 2 + 32 + 16,
            Self::IQ1_M => 32 + 16 + 8,
            Self::TQ1_0 => 2 + 4 + 48,
            Self::TQ2_0 => 2 + 64,
            Self::MXFP4 => 1 + 16,
        }
    }

    /// Whether elements are stored in quantized blocks.
    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// Bytes taken by a row of `n` elements, or `None` when `n` is not a whole
    /// number of blocks or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let bl = self.block_len() as u64;
        if !n.is_multiple_of(bl) {
            return None;
        }
        (n / bl).checked_mul(self.block_bytes() as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(1000), None);
    }

    #[test]
    fn block_sizes_match_ggml() {
        // Values from ggml's type traits table.
        assert_eq!(GgmlType::Q4_K.block_bytes(), 144);
        assert_eq!(GgmlType::Q5_K.block_bytes(), 176);
        assert_eq!(GgmlType::Q6_K.block_bytes(), 210);
        assert_eq!(GgmlType::Q8_K.block_bytes(), 292);
        assert_eq!(GgmlType::Q5_0.block_bytes(), 22);
        assert_eq!(GgmlType::Q8_0.block_bytes(), 34);
        assert_eq!(GgmlType::Q2_K.block_bytes(), 84);
        assert_eq!(GgmlType::Q3_K.block_bytes(), 110);
        assert_eq!(GgmlType::Q8_0.row_bytes(640), Some(20 * 34));
        // ggml's `type_size` for the non-linear and lattice types.
        for (ty, bytes, len) in [
            (GgmlType::IQ4_NL, 18, 32),
            (GgmlType::IQ4_XS, 136, 256),
            (GgmlType::IQ2_XXS, 66, 256),
            (GgmlType::IQ2_XS, 74, 256),
            (GgmlType::IQ2_S, 82, 256),
            (GgmlType::IQ3_XXS, 98, 256),
            (GgmlType::IQ3_S, 110, 256),
            (GgmlType::IQ1_S, 50, 256),
            (GgmlType::IQ1_M, 56, 256),
            (GgmlType::TQ1_0, 54, 256),
            (GgmlType::TQ2_0, 66, 256),
            (GgmlType::MXFP4, 17, 32),
        ] {
            assert_eq!((ty.block_bytes(), ty.block_len()), (bytes, len), "{ty}");
        }
        assert_eq!(GgmlType::from_id(20), Some(GgmlType::IQ4_NL));
        assert_eq!(GgmlType::from_id(23), Some(GgmlType::IQ4_XS));
        assert_eq!(GgmlType::from_id(16), Some(GgmlType::IQ2_XXS));
        assert_eq!(GgmlType::Q8_0.row_bytes(33), None);
    }
}
