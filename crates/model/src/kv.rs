//! The key/value cache. Sliding-window layers keep a ring a little longer than
//! their window, so their memory does not grow with the context and a
//! conversation can still rewind a few tokens after the ring has wrapped;
//! global layers keep the whole context.

use crate::{Config, LayerKind, SeqInput};
use half::f16;
use quant::vector::Rows;

mod state;
mod storage_type;
pub use state::{saved_rows, KvStateError, SavedKv, SavedLayerRows};
pub use storage_type::KvType;

/// Positions a sliding-window ring of `window` keeps beyond its window: one
/// window, at least 64 and at most 512. A rewind of up to this many tokens
/// (plus one) stays possible after the ring has wrapped. The next turn of a
/// conversation re-tokenizes the end of the last answer a little
/// differently (a few tokens), and a regenerated or edited message goes
/// back past the whole last answer and question (hundreds); without the
/// slack either would recompute the whole prompt. llama.cpp's sliding
/// cache keeps its batch (512) beyond the window for the same reason.
pub fn ring_slack(window: usize) -> usize {
    window.clamp(64, 512)
}

/// The elements of one side (keys or values) of a layer's cache.
#[derive(Debug, Clone)]
pub(crate) enum KvBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Q8_0 blocks (see [`quant::vector::Rows::Q8_0`]).
    Q8_0(Vec<u8>),
}

impl KvBuf {
    fn zeros(ty: KvType, n: usize) -> Self {
        match ty {
            KvType::F32 => KvBuf::F32(vec![0.0; n]),
            // Zeroed by the allocator (pages the kernel zeroes when first
            // touched), not written: a slot's cache is made when a model
            // loads for a waiting request.
            KvType::F16 => KvBuf::F16(bytemuck::zeroed_vec(n)),
            KvType::Q8_0 => KvBuf::Q8_0(vec![0; quant::vector::q8_0_bytes(n)]),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows().len()
    }

    /// Every slot, for the attention kernels.
    pub(crate) fn rows(&self) -> Rows<'_> {
        match self {
            KvBuf::F32(v) => Rows::F32(v),
            KvBuf::F16(v) => Rows::F16(v),
            KvBuf::Q8_0(v) => Rows::Q8_0(v),
        }
    }

    /// Slots `first..first + keep` of `width` elements each, wrapping
    /// around the end of the buffer after `to_end` of them.
    fn ring_slots(
        &mut self,
        first: usize,
        to_end: usize,
        keep: usize,
        width: usize,
    ) -> Vec<SlotMut<'_>> {
        fn split<T>(
            buf: &mut [T],
            first: usize,
            to_end: usize,
            keep: usize,
            w: usize,
        ) -> Vec<&mut [T]> {
            let (wrapped, from) = buf.split_at_mut(first * w);
            from[..to_end * w]
                .chunks_exact_mut(w)
                .chain(wrapped[..(keep - to_end) * w].chunks_exact_mut(w))
                .collect()
        }
        match self {
            KvBuf::F32(b) => split(b, first, to_end, keep, width)
                .into_iter()
                .map(SlotMut::F32)
                .collect(),
            KvBuf::F16(b) => split(b, first, to_end, keep, width)
                .into_iter()
                .map(SlotMut::F16)
                .collect(),
            KvBuf::Q8_0(b) => split(b, first, to_end, keep, quant::vector::q8_0_bytes(width))
                .into_iter()
                .map(SlotMut::Q8_0)
                .collect(),
        }
    }

    /// Stores `src` in slot `slot` of `src.len()` elements.
    fn store(&mut self, slot: usize, src: &[f32]) {
        let range = slot * src.len()..(slot + 1) * src.len();
        let mut dst = match self {
            KvBuf::F32(b) => SlotMut::F32(&mut b[range]),
            KvBuf::F16(b) => SlotMut::F16(&mut b[range]),
            KvBuf::Q8_0(b) => {
                let bytes = quant::vector::q8_0_bytes;
                SlotMut::Q8_0(&mut b[bytes(range.start)..bytes(range.end)])
            }
        };
        dst.store(src);
    }
}

