//! A cache's contents as bytes and back, for a store of prompt states that
//! outlives the session (RAM beyond the slots, files across restarts).
//!
//! Each layer's positions are written in position order, so a state can be
//! loaded into a cache of another context size, whose rings wrap at other
//! slots. Elements are written as the cache holds them (f16 stays f16), so a
//! loaded cache attends to exactly the bits the saved one did. A saved
//! cache may come back in parts ([`SavedKv`]) cut anywhere: a store keeps
//! the rows of a prefix several states share once ([`saved_rows`] says
//! where they lie).

use super::{KvBuf, KvCache, KvType, LayerCache};
use std::borrow::Cow;
use std::sync::Arc;

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

    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
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

/// A saved cache's bytes ([`KvCache::save`]) in parts, read one after
/// another: one part for a state just saved, several where a store shares
/// some of them between states. Two are equal when their bytes are,
/// however they are cut.
#[derive(Debug, Clone, Default)]
pub struct SavedKv {
    parts: Vec<Arc<[u8]>>,
}

impl SavedKv {
    /// Positions in a block: [`KvCache::save`] starts a part at every
    /// position of a layer's rows that is a multiple of it, so a store can
    /// share whole blocks of rows between states without copying them.
    pub const BLOCK_ROWS: usize = 64;

    /// Bytes in one part.
    pub fn whole(bytes: Vec<u8>) -> Self {
        Self {
            parts: vec![bytes.into()],
        }
    }

    /// A copy of `bytes` cut as [`KvCache::save`] cuts its parts (one part
    /// when they are not a saved cache's).
    pub fn cut_from(bytes: &[u8]) -> Self {
        Self::read_cut(&mut &bytes[..], bytes.len()).unwrap_or_else(|_| Self::whole(bytes.to_vec()))
    }

    /// Reads `len` bytes of a saved cache from `r`, cut as
    /// [`KvCache::save`] cuts them while they read as one (the rest in one
    /// part once they do not: loading refuses them then).
    pub fn read_cut(r: &mut impl std::io::Read, len: usize) -> std::io::Result<Self> {
        let mut cut = ReadCut {
            r,
            left: len,
            parts: Vec::new(),
        };
        let head = cut.part(17)?;
        let word = |b: &[u8], i: usize| -> Option<usize> {
            let w = b.get(8 * i..8 * i + 8)?.try_into().ok()?;
            usize::try_from(u64::from_le_bytes(w)).ok()
        };
        let words = head.get(1..).unwrap_or_default();
        if let (Some(n), Some(count)) = (word(words, 0), word(words, 1)) {
            for _ in 0..count {
                let layer = cut.part(24)?;
                let (Some(first), Some(k), Some(v)) =
                    (word(&layer, 0), word(&layer, 1), word(&layer, 2))
                else {
                    break;
                };
                let rows = n.checked_sub(first);
                let fits = rows.and_then(|r| r.checked_mul(k)?.checked_add(r.checked_mul(v)?));
                if fits.is_none_or(|b| b > cut.left) {
                    break;
                }
                for row in [k, v] {
                    for (from, to) in block_spans(first, n) {
                        cut.part((to - from) * row)?;
                    }
                }
            }
        }
        cut.part(cut.left)?;
        Ok(Self { parts: cut.parts })
    }

    /// Bytes in these parts, in order.
    pub fn from_parts(parts: Vec<Arc<[u8]>>) -> Self {
        Self { parts }
    }

    /// The parts.
    pub fn parts(&self) -> &[Arc<[u8]>] {
        &self.parts
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in one piece.
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts.concat()
    }
}

impl PartialEq for SavedKv {
    fn eq(&self, other: &Self) -> bool {
        fn bytes(s: &SavedKv) -> impl Iterator<Item = &u8> {
            s.parts.iter().flat_map(|p| p.iter())
        }
        self.len() == other.len() && bytes(self).eq(bytes(other))
    }
}

impl Eq for SavedKv {}

/// Parts read off a stream, at most `left` bytes more.
struct ReadCut<'r, R> {
    r: &'r mut R,
    left: usize,
    parts: Vec<Arc<[u8]>>,
}

