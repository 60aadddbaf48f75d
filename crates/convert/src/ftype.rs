//! File types: the quantization mixes `llama-quantize` offers, by the names and
//! `general.file_type` numbers llama.cpp uses (`enum llama_ftype` in llama.h).

use gguf::GgmlType;

/// A whole-file quantization mix, e.g. Q4_K_M: a default tensor type plus
/// llama.cpp's per-tensor exceptions (see [`crate::plan`]).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Every tensor F32.
    F32,
    /// 2-D tensors F16, the rest as they are.
    F16,
    /// 2-D tensors BF16.
    BF16,
    /// Q8_0.
    Q8_0,
    /// Q4_0 (the output/tied embedding gets Q6_K).
    Q4_0,
    /// Q4_1.
    Q4_1,
    /// Q5_0.
    Q5_0,
    /// Q5_1.
    Q5_1,
    /// Q2_K, with Q3_K/Q4_K for the most sensitive tensors.
    Q2_K,
    /// Q3_K everywhere but the output.
    Q3_K_S,
    /// Q3_K with Q4_K/Q5_K for attention V, FFN down and attention output.
    Q3_K_M,
    /// Q3_K with Q5_K for attention V, FFN down and attention output.
    Q3_K_L,
    /// Q4_K with Q5_K for the first attention V and FFN down layers.
    Q4_K_S,
    /// Q4_K with Q6_K for attention V and FFN down in about half the layers.
    Q4_K_M,
    /// Q5_K everywhere but the output.
    Q5_K_S,
    /// Q5_K with Q6_K for attention V and FFN down in about half the layers.
    Q5_K_M,
    /// Q6_K.
    Q6_K,
    /// IQ4_NL (4-bit values from a fixed table, blocks of 32).
    IQ4_NL,
    /// IQ4_XS (IQ4_NL's table in super-blocks of 256, falling back to
    /// IQ4_NL for narrower rows).
    IQ4_XS,
}

impl FileType {
    /// Every file type, in llama.cpp's numbering order.
    pub const ALL: [FileType; 19] = [
        FileType::F32,
        FileType::F16,
        FileType::Q4_0,
        FileType::Q4_1,
        FileType::Q8_0,
        FileType::Q5_0,
        FileType::Q5_1,
        FileType::Q2_K,
        FileType::Q3_K_S,
        FileType::Q3_K_M,
        FileType::Q3_K_L,
        FileType::Q4_K_S,
        FileType::Q4_K_M,
        FileType::Q5_K_S,
        FileType::Q5_K_M,
        FileType::Q6_K,
        FileType::IQ4_NL,
        FileType::IQ4_XS,
        FileType::BF16,
    ];

    /// The name `llama-quantize` takes, e.g. `Q4_K_M`.
    pub fn name(self) -> &'static str {
        match self {
            FileType::F32 => "F32",
            FileType::F16 => "F16",
            FileType::BF16 => "BF16",
            FileType::Q8_0 => "Q8_0",
            FileType::Q4_0 => "Q4_0",
            FileType::Q4_1 => "Q4_1",
            FileType::Q5_0 => "Q5_0",
            FileType::Q5_1 => "Q5_1",
            FileType::Q2_K => "Q2_K",
            FileType::Q3_K_S => "Q3_K_S",
            FileType::Q3_K_M => "Q3_K_M",
            FileType::Q3_K_L => "Q3_K_L",
            FileType::Q4_K_S => "Q4_K_S",
            FileType::Q4_K_M => "Q4_K_M",
            FileType::Q5_K_S => "Q5_K_S",
            FileType::Q5_K_M => "Q5_K_M",
            FileType::Q6_K => "Q6_K",
            FileType::IQ4_NL => "IQ4_NL",
            FileType::IQ4_XS => "IQ4_XS",
        }
    }

    /// Parses a name case-insensitively (`q4_k_m`, `Q8_0`, `f16`); `Q4_K`,
    /// `Q5_K` and `Q3_K` mean their `_M` mixes, as in llama-quantize.
    pub fn from_name(name: &str) -> Option<FileType> {
        let upper = name.trim().to_ascii_uppercase();
        let alias = match upper.as_str() {
            "Q3_K" => "Q3_K_M",
            "Q4_K" => "Q4_K_M",
            "Q5_K" => "Q5_K_M",
            other => other,
        };
        Self::ALL.into_iter().find(|t| t.name() == alias)
    }

    /// The `general.file_type` number (`LLAMA_FTYPE_*`).
    pub fn llama_ftype(self) -> u32 {
        match self {
            FileType::F32 => 0,
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q4_1 => 3,
            FileType::Q8_0 => 7,
            FileType::Q5_0 => 8,
            FileType::Q5_1 => 9,
            FileType::Q2_K => 10,
            FileType::Q3_K_S => 11,
            FileType::Q3_K_M => 12,
            FileType::Q3_K_L => 13,
            FileType::Q4_K_S => 14,
            FileType::Q4_K_M => 15,
            FileType::Q5_K_S => 16,
            FileType::Q5_K_M => 17,
            FileType::Q6_K => 18,
            FileType::IQ4_NL => 25,
            FileType::IQ4_XS => 30,
            FileType::BF16 => 32,
        }
    }

    /// The file type with `general.file_type` number `n`, if we know it.
    pub fn from_llama_ftype(n: u32) -> Option<FileType> {
        Self::ALL.into_iter().find(|t| t.llama_ftype() == n)
    }

    /// The tensor type most 2-D weights get (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        match self {
            FileType::F32 => GgmlType::F32,
            FileType::F16 => GgmlType::F16,
            FileType::BF16 => GgmlType::BF16,
            FileType::Q8_0 => GgmlType::Q8_0,
            FileType::Q4_0 => GgmlType::Q4_0,
            FileType::Q4_1 => GgmlType::Q4_1,
            FileType::Q5_0 => GgmlType::Q5_0,
            FileType::Q5_1 => GgmlType::Q5_1,
            FileType::Q2_K => GgmlType::Q2_K,
            FileType::Q3_K_S | FileType::Q3_K_M | FileType::Q3_K_L => GgmlType::Q3_K,
            FileType::Q4_K_S | FileType::Q4_K_M => GgmlType::Q4_K,
            FileType::Q5_K_S | FileType::Q5_K_M => GgmlType::Q5_K,
            FileType::Q6_K => GgmlType::Q6_K,
            FileType::IQ4_NL => GgmlType::IQ4_NL,
            FileType::IQ4_XS => GgmlType::IQ4_XS,
        }
    }

    /// The names [`FileType::from_name`] accepts, for error messages and help.
    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(|t| t.name().to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for FileType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FileType {
    type Err = crate::ConvertError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_name(s).ok_or_else(|| crate::ConvertError::UnknownFileType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_numbers_are_llamas() {
        for t in FileType::ALL {
            assert_eq!(FileType::from_name(t.name()), Some(t));
            assert_eq!(FileType::from_name(&t.name().to_lowercase()), Some(t));
        }
        assert_eq!(FileType::from_name("q4_k"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::from_name("q4_k_x"), None);
        assert_eq!(FileType::Q4_K_M.llama_ftype(), 15);
        assert_eq!(FileType::Q8_0.llama_ftype(), 7);
        assert_eq!(FileType::BF16.llama_ftype(), 32);
        let numbers: Vec<u32> = FileType::ALL.iter().map(|t| t.llama_ftype()).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    }
}