/// One cache slot to write.
#[derive(Debug)]
pub(crate) enum SlotMut<'c> {
    F32(&'c mut [f32]),
    F16(&'c mut [f16]),
    /// The slot's Q8_0 blocks.
    Q8_0(&'c mut [u8]),
}

impl SlotMut<'_> {
    /// Stores `src` (as long as the slot) in it.
    pub(crate) fn store(&mut self, src: &[f32]) {
        match self {
            SlotMut::F32(d) => d.copy_from_slice(src),
            SlotMut::F16(d) => quant::vector::store_f16(src, d),
            SlotMut::Q8_0(d) => quant::vector::store_q8_0(src, d),
        }
    }

    /// Stores `src` in the slot and sets it to what the slot now holds:
    /// [`KvType::round`] and [`Self::store`] with one conversion.
    pub(crate) fn store_rounded(&mut self, src: &mut [f32]) {
        self.store(src);
        match self {
            SlotMut::F32(_) => {}
            SlotMut::F16(d) => Rows::F16(d).copy_to(0, src),
            SlotMut::Q8_0(d) => Rows::Q8_0(d).copy_to(0, src),
        }
    }
}

/// Cached keys and values of one layer.
#[derive(Debug, Clone)]
pub(crate) struct LayerCache {
    /// `cap` slots of `n_kv_heads * head_dim` keys (the layer's own sizes);
    /// empty on layers that reuse another layer's KV.
    pub k: KvBuf,
    /// `cap` slots of `n_kv_heads * value_dim` values.
    pub v: KvBuf,
    /// Number of slots; position `p` lives in slot `p % cap`.
    pub cap: usize,
    /// The window of a sliding layer (`None`: global, `cap` is the context).
    pub window: Option<usize>,
}

impl LayerCache {
    /// Whether the cache still has every key a token at position `n` attends
    /// to, once the positions from `n` on are forgotten. `high` is one past
    /// the highest position ever written since the cache was cleared: after
    /// an earlier rewind, writes up to `high` may have overwritten slots of
    /// positions below the current end, so only `high - cap..` is intact.
    fn can_rewind(&self, high: usize, n: usize) -> bool {
        match self.window {
            None => true,
            // The token at `n` reads n + 1 - window ..n.
            Some(w) => high <= self.cap || n + 1 + self.cap >= w + high,
        }
    }
}

/// Slots a layer's cache needs for a context of `n_ctx`.
fn capacity(l: &LayerKind, n_ctx: usize) -> usize {
    l.window
        .map_or(n_ctx, |w| w.saturating_add(ring_slack(w)).min(n_ctx))
        .max(1)
}

/// The key/value cache of one sequence.
#[derive(Debug, Clone)]
pub struct KvCache {
    pub(crate) layers: Vec<LayerCache>,
    n_ctx: usize,
    n_past: usize,
    /// One past the highest position written since the cache was cleared.
    high: usize,
    /// The adapters its keys and values were computed with, and the next
    /// tokens will be.
    adapters: nn::Adapters,
}

impl KvCache {
    /// A cache for up to `n_ctx` positions, its elements of type `ty`.
    pub fn new(cfg: &Config, n_ctx: usize, ty: KvType) -> Self {
        Self::with_storage(cfg, n_ctx, ty, true)
    }

    /// A cache that stores nothing, for a batch that holds its whole
    /// sequence (an embedding model's text): attention reads the batch's
    /// own keys, and nothing is kept for later.
    pub(crate) fn uncached(cfg: &Config, n_ctx: usize) -> Self {
        Self::with_storage(cfg, n_ctx, KvType::F32, false)
    }

    /// Each layer's ring (or whole context) for `n_ctx` positions; its
    /// buffers empty unless `stores`.
    fn with_storage(cfg: &Config, n_ctx: usize, ty: KvType, stores: bool) -> Self {
        let layers = cfg
            .layers
            .iter()
            .map(|l| {
                let cap = capacity(l, n_ctx);
                let own = if stores && l.kv_source.is_none() {
                    cap
                } else {
                    0
                };
                LayerCache {
                    k: KvBuf::zeros(ty, own * l.n_kv_heads * l.head_dim),
                    v: KvBuf::zeros(ty, own * l.n_kv_heads * l.value_dim),
                    cap,
                    window: l.window,
                }
            })
            .collect();
        Self {
            layers,
            n_ctx,
            n_past: 0,
            high: 0,
            adapters: nn::Adapters::default(),
        }
    }

    /// Bytes a cache for `n_ctx` positions of type `ty` takes, computable
    /// before allocating.
    pub fn bytes_for(cfg: &Config, n_ctx: usize, ty: KvType) -> usize {
        cfg.layers
            .iter()
            .filter(|l| l.kv_source.is_none())
            .map(|l| ty.bytes_of(capacity(l, n_ctx) * l.n_kv_heads * (l.head_dim + l.value_dim)))
            .sum()
    }

    /// Bytes of cached keys and values a decode step at position `pos`
    /// reads from a cache of type `ty`: every layer with its own cache reads
    /// the earlier positions its window (or the whole context) holds.
    pub fn bytes_read_at(cfg: &Config, pos: usize, ty: KvType) -> usize {
        cfg.layers
            .iter()
            .filter(|l| l.kv_source.is_none())
            .map(|l| {
                let seen = l.window.map_or(pos, |w| pos.min(w.saturating_sub(1)));
                ty.bytes_of(seen * l.n_kv_heads * (l.head_dim + l.value_dim))
            })
            .sum()
    }

    /// Positions already processed.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Maximum positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Forget positions from `n` on, so generation can resume from a shared
    /// prefix. A sliding-window ring that has wrapped keeps only its last
    /// `window + ring_slack(window)` positions, so a rewind is allowed only to 0 or
    /// while every ring still holds the window the token at `n` reads; returns
    /// whether the rewind happened (when not, the caller must recompute).
    pub fn truncate(&mut self, n: usize) -> bool {
        if n >= self.n_past {
            return n == self.n_past;
        }
        if n == 0 {
            self.clear();
            return true;
        }
        let ok = self.layers.iter().all(|l| l.can_rewind(self.high, n));
        if ok {
            self.n_past = n;
        }
        ok
    }

    /// The adapters the cache's contents were computed with.
    pub fn adapters(&self) -> &nn::Adapters {
        &self.adapters
    }

    /// Runs the next tokens with `adapters`. A cache computed with other
    /// adapters is cleared first (its keys and values would be another
    /// model's); returns whether it was.
    pub fn use_adapters(&mut self, adapters: &nn::Adapters) -> bool {
        if *adapters == self.adapters {
            return false;
        }
        self.clear();
        self.adapters = adapters.clone();
        true
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.n_past = 0;
        self.high = 0;
    }

    pub(crate) fn advance(&mut self, n: usize) {
        self.n_past += n;
        self.high = self.high.max(self.n_past);
    }
}

/// One batch row's place in its sequence's cache of a layer: its key slot and
/// its value slot.
pub(crate) type KvSlot<'c> = (SlotMut<'c>, SlotMut<'c>);

/// Whether a batch of `n` rows at positions `pos0..` may write its keys and
/// values into `cache` before its own attention reads the cache. Attention
/// reads the batch's keys from the batch's buffers and only earlier
/// positions from the cache, so the writes are harmless unless they
/// overwrite an earlier position some row still reads: on a wrapped ring,
/// the slot of `pos0 + r` held `pos0 + r - cap`, and the batch's first row
/// reads from `pos0 + 1 - window` on.
fn can_store_before_attention(cache: &LayerCache, pos0: usize, n: usize) -> bool {
    match cache.window {
        None => true,
        Some(w) => pos0 + n <= cache.cap || n + w <= cache.cap + 1,
    }
}

/// Every batch row's slots in layer `li`'s caches (rows laid out as
/// `seq_start` says; `None` for the rows a ring shorter than the batch does
/// not keep), so the operation that finishes the keys and values can store
/// them as it goes instead of one thread copying them all after attention.
/// `None` where some sequence's batch may not be stored before its
/// attention (see [`can_store_before_attention`]); then
/// [`store_batch_kv`] stores it after. The slots are those
/// [`store_batch_kv`] writes.
pub(crate) fn slots_before_attention<'c>(
    kind: &LayerKind,
    li: usize,
    seqs: &'c mut [SeqInput<'_>],
    seq_start: &[usize],
) -> Option<Vec<Option<KvSlot<'c>>>> {
    let kd = kind.n_kv_heads * kind.head_dim;
    let vd = kind.n_kv_heads * kind.value_dim;
    let safe = seqs.iter().enumerate().all(|(j, sq)| {
        let n = seq_start[j + 1] - seq_start[j];
        sq.cache.layers.get(li).is_some_and(|c| {
            c.k.len() == c.cap * kd
                && c.v.len() == c.cap * vd
                && can_store_before_attention(c, sq.cache.n_past(), n)
        })
    });
    if !safe || kd == 0 || vd == 0 {
        return None;
    }
    let rows = seq_start.last().copied().unwrap_or(0);
    let mut slots: Vec<Option<KvSlot<'c>>> = Vec::with_capacity(rows);
    for (j, sq) in seqs.iter_mut().enumerate() {
        let n = seq_start[j + 1] - seq_start[j];
        let pos0 = sq.cache.n_past();
        let LayerCache { k, v, cap, .. } = &mut sq.cache.layers[li];
        let cap = *cap;
        // The last `keep` rows go to slots from `first` on, wrapping at `cap`.
        let keep = n.min(cap);
        slots.extend((0..n - keep).map(|_| None));
        let first = (pos0 + n - keep) % cap;
        let to_end = (cap - first).min(keep);
        let k_rows = k.ring_slots(first, to_end, keep, kd);
        let v_rows = v.ring_slots(first, to_end, keep, vd);
        slots.extend(k_rows.into_iter().zip(v_rows).map(Some));
    }
    Some(slots)
}

/// Write each sequence's keys and values of layer `li` (rows laid out as
/// `seq_start` says) into its own cache.
pub(crate) fn store_batch_kv(
    kind: &LayerKind,
    li: usize,
    seqs: &mut [SeqInput<'_>],
    seq_start: &[usize],
    k: &[f32],
    v: &[f32],
) {
    let kd = kind.n_kv_heads * kind.head_dim;
    let vd = kind.n_kv_heads * kind.value_dim;
    for (j, sq) in seqs.iter_mut().enumerate() {
        let (r0, r1) = (seq_start[j], seq_start[j + 1]);
        let pos0 = sq.cache.n_past();
        let cache = &mut sq.cache.layers[li];
        // A ring keeps only the last `cap` of a long batch.
        for r in (r1 - r0).saturating_sub(cache.cap)..r1 - r0 {
            let slot = (pos0 + r) % cache.cap;
            let row = r0 + r;
            cache.k.store(slot, &k[row * kd..(row + 1) * kd]);
            cache.v.store(slot, &v[row * vd..(row + 1) * vd]);
        }
    }
}

#[cfg(test)]
mod tests;
