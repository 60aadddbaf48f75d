//! What is in a model file, for `hearth inspect` and `hearth tokenize`:
//! read without binding the weights, so front ends need not know the
//! container format.

use crate::{open_model_file, EngineError};
use std::path::Path;
use tokenizer::Tokenizer;

/// One metadata entry.
#[derive(Debug, Clone)]
pub struct MetaEntry {
    /// The key (`general.architecture`, ...).
    pub key: String,
    /// The value as a line (long arrays abbreviated).
    pub value: String,
    /// Every element of an array value; `None` for scalars.
    pub full: Option<String>,
}

/// One tensor of the file.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    /// Its name.
    pub name: String,
    /// Its element type (`q4_K`, `f32`, ...).
    pub ty: &'static str,
    /// Its dimensions, innermost first.
    pub dims: Vec<u64>,
    /// Bytes it takes.
    pub bytes: u64,
}

/// A model file's container: version, metadata and tensor table.
#[derive(Debug, Clone)]
pub struct FileSummary {
    /// GGUF version.
    pub version: u32,
    /// File length in bytes (of the converted GGUF for a checkpoint directory).
    pub file_len: u64,
    /// Tensor data alignment.
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<MetaEntry>,
    /// Tensors in file order.
    pub tensors: Vec<TensorEntry>,
}

/// Read the container of the model at `path` (a GGUF file or a checkpoint
/// directory) without binding its weights.
pub fn inspect(path: &Path) -> Result<FileSummary, EngineError> {
    let file = open_model_file(path)?;
    let metadata = file
        .metadata()
        .iter()
        .map(|(k, v)| MetaEntry {
            key: k.to_string(),
            value: v.to_string(),
            full: match v {
                gguf::MetaValue::Array(a) => Some(format!("{a:?}")),
                _ => None,
            },
        })
        .collect();
    let tensors = file
        .tensors()
        .iter()
        .map(|t| TensorEntry {
            name: t.name.clone(),
            ty: t.ty.name(),
            dims: t.dims.clone(),
            bytes: t.n_bytes,
        })
        .collect();
    Ok(FileSummary {
        version: file.version(),
        file_len: file.file_len(),
        alignment: file.alignment(),
        metadata,
        tensors,
    })
}

/// The tokenizer of the model at `path`, without binding its weights.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer, EngineError> {
    Ok(Tokenizer::from_gguf(&open_model_file(path)?)?)
}

/// The towers a model would load with: what it can take besides text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Towers {
    /// Reads images.
    pub vision: bool,
    /// Hears audio.
    pub audio: bool,
}

/// The towers of `model` with the projector `mmproj`, read from metadata
/// only (nothing bound), as [`crate::Engine::load`] would find them: a
/// projector's `clip.has_*_encoder` flags, or a checkpoint folder's own
/// towers. A file that cannot be read has none.
pub fn towers(model: &Path, mmproj: Option<&Path>) -> Towers {
    match mmproj {
        Some(p) => match gguf::GgufFile::open(p) {
            Ok(file) => Towers {
                vision: file.get_bool("clip.has_vision_encoder") != Some(false),
                audio: media::AudioTower::in_mmproj(&file),
            },
            Err(_) => Towers::default(),
        },
        None if model.is_dir() => Towers {
            vision: hf::has_vision_tower(model),
            audio: hf::has_audio_tower(model),
        },
        None => Towers::default(),
    }
}
