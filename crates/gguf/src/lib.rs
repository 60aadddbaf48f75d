//! The GGUF container: memory-mapped reading with every offset checked, typed
//! metadata, the tensor index, and a writer for tools and synthetic test models.
//!
//! A file is parsed and validated once in [`GgufFile::open`]; afterwards tensor
//! data is handed out as borrowed slices of the mapping (zero copy).

mod reader;
mod strings;
mod types;
mod value;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use reader::{DEFAULT_ALIGNMENT, MAGIC};
pub use strings::StrArray;
pub use types::GgmlType;
pub use value::{MetaArray, MetaValue, ValueType};
pub use writer::GgufWriter;

/// Everything that can be wrong with a GGUF file. Messages name the offset or
/// the key or tensor involved.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The magic bytes are not `GGUF`.
    #[error("not a GGUF file: it starts with {found:02x?}, not \"GGUF\"")]
    NotGguf {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A GGUF version this reader does not implement.
    #[error("unsupported GGUF version {0} (versions 2 and 3 are supported)")]
    UnsupportedVersion(u32),
    /// The file ends before a field it declares.
    #[error(
        "file truncated: {what} at byte {offset} needs {needed} bytes, file is {file_len} bytes"
    )]
    Truncated {
        /// Where the read started.
        offset: u64,
        /// What was being read.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Length of the file.
        file_len: u64,
    },
    /// A metadata value type id outside the specification.
    #[error("unknown metadata value type {id} for `{key}` at byte {offset}")]
    UnknownValueType {
        /// Where the id was read.
        offset: u64,
        /// The id found.
        id: u32,
        /// The key it belongs to.
        key: String,
    },
    /// A tensor type id this build does not know.
    #[error("tensor `{tensor}` has unknown tensor type id {id} (at byte {offset})")]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The type id.
        id: u32,
        /// Where the id was read.
        offset: u64,
    },
    /// A tensor's data would lie outside the file.
    #[error(
        "tensor `{tensor}` data [{start}, {start}+{len}) lies outside the file of {file_len} bytes"
    )]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// Absolute start offset.
        start: u64,
        /// Length in bytes.
        len: u64,
        /// Length of the file.
        file_len: u64,
    },
    /// Any other structural problem.
    #[error("invalid GGUF at byte {offset}: {message}")]
    Invalid {
        /// Where it was found (0 when not tied to a place).
        offset: u64,
        /// What is wrong.
        message: String,
    },
}

/// One entry of the tensor index.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as ggml orders them.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Number of rows, i.e. the product of all dimensions but the first.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// The bytes behind a file: a read-only mapping, or an owned buffer (tests,
/// fuzzing, files written in memory).
enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// An open, validated GGUF file.
pub struct GgufFile {
    backing: Backing,
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Map and validate a file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::other("not a regular file")));
        }
        if meta.len() == 0 {
            return Err(GgufError::NotGguf { found: Vec::new() });
        }
        // SAFETY: the mapping is read-only and private to this process. The
        // usual caveat of mmap applies: if another process truncates the file
        // while it is mapped, reads may fault. Model files are not modified in
        // place by any tool of ours, and llama.cpp makes the same trade for
        // zero-copy loading.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::from_backing(Backing::Mapped(mmap))
    }

    /// Parse and validate an in-memory image.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<Self, GgufError> {
        let parsed = reader::parse(backing.bytes())?;
        let key_index = parsed
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = parsed
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Self {
            backing,
            version: parsed.version,
            metadata: parsed.metadata,
            key_index,
            tensors: parsed.tensors,
            tensor_index,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
        })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Size of the whole image in bytes.
    pub fn file_len(&self) -> u64 {
        self.backing.bytes().len() as u64
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// A non-negative integer value of any width.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// A numeric value as `f32`.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// A string array.
    pub fn get_str_array(&self, key: &str) -> Option<&StrArray> {
        match self.get(key)?.as_array()? {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// An `f32` array.
    pub fn get_f32_array(&self, key: &str) -> Option<&[f32]> {
        match self.get(key)?.as_array()? {
            MetaArray::F32(v) => Some(v),
            _ => None,
        }
    }

    /// An `i32` array.
    pub fn get_i32_array(&self, key: &str) -> Option<&[i32]> {
        match self.get(key)?.as_array()? {
            MetaArray::I32(v) => Some(v),
            _ => None,
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// The tensor index in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// One tensor's index entry.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor's bytes. Bounds were checked at open, so this cannot fail for
    /// an entry of this file.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let bytes = self.backing.bytes();
        let start = (self.data_offset + info.offset) as usize;
        let end = start + info.n_bytes as usize;
        bytes.get(start..end).unwrap_or(&[])
    }

    /// Tells the kernel that this process is done with `bytes`, a slice of
    /// the mapped file (a tensor a loader has copied into a layout of its
    /// own): the pages leave the process's resident set, and come back from
    /// the file if read again. Nothing happens for an owned image or bytes
    /// that are not the file's.
    pub fn release(&self, bytes: &[u8]) {
        let Backing::Mapped(map) = &self.backing else {
            return;
        };
        let (base, at) = (map.as_ptr() as usize, bytes.as_ptr() as usize);
        if bytes.is_empty() || at < base || at + bytes.len() > base + map.len() {
            return;
        }
        // SAFETY: the mapping is read-only, private and never written, so
        // dropping its pages loses nothing: a later read faults them in from
        // the file again. The range lies inside the mapping (checked above).
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at - base, bytes.len())
        };
    }

    /// A tensor's bytes by name.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.tensor_data(t))
    }
}

#[cfg(test)]
mod tests;
