//! The key/value cache. Sliding-window layers keep a ring a little longer than
//! their window, so their memory does not grow with the context and a
//! conversation can still rewind a few tokens after the ring has wrapped;
//! global layers keep the whole context.

use crate::{Config, LayerKind, SeqInput};
use quant::ThreadPool;
use std::sync::Mutex;

/// Positions a sliding-window ring keeps beyond its window. A rewind of up to
/// this many tokens (plus one) stays possible after the ring has wrapped: the
/// next turn of a conversation usually re-tokenizes the end of the last answer
/// a little differently, and without this slack it would recompute the whole
/// prompt.
pub const RING_SLACK: usize = 64;

/// Cached keys and values of one layer.
#[derive(Debug, Clone)]
pub(crate) struct LayerCache {
    /// `cap` slots of `n_kv_heads * head_dim` keys (the layer's own sizes);
    /// empty on layers that reuse another layer's KV.
    pub k: Vec<f32>,
    /// `cap` slots of `n_kv_heads * value_dim` values.
    pub v: Vec<f32>,
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
        .map_or(n_ctx, |w| w.saturating_add(RING_SLACK).min(n_ctx))
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
}

impl KvCache {
    /// A cache for up to `n_ctx` positions.
    pub fn new(cfg: &Config, n_ctx: usize) -> Self {
        let layers = cfg
            .layers
            .iter()
            .map(|l| {
                let cap = capacity(l, n_ctx);
                let own = if l.kv_source.is_none() { cap } else { 0 };
                LayerCache {
                    k: vec![0.0; own * l.n_kv_heads * l.head_dim],
                    v: vec![0.0; own * l.n_kv_heads * l.value_dim],
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
        }
    }

    /// Bytes a cache for `n_ctx` positions takes, computable before allocating.
    pub fn bytes_for(cfg: &Config, n_ctx: usize) -> usize {
        cfg.layers
            .iter()
            .filter(|l| l.kv_source.is_none())
            .map(|l| {
                capacity(l, n_ctx)
                    * l.n_kv_heads
                    * (l.head_dim + l.value_dim)
                    * std::mem::size_of::<f32>()
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
    /// `window + RING_SLACK` positions, so a rewind is allowed only to 0 or
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

/// Write each sequence's keys and values of layer `li` (rows laid out as
/// `seq_start` says) into its own cache, a prefill's rows over the pool.
pub(crate) fn store_batch_kv(
    pool: &ThreadPool,
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
        if cache.cap == 0 {
            continue;
        }
        for (slot, row, len) in ring_runs(pos0, r1 - r0, cache.cap) {
            let row = r0 + row;
            if len == 0 {
                continue;
            }
            copy_kv_rows(
                pool,
                [
                    &mut cache.k[slot * kd..(slot + len) * kd],
                    &mut cache.v[slot * vd..(slot + len) * vd],
                ],
                [
                    &k[row * kd..(row + len) * kd],
                    &v[row * vd..(row + len) * vd],
                ],
                [kd, vd],
            );
        }
    }
}

/// Where `len` rows of positions `pos0..` go in a ring of `cap` (> 0)
/// slots, as runs of `(first slot, first row, rows)`: row `r` to slot
/// `(pos0 + r) % cap`, only the last `cap` rows of a longer batch kept. The
/// rows are consecutive slots that wrap to slot 0 at most once, so two runs.
fn ring_runs(pos0: usize, len: usize, cap: usize) -> [(usize, usize, usize); 2] {
    let first = len.saturating_sub(cap);
    let n = len - first;
    let s0 = (pos0 + first) % cap;
    let head = n.min(cap - s0);
    [(s0, first, head), (0, first + head, n - head)]
}

/// Values below which [`copy_kv_rows`] copies on the calling thread: a
/// parallel operation costs a few microseconds of meeting, a decode step's
/// one row a fraction of one.
const PARALLEL_COPY_MIN: usize = 1 << 16;

/// Copies the rows of `src` (keys, values; `width` values a row) into
/// `dst`, split by rows over the pool when they are many. A prefill wrote
/// its keys and values on every thread; one thread gathering megabytes of
/// them was most of the serial time before a 4B's output projection (120
/// µs a token at 16 threads).
fn copy_kv_rows(pool: &ThreadPool, dst: [&mut [f32]; 2], src: [&[f32]; 2], width: [usize; 2]) {
    let [dk, dv] = dst;
    let rows = dk.len().checked_div(width[0]).unwrap_or(0);
    if dk.len() + dv.len() < PARALLEL_COPY_MIN || width.contains(&0) || pool.threads() < 2 {
        dk.copy_from_slice(src[0]);
        dv.copy_from_slice(src[1]);
        return;
    }
    let per = rows.div_ceil(pool.threads());
    // Each task takes its own pair of row runs out of its own slot.
    let parts: Vec<Mutex<(&mut [f32], &mut [f32])>> = dk
        .chunks_mut(per * width[0])
        .zip(dv.chunks_mut(per * width[1]))
        .map(Mutex::new)
        .collect();
    pool.run(parts.len(), |t| {
        let mut part = parts[t].lock().unwrap_or_else(|p| p.into_inner());
        let (k, v) = &mut *part;
        k.copy_from_slice(&src[0][t * per * width[0]..][..k.len()]);
        v.copy_from_slice(&src[1][t * per * width[1]..][..v.len()]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two runs put every kept row where the one-row-at-a-time rule
    /// does, and nothing else.
    #[test]
    fn ring_runs_follow_the_slot_rule() {
        for cap in [1usize, 2, 5, 16] {
            for pos0 in 0..40 {
                for len in 0..3 * cap + 3 {
                    let mut want = vec![None; cap];
                    for r in len.saturating_sub(cap)..len {
                        want[(pos0 + r) % cap] = Some(r);
                    }
                    let mut got = vec![None; cap];
                    for (slot, row, n) in ring_runs(pos0, len, cap) {
                        for i in 0..n {
                            assert!(got[slot + i].is_none(), "slot written twice");
                            got[slot + i] = Some(row + i);
                        }
                    }
                    assert_eq!(got, want, "cap {cap}, pos0 {pos0}, len {len}");
                }
            }
        }
    }

    /// Split over the pool or not, the copy is the copy.
    #[test]
    fn parallel_copy_copies_every_row() {
        let pool = ThreadPool::new(3);
        for (rows, kd, vd) in [
            (1usize, 8usize, 8usize),
            (300, 256, 128),
            (1000, 256, 256),
            (7, 0, 4),
        ] {
            let src_k: Vec<f32> = (0..rows * kd).map(|i| i as f32).collect();
            let src_v: Vec<f32> = (0..rows * vd).map(|i| -(i as f32)).collect();
            let (mut k, mut v) = (vec![0.0; rows * kd], vec![0.0; rows * vd]);
            copy_kv_rows(&pool, [&mut k, &mut v], [&src_k, &src_v], [kd, vd]);
            assert_eq!((k, v), (src_k, src_v), "{rows} rows of {kd} and {vd}");
        }
    }

    fn ring(window: usize, cap: usize) -> LayerCache {
        LayerCache {
            k: Vec::new(),
            v: Vec::new(),
            cap,
            window: Some(window),
        }
    }

    #[test]
    fn a_wrapped_ring_rewinds_only_while_it_holds_the_window() {
        // Window 8, 4 slots of slack: positions 88..100 are in the ring.
        let l = ring(8, 12);
        assert!(l.can_rewind(10, 3), "not wrapped yet");
        assert!(l.can_rewind(100, 99));
        // The token at 95 reads 88..95: all held.
        assert!(l.can_rewind(100, 95));
        // The token at 94 reads 87..94: 87 is gone.
        assert!(!l.can_rewind(100, 94));
        let global = LayerCache {
            window: None,
            ..ring(8, 100)
        };
        assert!(global.can_rewind(100, 1));
    }
}
