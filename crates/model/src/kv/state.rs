//! A cache's contents as bytes and back, for a store of prompt states that
//! outlives the session (RAM beyond the slots, files across restarts).
//!
//! Each layer's positions are written in position order, so a state can be
//! loaded into a cache of another context size, whose rings wrap at other
//! slots. Elements are written as the cache holds them (f16 stays f16), so a
//! loaded cache attends to exactly the bits the saved one did.

use super::{KvBuf, KvCache, KvType, LayerCache};

/// Why bytes could not be loaded into a cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvStateError {
    /// The bytes end early or hold numbers no saved cache has.
    #[error("the saved cache is malformed: {0}")]
    Malformed(&'static str),
    /// The bytes are a cache of another model, element type or shape.
    #[error("the saved cache does not fit this one: {0}")]
    Mismatch(&'static str),
}

const TAG_F32: u8 = 0;
const TAG_F16: u8 = 1;
const TAG_Q8_0: u8 = 2;

fn tag(ty: KvType) -> u8 {
    match ty {
        KvType::F32 => TAG_F32,
        KvType::F16 => TAG_F16,
        KvType::Q8_0 => TAG_Q8_0,
    }
}

impl KvBuf {
    fn kv_type(&self) -> KvType {
        match self {
            KvBuf::F32(_) => KvType::F32,
            KvBuf::F16(_) => KvType::F16,
            KvBuf::Q8_0(_) => KvType::Q8_0,
        }
    }

    /// Bytes the buffer takes.
    fn byte_len(&self) -> usize {
        self.bytes().len()
    }

    /// The buffer's bytes as the machine holds them.
    fn bytes(&self) -> &[u8] {
        match self {
            KvBuf::F32(b) => bytemuck::cast_slice(b),
            KvBuf::F16(b) => bytemuck::cast_slice(b),
            KvBuf::Q8_0(b) => b,
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            KvBuf::F32(b) => bytemuck::cast_slice_mut(b),
            KvBuf::F16(b) => bytemuck::cast_slice_mut(b),
            KvBuf::Q8_0(b) => b,
        }
    }

    /// The width in bytes of the buffer's elements (1 for Q8_0's blocks,
    /// which are bytes already).
    fn element_bytes(&self) -> usize {
        match self {
            KvBuf::F32(_) => 4,
            KvBuf::F16(_) => 2,
            KvBuf::Q8_0(_) => 1,
        }
    }

    /// Appends slots `slots` of `row` bytes each, little-endian.
    fn write_slots(&self, slots: impl Iterator<Item = usize>, row: usize, out: &mut Vec<u8>) {
        let (bytes, width) = (self.bytes(), self.element_bytes());
        for s in slots {
            let slot = &bytes[s * row..(s + 1) * row];
            if cfg!(target_endian = "little") || width == 1 {
                out.extend_from_slice(slot);
            } else {
                out.extend(slot.chunks_exact(width).flat_map(|e| e.iter().rev()));
            }
        }
    }

    /// Sets slot `s` (of `src.len()` bytes) from little-endian bytes.
    fn read_slot(&mut self, s: usize, src: &[u8]) {
        let width = self.element_bytes();
        let slot = &mut self.bytes_mut()[s * src.len()..(s + 1) * src.len()];
        if cfg!(target_endian = "little") || width == 1 {
            slot.copy_from_slice(src);
        } else {
            for (d, e) in slot.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
                d.iter_mut().zip(e.iter().rev()).for_each(|(d, e)| *d = *e);
            }
        }
    }
}

impl LayerCache {
    /// Bytes one position's keys and values take.
    fn row_bytes(&self) -> (usize, usize) {
        let per = |b: &KvBuf| b.byte_len().checked_div(self.cap).unwrap_or(0);
        (per(&self.k), per(&self.v))
    }

    /// Whether the layer keeps keys and values of its own.
    fn stores(&self) -> bool {
        self.k.byte_len() > 0
    }
}

