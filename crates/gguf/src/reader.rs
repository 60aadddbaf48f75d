//! Parsing a GGUF byte image. Every read is bounds-checked; nothing here panics
//! on malformed input.

use crate::value::{MetaArray, MetaValue, ValueType};
use crate::StrArray;
use crate::{GgmlType, GgufError, TensorInfo};

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Nested arrays deeper than this are rejected: no real file nests more than
/// twice, and unbounded recursion would let a file overflow the stack.
const MAX_ARRAY_DEPTH: usize = 8;
/// More dimensions than ggml supports.
const MAX_DIMS: u32 = 4;

/// The parsed header, metadata and tensor index of a GGUF image.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// A cursor over the image that turns every short read into an error naming
/// the offset and what was being read.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    version: u32,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| GgufError::Truncated {
                offset: self.pos as u64,
                what: what.to_string(),
                needed: n as u64,
                file_len: self.bytes.len() as u64,
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Counts and lengths are u32 in GGUF v1 and u64 from v2 on.
    fn count(&mut self, what: &str) -> Result<u64, GgufError> {
        if self.version == 1 {
            Ok(self.u32(what)?.into())
        } else {
            self.u64(what)
        }
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        Ok(self.str_bytes(what)?.into_owned())
    }

    /// The next length-prefixed string, borrowed from the file where it is
    /// UTF-8 (invalid bytes are replaced, never rejected).
    fn str_bytes(&mut self, what: &str) -> Result<std::borrow::Cow<'a, str>, GgufError> {
        let at = self.pos as u64;
        let len = self.count(what)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.remaining())
            .ok_or_else(|| GgufError::Truncated {
                offset: at,
                what: format!("{what} (string of {len} bytes)"),
                needed: len,
                file_len: self.bytes.len() as u64,
            })?;
        Ok(String::from_utf8_lossy(self.take(len, what)?))
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType, GgufError> {
        let at = self.pos as u64;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or(GgufError::UnknownValueType {
            offset: at,
            id,
            key: what.to_string(),
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<MetaValue, GgufError> {
        Ok(match ty {
            ValueType::U8 => MetaValue::U8(self.u8(key)?),
            ValueType::I8 => MetaValue::I8(self.u8(key)? as i8),
            ValueType::U16 => MetaValue::U16(self.u16(key)?),
            ValueType::I16 => MetaValue::I16(self.u16(key)? as i16),
            ValueType::U32 => MetaValue::U32(self.u32(key)?),
            ValueType::I32 => MetaValue::I32(self.u32(key)? as i32),
            ValueType::F32 => MetaValue::F32(f32::from_bits(self.u32(key)?)),
            ValueType::Bool => MetaValue::Bool(self.bool(key)?),
            ValueType::String => MetaValue::String(self.string(key)?),
            ValueType::U64 => MetaValue::U64(self.u64(key)?),
            ValueType::I64 => MetaValue::I64(self.u64(key)? as i64),
            ValueType::F64 => MetaValue::F64(f64::from_bits(self.u64(key)?)),
            ValueType::Array => MetaValue::Array(self.array_value(key, depth + 1)?),
        })
    }

    fn bool(&mut self, key: &str) -> Result<bool, GgufError> {
        let at = self.pos as u64;
        match self.u8(key)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(GgufError::Invalid {
                offset: at,
                message: format!("metadata `{key}`: bool byte is {b}, not 0 or 1"),
            }),
        }
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<MetaArray, GgufError> {
        let at = self.pos as u64;
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::Invalid {
                offset: at,
                message: format!("metadata `{key}`: arrays nested deeper than {MAX_ARRAY_DEPTH}"),
            });
        }
        let elem = self.value_type(key)?;
        let n = self.count(key)?;
        // Each element takes at least one byte (strings and arrays at least a
        // length), so a count above the bytes left is corrupt: reject it
        // before allocating anything for it.
        let min_elem = elem
            .fixed_size()
            .unwrap_or(if self.version == 1 { 4 } else { 8 });
        let n_usize = usize::try_from(n)
            .ok()
            .filter(|&n| {
                n.checked_mul(min_elem)
                    .is_some_and(|b| b <= self.remaining())
            })
            .ok_or_else(|| GgufError::Truncated {
                offset: at,
                what: format!("metadata `{key}`: array of {n} {elem:?}"),
                needed: n.saturating_mul(min_elem as u64),
                file_len: self.bytes.len() as u64,
            })?;
        macro_rules! fixed {
            ($variant:ident, $t:ty, $size:expr) => {{
                let raw = self.take(n_usize * $size, key)?;
                MetaArray::$variant(
                    raw.chunks_exact($size)
                        .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect(),
                )
            }};
        }
        Ok(match elem {
            ValueType::U8 => MetaArray::U8(self.take(n_usize, key)?.to_vec()),
            ValueType::I8 => {
                MetaArray::I8(self.take(n_usize, key)?.iter().map(|&b| b as i8).collect())
            }
            ValueType::U16 => fixed!(U16, u16, 2),
            ValueType::I16 => fixed!(I16, i16, 2),
            ValueType::U32 => fixed!(U32, u32, 4),
            ValueType::I32 => fixed!(I32, i32, 4),
            ValueType::F32 => fixed!(F32, f32, 4),
            ValueType::U64 => fixed!(U64, u64, 8),
            ValueType::I64 => fixed!(I64, i64, 8),
            ValueType::F64 => fixed!(F64, f64, 8),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n_usize);
                for _ in 0..n_usize {
                    v.push(self.bool(key)?);
                }
                MetaArray::Bool(v)
            }
            ValueType::String => {
                let mut v = StrArray::with_capacity(n_usize);
                for _ in 0..n_usize {
                    v.push(&self.str_bytes(key)?);
                }
                MetaArray::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n_usize.min(1024));
                for _ in 0..n_usize {
                    v.push(self.array_value(key, depth + 1)?);
                }
                MetaArray::Array(v)
            }
        })
    }
}

