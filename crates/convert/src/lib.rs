//! GGUF conversion: requantizing a file the way `llama-quantize` does (same
//! per-tensor type choices, same reference quantizers), and synthetic
//! random-weight models with the real shapes of Gemma sizes we have no
//! weights for.
//!
//! Both build a [`gguf::GgufWriter`] in memory; tensors are produced one after
//! another, each one's rows quantized in parallel on rayon's pool.

mod ftype;
pub mod plan;
mod rng;
mod synth;
mod synth_gemma4;
mod synth_vision;
mod tensors;

pub use ftype::FileType;
/// The container types conversions read and write, so that tools built on
/// this crate need not name the `gguf` crate.
pub use gguf::{GgmlType, GgufFile, GgufWriter};
pub use plan::{ModelShape, TensorSpec};
pub use synth::{synth, synth_with, Preset};
pub use synth_gemma4::Gemma4Layout;
pub use synth_vision::{synth_vision, VisionPreset};
pub use tensors::{quantize_gguf, quantize_gguf_with, TensorReport};

/// `general.quantization_version` as llama.cpp writes it (`GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input or donor file is malformed.
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    /// A tensor could not be decoded or encoded.
    #[error("tensor `{tensor}`: {source}")]
    Quant {
        /// The tensor.
        tensor: String,
        /// What the kernel reported.
        source: quant::QuantError,
    },
    /// A file type name that is not one of [`FileType::names`].
    #[error("unknown quantization type `{0}` (expected one of: {names})", names = FileType::names())]
    UnknownFileType(String),
    /// A preset name that is not one of [`Preset::NAMES`].
    #[error("unknown preset `{0}` (expected one of: {names})", names = Preset::NAMES.join(", "))]
    UnknownPreset(String),
    /// Anything else about the input that makes it unusable.
    #[error("{0}")]
    Invalid(String),
}