/// Reads little-endian integers off the front of a byte slice.
struct Reader<'b>(&'b [u8]);

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], KvStateError> {
        if self.0.len() < n {
            return Err(KvStateError::Malformed("it ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, KvStateError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    fn usize(&mut self) -> Result<usize, KvStateError> {
        usize::try_from(self.u64()?).map_err(|_| KvStateError::Malformed("a count is too large"))
    }
}

impl KvCache {
    /// The element type of the cache's stored keys (F32 for a cache that
    /// stores nothing).
    fn kv_type(&self) -> KvType {
        self.layers
            .iter()
            .find(|l| l.stores())
            .map_or(KvType::F32, |l| l.k.kv_type())
    }

    /// Bytes [`KvCache::save`] writes.
    pub fn saved_len(&self) -> usize {
        17 + self
            .layers
            .iter()
            .map(|l| {
                let (k, v) = l.row_bytes();
                8 + (self.n_past - self.first_intact(l)) * (k + v)
            })
            .sum::<usize>()
    }

    /// The first position whose keys `l` still holds: a ring holds its
    /// last `cap` positions, less those a rewind has since overwritten
    /// (written up to `high`).
    fn first_intact(&self, l: &LayerCache) -> usize {
        if l.stores() {
            self.high.saturating_sub(l.cap).min(self.n_past)
        } else {
            self.n_past
        }
    }

    /// Appends the cache's positions to `out`: its element type, the
    /// positions held, and each layer's first intact position with its
    /// keys then values in position order.
    pub fn save(&self, out: &mut Vec<u8>) {
        out.reserve(self.saved_len());
        out.push(tag(self.kv_type()));
        out.extend((self.n_past as u64).to_le_bytes());
        out.extend((self.layers.len() as u64).to_le_bytes());
        for l in &self.layers {
            let first = self.first_intact(l);
            out.extend((first as u64).to_le_bytes());
            let (k, v) = l.row_bytes();
            l.k.write_slots((first..self.n_past).map(|p| p % l.cap), k, out);
            l.v.write_slots((first..self.n_past).map(|p| p % l.cap), v, out);
        }
    }

    /// Replaces the cache's contents with `bytes` from [`KvCache::save`] of
    /// a cache of the same model and element type. A ring shorter than the
    /// saved one keeps the saved positions' last `cap`. Fails, leaving the
    /// cache cleared, when the bytes are malformed, of another shape, or
    /// lack keys the next position reads (a ring saved short of its
    /// window, a context too small for them).
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), KvStateError> {
        self.clear();
        let loaded = self.load_layers(bytes);
        if loaded.is_err() {
            self.clear();
        }
        loaded
    }

    fn load_layers(&mut self, bytes: &[u8]) -> Result<(), KvStateError> {
        let mut r = Reader(bytes);
        if r.take(1)?[0] != tag(self.kv_type()) {
            return Err(KvStateError::Mismatch("its element type differs"));
        }
        let n = r.usize()?;
        if n > self.n_ctx {
            return Err(KvStateError::Mismatch(
                "it holds more positions than the context",
            ));
        }
        if r.usize()? != self.layers.len() {
            return Err(KvStateError::Mismatch("its layer count differs"));
        }
        let mut high = n;
        for l in self.layers.iter_mut() {
            let first = r.usize()?;
            if first > n {
                return Err(KvStateError::Malformed("a layer starts past its end"));
            }
            let (kb, vb) = l.row_bytes();
            let keys = r.take(
                (n - first)
                    .checked_mul(kb)
                    .ok_or(KvStateError::Malformed("too long"))?,
            )?;
            let values = r.take(
                (n - first)
                    .checked_mul(vb)
                    .ok_or(KvStateError::Malformed("too long"))?,
            )?;
            if !l.stores() {
                if first != n {
                    return Err(KvStateError::Mismatch("a shared layer holds keys"));
                }
                continue;
            }
            let kept = first.max(n.saturating_sub(l.cap));
            // The next position reads from `n + 1 - window` on (all of a
            // global layer's).
            let reads_from = l.window.map_or(0, |w| (n + 1).saturating_sub(w));
            if kept > reads_from {
                return Err(KvStateError::Mismatch(
                    "a layer lacks keys the next position reads",
                ));
            }
            for p in kept..n {
                let i = p - first;
                l.k.read_slot(p % l.cap, &keys[i * kb..(i + 1) * kb]);
                l.v.read_slot(p % l.cap, &values[i * vb..(i + 1) * vb]);
            }
            if kept > 0 {
                // Only `kept..` is intact: what a cache written up to
                // `kept + cap` would hold (see `LayerCache::can_rewind`).
                high = high.max(kept + l.cap);
            }
        }
        if !r.0.is_empty() {
            return Err(KvStateError::Malformed("bytes follow its last layer"));
        }
        self.n_past = n;
        self.high = high;
        Ok(())
    }
}