/// Parse the header, metadata and tensor index, and check every tensor's
/// extent against the image length.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor {
        bytes,
        pos: 0,
        version: 3,
    };
    let (version, n_tensors, n_kv) = read_header(&mut c)?;

    // Each metadata entry takes at least 12 bytes and each tensor info at
    // least 24, so counts beyond that are corrupt and must not size a Vec.
    let cap =
        |n: u64, min: usize, left: usize| usize::try_from(n).unwrap_or(usize::MAX).min(left / min);
    let mut metadata = Vec::with_capacity(cap(n_kv, 12, c.remaining()));
    for i in 0..n_kv {
        let key = c.string(&format!("metadata key #{i}"))?;
        let ty = c.value_type(&key)?;
        let value = c.value(ty, &key, 0)?;
        metadata.push((key, value));
    }

    let alignment = alignment_of(&metadata)?;

    let mut tensors = Vec::with_capacity(cap(n_tensors, 24, c.remaining()));
    for i in 0..n_tensors {
        tensors.push(read_tensor_info(&mut c, i, alignment)?);
    }

    let header_end = c.pos as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;
    check_extents(&tensors, data_offset, bytes.len() as u64)?;
    check_unique_names(&tensors)?;

    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Read the magic, the version and the two counts (tensors, metadata
/// entries), and set the cursor's version so later counts are read at the
/// right width.
fn read_header(c: &mut Cursor<'_>) -> Result<(u32, u64, u64), GgufError> {
    let magic = c.array::<4>("magic").map_err(|_| GgufError::NotGguf {
        found: c.bytes.iter().take(4).copied().collect(),
    })?;
    if magic != MAGIC {
        return Err(GgufError::NotGguf {
            found: magic.to_vec(),
        });
    }
    let version = c.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion(version));
    }
    c.version = version;
    let n_tensors = c.count("tensor count")?;
    let n_kv = c.count("metadata count")?;
    Ok((version, n_tensors, n_kv))
}

/// The data alignment `general.alignment` sets, or the default; anything but
/// a positive power of two is an error.
fn alignment_of(metadata: &[(String, MetaValue)]) -> Result<u64, GgufError> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, v)) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => Ok(a),
            _ => Err(GgufError::Invalid {
                offset: 0,
                message: format!("general.alignment is {v}, not a power of two"),
            }),
        },
    }
}

/// Read tensor info number `i`: its name, dimensions, type and data offset,
/// checking the dimension count, the size arithmetic and the alignment.
fn read_tensor_info(c: &mut Cursor<'_>, i: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
    let at = c.pos as u64;
    let name = c.string(&format!("tensor #{i} name"))?;
    let n_dims = c.u32(&format!("tensor `{name}` dimension count"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::Invalid {
            offset: at,
            message: format!("tensor `{name}` has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.count(&format!("tensor `{name}` dimensions"))?);
    }
    let type_at = c.pos as u64;
    let type_id = c.u32(&format!("tensor `{name}` type"))?;
    let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
        tensor: name.clone(),
        id: type_id,
        offset: type_at,
    })?;
    let offset = c.u64(&format!("tensor `{name}` offset"))?;
    let n_bytes = tensor_bytes(&name, &dims, ty, at)?;
    if offset % alignment != 0 {
        return Err(GgufError::Invalid {
            offset: at,
            message: format!("tensor `{name}` data offset {offset} is not aligned to {alignment}"),
        });
    }
    Ok(TensorInfo {
        name,
        dims,
        ty,
        offset,
        n_bytes,
    })
}

/// The bytes a tensor of these dimensions and type takes, or an error (at
/// the tensor info's offset `at`) when the arithmetic overflows or the row
/// length does not fill whole blocks.
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType, at: u64) -> Result<u64, GgufError> {
    // Check the row count on its own too: with dims[0] == 0 the element
    // count is 0 whatever the other dimensions are, but
    // `TensorInfo::n_rows` multiplies those alone.
    let n_rows = dims[1..]
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let n_elements = n_rows
        .and_then(|_| dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)))
        .ok_or_else(|| GgufError::Invalid {
            offset: at,
            message: format!("tensor `{name}` dimensions {dims:?} overflow"),
        })?;
    let row_bytes = ty.row_bytes(dims[0]).ok_or_else(|| GgufError::Invalid {
        offset: at,
        message: format!(
            "tensor `{name}`: row length {} is not a multiple of {}'s block of {}",
            dims[0],
            ty,
            ty.block_len()
        ),
    })?;
    row_bytes
        .checked_mul(n_elements / dims[0].max(1))
        .ok_or_else(|| GgufError::Invalid {
            offset: at,
            message: format!("tensor `{name}` size overflows"),
        })
}

/// Check that every tensor's data lies inside the image.
fn check_extents(tensors: &[TensorInfo], data_offset: u64, file_len: u64) -> Result<(), GgufError> {
    for t in tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    start: data_offset.saturating_add(t.offset),
                    len: t.n_bytes,
                    file_len,
                })
            }
        }
    }
    Ok(())
}

/// Reject an index that names the same tensor twice (the first such name in
/// sorted order is reported).
fn check_unique_names(tensors: &[TensorInfo]) -> Result<(), GgufError> {
    let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(GgufError::Invalid {
            offset: 0,
            message: format!("tensor `{}` appears twice", w[0]),
        });
    }
    Ok(())
}