impl<R: std::io::Read> ReadCut<'_, R> {
    /// Reads the next part, of `n` bytes or what is left; returns it.
    fn part(&mut self, n: usize) -> std::io::Result<Arc<[u8]>> {
        let n = n.min(self.left);
        let mut buf = vec![0u8; n];
        self.r.read_exact(&mut buf)?;
        self.left -= n;
        let part: Arc<[u8]> = buf.into();
        if n > 0 {
            self.parts.push(Arc::clone(&part));
        }
        Ok(part)
    }
}

/// Reads little-endian integers and rows off the front of a saved cache's
/// parts.
struct Reader<'b> {
    rest: &'b [Arc<[u8]>],
    part: &'b [u8],
}

impl<'b> Reader<'b> {
    fn new(parts: &'b [Arc<[u8]>]) -> Self {
        Self {
            rest: parts,
            part: &[],
        }
    }

    /// Moves past empty parts.
    fn settle(&mut self) {
        while self.part.is_empty() {
            let Some((next, rest)) = self.rest.split_first() else {
                return;
            };
            (self.part, self.rest) = (next, rest);
        }
    }

    /// The next `n` bytes: borrowed when one part holds them, gathered
    /// when they straddle parts.
    fn take(&mut self, n: usize) -> Result<Cow<'b, [u8]>, KvStateError> {
        self.settle();
        if self.part.len() >= n {
            let (head, tail) = self.part.split_at(n);
            self.part = tail;
            return Ok(Cow::Borrowed(head));
        }
        let mut out = Vec::with_capacity(n.min(1 << 20));
        while out.len() < n {
            self.settle();
            if self.part.is_empty() {
                return Err(KvStateError::Malformed("it ends early"));
            }
            let k = self.part.len().min(n - out.len());
            out.extend_from_slice(&self.part[..k]);
            self.part = &self.part[k..];
        }
        Ok(Cow::Owned(out))
    }

    /// Moves past `n` bytes without gathering them.
    fn skip(&mut self, mut n: usize) -> Result<(), KvStateError> {
        while n > 0 {
            self.settle();
            if self.part.is_empty() {
                return Err(KvStateError::Malformed("it ends early"));
            }
            let k = self.part.len().min(n);
            self.part = &self.part[k..];
            n -= k;
        }
        Ok(())
    }

    fn u64(&mut self) -> Result<u64, KvStateError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes((*b).try_into().unwrap_or_default()))
    }

    fn usize(&mut self) -> Result<usize, KvStateError> {
        usize::try_from(self.u64()?).map_err(|_| KvStateError::Malformed("a count is too large"))
    }

    fn is_done(&mut self) -> bool {
        self.settle();
        self.part.is_empty()
    }
}

/// Where one layer's rows lie in a saved cache's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedLayerRows {
    /// The position of its first row (later ones follow in order).
    pub first: usize,
    /// Byte offset of its first key row.
    pub keys_at: usize,
    /// Bytes of one key row.
    pub key_row: usize,
    /// Byte offset of its first value row.
    pub values_at: usize,
    /// Bytes of one value row.
    pub value_row: usize,
}

/// The positions a saved cache holds and where each layer's rows lie in
/// its bytes ([`KvCache::save`]'s), for a store that shares blocks of them.
pub fn saved_rows(kv: &SavedKv) -> Result<(usize, Vec<SavedLayerRows>), KvStateError> {
    let mut r = Reader::new(kv.parts());
    r.take(1)?;
    let (n, count) = (r.usize()?, r.usize()?);
    let mut at = 17usize;
    let mut layers = Vec::new();
    for _ in 0..count {
        let (first, key_row, value_row) = (r.usize()?, r.usize()?, r.usize()?);
        if first > n {
            return Err(KvStateError::Malformed("a layer starts past its end"));
        }
        let span = |row: usize| {
            (n - first)
                .checked_mul(row)
                .ok_or(KvStateError::Malformed("too long"))
        };
        let (keys, values) = (span(key_row)?, span(value_row)?);
        r.skip(keys)?;
        r.skip(values)?;
        let keys_at = at + 24;
        layers.push(SavedLayerRows {
            first,
            keys_at,
            key_row,
            values_at: keys_at + keys,
            value_row,
        });
        at = keys_at + keys + values;
    }
    match r.is_done() {
        true => Ok((n, layers)),
        false => Err(KvStateError::Malformed("bytes follow its last layer")),
    }
}

