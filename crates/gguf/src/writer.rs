//! Writing GGUF v3 images (quantize, synthetic models, test fixtures).

use crate::value::{MetaArray, MetaValue};
use crate::{GgmlType, GgufError, DEFAULT_ALIGNMENT, MAGIC};
use std::io::Write;

/// Collects metadata and tensors and writes them as one GGUF v3 image.
#[derive(Debug, Default, Clone)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
    alignment: Option<u64>,
}

#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

impl GgufWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add (or replace) a metadata entry. `general.alignment` also sets the
    /// alignment used for tensor data.
    pub fn set(&mut self, key: impl Into<String>, value: MetaValue) -> &mut Self {
        let key = key.into();
        if key == "general.alignment" {
            self.alignment = value.as_u64();
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Add a tensor; `data` must hold exactly the bytes its type and shape take.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufError> {
        let name = name.into();
        let rows: u64 = dims.iter().skip(1).product();
        let expected = dims
            .first()
            .and_then(|&d0| ty.row_bytes(d0))
            .and_then(|r| r.checked_mul(rows));
        if expected != Some(data.len() as u64) {
            return Err(GgufError::Invalid {
                offset: 0,
                message: format!(
                    "tensor `{name}` of type {ty} and shape {dims:?} needs {expected:?} bytes, got {}",
                    data.len()
                ),
            });
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    /// Serialise to bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write_to(&mut out);
        out
    }

    /// Serialise into any writer.
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        let alignment = self
            .alignment
            .filter(|a| a.is_power_of_two())
            .unwrap_or(DEFAULT_ALIGNMENT);
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut head, k);
            head.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut head, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).div_ceil(alignment) * alignment;
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            put_str(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ty.id().to_le_bytes());
            head.extend_from_slice(&off.to_le_bytes());
        }
        let pad = (head.len() as u64).div_ceil(alignment) * alignment - head.len() as u64;
        head.resize(head.len() + pad as usize, 0);
        w.write_all(&head)?;
        for (i, t) in self.tensors.iter().enumerate() {
            w.write_all(&t.data)?;
            if i + 1 < self.tensors.len() {
                let pad = offsets[i + 1] - offsets[i] - t.data.len() as u64;
                w.write_all(&vec![0u8; pad as usize])?;
            }
        }
        Ok(())
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend_from_slice(&(a.element_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        MetaArray::U8(v) => out.extend_from_slice(v),
        MetaArray::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
        MetaArray::U16(v) => each!(v),
        MetaArray::I16(v) => each!(v),
        MetaArray::U32(v) => each!(v),
        MetaArray::I32(v) => each!(v),
        MetaArray::F32(v) => each!(v),
        MetaArray::U64(v) => each!(v),
        MetaArray::I64(v) => each!(v),
        MetaArray::F64(v) => each!(v),
        MetaArray::Bool(v) => out.extend(v.iter().map(|&x| x as u8)),
        MetaArray::String(v) => v.iter().for_each(|s| put_str(out, s)),
        MetaArray::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
    }
}
