//! A text layer's attention: what it reads (the layer's shape, the batch's
//! rows, the caches they extend) and where each row's keys lie. Each row
//! attends over its own sequence: the positions its cache holds before the
//! batch, and its sequence's keys in the batch. Reading the batch's keys
//! from its own buffer (not the ring) keeps a sliding-window ring correct
//! when a batch is longer than the window. Rows of a bidirectional span (an
//! image) also see the span's later positions.
//!
//! The computation and its two schedules are `nn::attention::causal`'s;
//! everything that differs between Gemma variants (window, head sizes,
//! grouped KV heads, soft-capping) comes in as data from the layer's
//! [`LayerKind`] and the [`Config`].

use crate::kv::LayerCache;
use crate::{Config, LayerKind, SeqInput};
use nn::attention::causal::{self, Batch, GatheredKeys, Heads, RowTask, Schedule};
use nn::attention::{KeyRuns, Scoring};
use quant::vector::Rows;
use std::sync::Mutex;

mod gather;
use gather::gather_keys;

/// What one layer's attention reads: its shape, the batch's rows and the
/// caches they extend.
pub(crate) struct AttentionInput<'r, 'a> {
    /// The model.
    pub cfg: &'r Config,
    /// The layer's attention shape.
    pub kind: &'r LayerKind,
    /// The batch's sequences (their caches hold the earlier positions).
    pub seqs: &'r [SeqInput<'a>],
    /// The layer whose cache holds the keys (the KV source on sharing layers).
    pub layer: usize,
    /// Rows `seq_start[j]..seq_start[j + 1]` belong to sequence `j`.
    pub seq_start: &'r [usize],
    /// The sequence of each row.
    pub row_seq: &'r [usize],
    /// The last position each row attends to (its own, or the end of its
    /// bidirectional span).
    pub row_last: &'r [usize],
    /// The batch's queries, keys and values.
    pub q: &'r [f32],
    pub k_new: &'r [f32],
    pub v_new: &'r [f32],
}

/// The heads of a layer of kind `kind`.
fn heads_of(cfg: &Config, kind: &LayerKind) -> Heads {
    Heads {
        hd: kind.head_dim,
        vdim: kind.value_dim,
        n_heads: cfg.n_heads,
        n_kv: kind.n_kv_heads,
    }
}

/// The keys or the values of one sequence in one layer: positions before
/// the batch from the cache ring, the batch's own from its buffer.
struct Side<'v> {
    cached: Rows<'v>,
    new: &'v [f32],
    /// Ring slots of the cache.
    cap: usize,
    /// Elements per position (all KV heads), and per KV head.
    stride: usize,
    width: usize,
}

/// One sequence's keys and values in one layer: positions before `pos0` from
/// its cache, later ones from the batch's rows `row0..`.
struct SeqKeys<'v> {
    keys: Side<'v>,
    values: Side<'v>,
    pos0: usize,
    row0: usize,
}

impl SeqKeys<'_> {
    /// Elements `from..from + dst.len()` of position `p`, KV head `kvh` of
    /// `side`, as f32 into `dst`.
    #[inline]
    fn copy(&self, side: &Side<'_>, p: usize, kvh: usize, from: usize, dst: &mut [f32]) {
        let at = |row: usize| row * side.stride + kvh * side.width + from;
        if p < self.pos0 {
            side.cached.copy_to(at(p % side.cap), dst);
        } else {
            let i = at(self.row0 + p - self.pos0);
            dst.copy_from_slice(&side.new[i..i + dst.len()]);
        }
    }

    /// Positions `lo..=hi` of KV head `kvh` of `side` as runs that lie
    /// `side.stride` elements apart in one buffer (a ring wraps, and the
    /// batch's own positions are in its buffer): `f(j, from, n)` for the run
    /// of `n` positions from `lo + j`, `from` starting at the first of them.
    fn runs<'s>(
        &self,
        side: &Side<'s>,
        lo: usize,
        hi: usize,
        kvh: usize,
        mut f: impl FnMut(usize, Rows<'s>, usize),
    ) {
        let mut p = lo;
        while p <= hi {
            let (buf, row, n) = if p < self.pos0 {
                let slot = p % side.cap;
                (
                    side.cached,
                    slot,
                    (self.pos0.min(hi + 1) - p).min(side.cap - slot),
                )
            } else {
                (Rows::F32(side.new), self.row0 + p - self.pos0, hi + 1 - p)
            };
            f(p - lo, buf.from(row * side.stride + kvh * side.width), n);
            p += n;
        }
    }
}

/// One query's keys `lo..=hi` of KV head `kvh`, as runs of rows.
struct QueryKeys<'k, 'v> {
    keys: &'k SeqKeys<'v>,
    lo: usize,
    hi: usize,
    kvh: usize,
}