/// The runs of positions `first..n` splits into where a position is a
/// multiple of [`SavedKv::BLOCK_ROWS`]: the parts a layer's rows are cut
/// into.
fn block_spans(first: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let b = SavedKv::BLOCK_ROWS;
    let starts = (first / b + 1..)
        .map(move |k| k * b)
        .take_while(move |&p| p < n);
    std::iter::once(first)
        .chain(starts.clone())
        .zip(starts.chain(std::iter::once(n)))
        .filter(|(from, to)| from < to)
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

    /// Bytes [`KvCache::save`] gives.
    pub fn saved_len(&self) -> usize {
        17 + self
            .layers
            .iter()
            .map(|l| {
                let (k, v) = l.row_bytes();
                24 + (self.n_past - self.first_intact(l)) * (k + v)
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

    /// The cache's positions: its element type, the positions held, and
    /// each layer's first intact position and row widths with its keys then
    /// values in position order; in parts, a layer's rows cut where a
    /// position is a multiple of [`SavedKv::BLOCK_ROWS`].
    pub fn save(&self) -> SavedKv {
        let mut parts: Vec<Arc<[u8]>> = Vec::new();
        let mut head = vec![tag(self.kv_type())];
        head.extend((self.n_past as u64).to_le_bytes());
        head.extend((self.layers.len() as u64).to_le_bytes());
        for l in &self.layers {
            let first = self.first_intact(l);
            let (k, v) = l.row_bytes();
            for word in [first, k, v] {
                head.extend((word as u64).to_le_bytes());
            }
            parts.push(std::mem::take(&mut head).into());
            for (buf, row) in [(&l.k, k), (&l.v, v)] {
                for (from, to) in block_spans(first, self.n_past) {
                    let mut out = Vec::with_capacity((to - from) * row);
                    buf.write_slots((from..to).map(|p| p % l.cap), row, &mut out);
                    parts.push(out.into());
                }
            }
        }
        if !head.is_empty() {
            parts.push(head.into());
        }
        SavedKv { parts }
    }

    /// Replaces the cache's contents with `bytes` from [`KvCache::save`] of
    /// a cache of the same model and element type. A ring shorter than the
    /// saved one keeps the saved positions' last `cap`. Fails, leaving the
    /// cache cleared, when the bytes are malformed, of another shape, or
    /// lack keys the next position reads (a ring saved short of its
    /// window, a context too small for them).
    pub fn load(&mut self, saved: &SavedKv) -> Result<(), KvStateError> {
        self.clear();
        let loaded = self.load_layers(Reader::new(saved.parts()));
        if loaded.is_err() {
            self.clear();
        }
        loaded
    }

    fn load_layers(&mut self, mut r: Reader<'_>) -> Result<(), KvStateError> {
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
            high = high.max(load_layer(l, n, &mut r)?);
        }
        if !r.is_done() {
            return Err(KvStateError::Malformed("bytes follow its last layer"));
        }
        self.n_past = n;
        self.high = high;
        Ok(())
    }
}

/// Loads one layer's rows of a cache holding `n` positions from `r`;
/// returns the highest position its ring may be taken to have been
/// written up to.
fn load_layer(l: &mut LayerCache, n: usize, r: &mut Reader<'_>) -> Result<usize, KvStateError> {
    let first = r.usize()?;
    if first > n {
        return Err(KvStateError::Malformed("a layer starts past its end"));
    }
    let (kb, vb) = l.row_bytes();
    if (r.usize()?, r.usize()?) != (kb, vb) {
        return Err(KvStateError::Mismatch("its rows are of another width"));
    }
    if !l.stores() {
        return match first == n {
            true => Ok(n),
            false => Err(KvStateError::Mismatch("a shared layer holds keys")),
        };
    }
    let kept = first.max(n.saturating_sub(l.cap));
    // The next position reads from `n + 1 - window` on (all of a global
    // layer's).
    let reads_from = l.window.map_or(0, |w| (n + 1).saturating_sub(w));
    if kept > reads_from {
        return Err(KvStateError::Mismatch(
            "a layer lacks keys the next position reads",
        ));
    }
    // Rows before `kept` are past what this ring holds: skipped unread.
    for (buf, width) in [(&mut l.k, kb), (&mut l.v, vb)] {
        r.skip((kept - first) * width)?;
        for p in kept..n {
            buf.read_slot(p % l.cap, &r.take(width)?);
        }
    }
    // Only `kept..` is intact: what a cache written up to `kept + cap`
    // would hold (see `LayerCache::can_rewind`).
    Ok(if kept > 0 { kept + l.cap } else { n })
}