impl<'v> KeyRuns<'v> for QueryKeys<'_, 'v> {
    fn key_stride(&self) -> usize {
        self.keys.keys.stride
    }
    fn value_stride(&self) -> usize {
        self.keys.values.stride
    }
    fn keys(&self, f: impl FnMut(usize, Rows<'v>, usize)) {
        let k = self.keys;
        k.runs(&k.keys, self.lo, self.hi, self.kvh, f)
    }
    fn values(&self, f: impl FnMut(usize, Rows<'v>, usize)) {
        let k = self.keys;
        k.runs(&k.values, self.lo, self.hi, self.kvh, f)
    }
}

impl AttentionInput<'_, '_> {
    /// The first position a query at `pos` attends to.
    fn lowest_key(&self, pos: usize) -> usize {
        self.kind.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }

    /// The keys and values sequence `seq` attends over in this layer.
    fn keys_of(&self, seq: usize, h: Heads) -> SeqKeys<'_> {
        let cache = &*self.seqs[seq].cache;
        let layer: &LayerCache = &cache.layers[self.layer];
        SeqKeys {
            keys: Side {
                cached: layer.k.rows(),
                new: self.k_new,
                cap: layer.cap,
                stride: h.n_kv * h.hd,
                width: h.hd,
            },
            values: Side {
                cached: layer.v.rows(),
                new: self.v_new,
                cap: layer.cap,
                stride: h.n_kv * h.vdim,
                width: h.vdim,
            },
            pos0: cache.n_past(),
            row0: self.seq_start[seq],
        }
    }

    /// How this layer's scores become probabilities (Gemma 2 soft-caps).
    fn scoring(&self) -> Scoring<'static> {
        Scoring {
            softcap: self.cfg.attn_softcap,
            ..Scoring::default()
        }
    }
}

/// The buffers attention works in.
pub(crate) struct AttentionBuffers<'b> {
    /// One score buffer per worker.
    pub scores: &'b [Mutex<Vec<f32>>],
    /// The blocked schedule's copy of the keys and values.
    pub gathered: &'b mut Vec<f32>,
}

/// Attention of every row of the batch into `out` (`n_heads * value_dim` per
/// row), under the schedule the batch's shape takes.
pub(crate) fn attend(
    pool: &threads::ThreadPool,
    input: AttentionInput<'_, '_>,
    bufs: AttentionBuffers<'_>,
    out: &mut [f32],
) -> Result<(), quant::QuantError> {
    let batch = Batch {
        q: input.q,
        heads: heads_of(input.cfg, input.kind),
        rows: input.row_seq.len(),
        scoring: input.scoring(),
    };
    match Schedule::for_batch(input.seqs.len(), batch.rows) {
        Schedule::Blocked => attend_blocked(pool, &input, &batch, bufs, out),
        Schedule::Rows => {
            let attend = |task, scores: &mut [f32], out: &mut [f32]| {
                attend_task(&input, &batch, task, scores, out)
            };
            causal::rows(pool, &batch, bufs.scores, out, attend);
            Ok(())
        }
    }
}

/// One task of the row schedule: its query heads of one row over the
/// row's keys.
fn attend_task(
    input: &AttentionInput<'_, '_>,
    batch: &Batch<'_>,
    task: RowTask,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let h = batch.heads;
    let keys = input.keys_of(input.row_seq[task.row], h);
    let pos = keys.pos0 + (task.row - keys.row0);
    let (lo, hi) = (input.lowest_key(pos), input.row_last[task.row]);
    let q0 = (task.row * h.n_heads + task.first) * h.hd;
    let qs = &batch.q[q0..q0 + task.count * h.hd];
    let runs = QueryKeys {
        keys: &keys,
        lo,
        hi,
        kvh: task.kvh,
    };
    let n_keys = hi + 1 - lo;
    nn::attention::attend_query(qs, task.count, &runs, n_keys, &batch.scoring, scores, out);
}

/// A long batch of one sequence (prefill): the keys and values it attends
/// to gathered once per KV head into strips, then the blocked schedule.
fn attend_blocked(
    pool: &threads::ThreadPool,
    input: &AttentionInput<'_, '_>,
    batch: &Batch<'_>,
    bufs: AttentionBuffers<'_>,
    out: &mut [f32],
) -> Result<(), quant::QuantError> {
    let h = batch.heads;
    let keys = input.keys_of(0, h);
    let pos0 = keys.pos0;
    // Keys klo.. cover every row's window.
    let klo = input.lowest_key(pos0);
    let nk = pos0 + batch.rows - klo;
    let (keys_len, values_len) = GatheredKeys::lengths(h, nk);
    bufs.gathered.resize(keys_len + values_len, 0.0);
    let (kt, vc) = bufs.gathered.split_at_mut(keys_len);
    gather_keys(pool, &keys, klo, nk, h, kt, vc);
    let gathered = GatheredKeys {
        keys: kt,
        values: vc,
        n: nk,
    };
    let window = |i: usize| (input.lowest_key(pos0 + i) - klo, input.row_last[i] - klo);
    causal::blocked(pool, batch, &gathered, window, bufs.scores, out)
}
