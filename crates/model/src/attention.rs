//! Causal attention of a batch's queries, each row over its own sequence: the
//! positions its cache holds before the batch, and its sequence's keys in the
//! batch. Reading the batch's keys from its own buffer (not the ring) keeps a
//! sliding-window ring correct when a batch is longer than the window. Rows
//! of a bidirectional span (an image) also see the span's later positions.
//!
//! One computation, two schedules chosen by the batch's shape: decode steps
//! and short batches go row by row; a long batch of one sequence (prefill)
//! goes as matrix products over blocks of queries. Everything that differs
//! between Gemma variants (window, head sizes, grouped KV heads, soft-capping)
//! comes in as data from the layer's [`LayerKind`] and the [`Config`].

use crate::kv::LayerCache;
use crate::{Config, LayerKind, SeqInput};
use nn::attention::{KeyRuns, Scoring};
use quant::vector::Rows;
use std::sync::Mutex;
use threads::FirstError;

mod gather;
use gather::{gather_keys, KEY_STRIP};

/// Batches of one sequence with at least this many rows take the blocked
/// schedule (prefill); shorter ones, decode steps among them, go row by row.
pub(crate) const BLOCKED_ATTENTION_MIN_ROWS: usize = 16;

/// Query vectors per block of the blocked schedule: a multiple of the heads
/// sharing a KV head, near the matrix kernel's 12-row tile, or four tiles
/// once a block reads more than [`LONG_KEYS`] keys. Every block reads all
/// its keys and values, which past a few thousand no longer stay in cache,
/// so longer blocks read them fewer times. Each score and output is summed
/// over its keys in order whatever the block, so the bits do not change.
fn block_queries(keys: usize) -> usize {
    if keys > LONG_KEYS {
        48
    } else {
        12
    }
}

/// Keys past which a block of queries takes four tiles (see [`block_queries`]).
const LONG_KEYS: usize = 2048;

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

/// Sizes of one layer's heads.
#[derive(Clone, Copy)]
struct Heads {
    hd: usize,
    vdim: usize,
    n_heads: usize,
    n_kv: usize,
    /// Query heads per KV head.
    group: usize,
    /// Key and value widths of one row.
    kd: usize,
    vd: usize,
}

impl Heads {
    fn of(cfg: &Config, kind: &LayerKind) -> Self {
        let (hd, vdim, n_heads, n_kv) =
            (kind.head_dim, kind.value_dim, cfg.n_heads, kind.n_kv_heads);
        Self {
            hd,
            vdim,
            n_heads,
            n_kv,
            group: n_heads / n_kv,
            kd: n_kv * hd,
            vd: n_kv * vdim,
        }
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
                stride: h.kd,
                width: h.hd,
            },
            values: Side {
                cached: layer.v.rows(),
                new: self.v_new,
                cap: layer.cap,
                stride: h.vd,
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
/// row).
pub(crate) fn attend(
    pool: &threads::ThreadPool,
    input: AttentionInput<'_, '_>,
    bufs: AttentionBuffers<'_>,
    out: &mut [f32],
) -> Result<(), quant::QuantError> {
    if input.seqs.len() == 1 && input.row_seq.len() >= BLOCKED_ATTENTION_MIN_ROWS {
        attend_blocked(pool, input, out, bufs.scores, bufs.gathered)
    } else {
        attend_rows(pool, input, out, bufs.scores);
        Ok(())
    }
}

/// Row by row: one task is one row and one KV head, so the query heads
/// sharing that KV head read each key and value once between them. When
/// that leaves threads without a task (a decode step of a model with one KV
/// head), each KV head's query heads are split between tasks instead; every
/// head's arithmetic is the same either way.
fn attend_rows(
    pool: &threads::ThreadPool,
    input: AttentionInput<'_, '_>,
    out: &mut [f32],
    scores: &[Mutex<Vec<f32>>],
) {
    let h = Heads::of(input.cfg, input.kind);
    let b = input.row_seq.len();
    // Query heads of a KV head per task: all of them, or the largest
    // divisor of the group that gives every thread a task.
    let want = pool.threads().div_ceil(b * h.n_kv).max(1);
    let split = (1..=h.group)
        .rev()
        .find(|&d| h.group.is_multiple_of(d) && d <= want)
        .unwrap_or(1);
    let sub = h.group / split;
    let n_tasks = b * h.n_kv * split;
    let per_worker = n_tasks.div_ceil(scores.len());
    let out = &mut out[..b * h.n_heads * h.vdim];
    let q = input.q;
    let scoring = input.scoring();

    // Task `task`'s query heads (`sub` of them) into `o`.
    let attend_one = |task: usize, o: &mut [f32], sc: &mut [f32]| {
        let (i, kvh, part) = (
            task / (h.n_kv * split),
            (task / split) % h.n_kv,
            task % split,
        );
        let keys = input.keys_of(input.row_seq[i], h);
        let pos = keys.pos0 + (i - keys.row0);
        let lo = input.lowest_key(pos);
        let hi = input.row_last[i];
        let n_keys = hi + 1 - lo;
        let q0 = (i * h.n_heads + kvh * h.group + part * sub) * h.hd;
        let qs = &q[q0..q0 + sub * h.hd];
        // The task's heads read each run of keys once between them.
        let stride = sc.len() / h.group;
        let sc = &mut sc[..stride * sub];
        let runs = QueryKeys {
            keys: &keys,
            lo,
            hi,
            kvh,
        };
        nn::attention::attend_query(qs, sub, &runs, n_keys, &scoring, sc, o);
    };

    pool.for_each_chunk_mut(out, per_worker * sub * h.vdim, |worker, rows| {
        let mut guard = scores[worker].lock().unwrap_or_else(|e| e.into_inner());
        for (r, o) in rows.chunks_exact_mut(sub * h.vdim).enumerate() {
            attend_one(worker * per_worker + r, o, &mut guard);
        }
    });
}

/// A long batch of one sequence, as matrix products: the keys and values it
/// attends to are gathered once per KV head (keys transposed), and each block
/// of queries gets its scores as one product with the keys and its output as
/// one product of the probabilities with the values. Positions outside a
/// query's window get probability 0.
#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
fn attend_blocked(
    pool: &threads::ThreadPool,
    input: AttentionInput<'_, '_>,
    out: &mut [f32],
    scores: &[Mutex<Vec<f32>>],
    gathered: &mut Vec<f32>,
) -> Result<(), quant::QuantError> {
    let h = Heads::of(input.cfg, input.kind);
    let b = input.row_seq.len();
    let keys = input.keys_of(0, h);
    let pos0 = keys.pos0;
    // Keys klo.. cover every row's window.
    let klo = input.lowest_key(pos0);
    let nk = pos0 + b - klo;
    // Keys in whole strips (the last one padded with zeros).
    let strips = nk.div_ceil(KEY_STRIP);
    let kt_len = h.n_kv * strips * KEY_STRIP * h.hd;
    let vc_len = h.n_kv * h.vdim.div_ceil(KEY_STRIP) * nk * KEY_STRIP;
    gathered.resize(kt_len + vc_len, 0.0);
    let (kt_all, vc_all) = gathered.split_at_mut(kt_len);
    gather_keys(pool, &keys, klo, nk, h, kt_all, vc_all);
    let (kt_all, vc_all) = (&*kt_all, &*vc_all);
    let block_rows = (block_queries(nk) / h.group).max(1);
    let row_len = h.n_heads * h.vdim;
    let q = input.q;
    let scoring = input.scoring();
    let failure = FirstError::new();
    // One task per block of queries, the latest (longest causal window)
    // first: the pool hands tasks out as threads free up, so the work
    // evens out however unequal the blocks are.
    let blocks: Vec<Mutex<(usize, &mut [f32])>> = out[..b * row_len]
        .chunks_mut(block_rows * row_len)
        .enumerate()
        .rev()
        .map(Mutex::new)
        .collect();
    pool.run(blocks.len(), |task| {
        let mut block = blocks[task].lock().unwrap_or_else(|e| e.into_inner());
        let blk = block.0;
        let out_blk = &mut *block.1;
        let mut guard = free_buffer(scores);
        let m_max = block_rows * h.group;
        guard.resize(m_max * (h.hd + nk + h.vdim), 0.0);
        let (a, rest) = guard.split_at_mut(m_max * h.hd);
        let (sc, o) = rest.split_at_mut(m_max * nk);
        let i0 = blk * block_rows;
        let nrows = out_blk.len() / row_len;
        let m = nrows * h.group;
        // Keys the block's rows attend to, as indices into the gathered
        // ones, from the start of the strip that holds the first (the keys
        // before that first one get probability 0 like any outside a window).
        let jlo = (input.lowest_key(pos0 + i0) - klo) / KEY_STRIP * KEY_STRIP;
        let last = input.row_last[i0..i0 + nrows].iter().max().copied();
        let nkb = last.unwrap_or(pos0 + i0) + 1 - klo - jlo;
        let width = h.group * h.hd;
        for kvh in 0..h.n_kv {
            for r in 0..nrows {
                let src = ((i0 + r) * h.n_heads + kvh * h.group) * h.hd;
                a[r * width..(r + 1) * width].copy_from_slice(&q[src..src + width]);
            }
            // One product per strip of keys: each reads its strip as one
            // contiguous run (a product over the keys of a whole transposed
            // head read each of its rows 4·nk bytes apart, a stride no
            // prefetcher follows).
            for j0 in (0..nkb).step_by(KEY_STRIP) {
                let strip = (kvh * strips + (jlo + j0) / KEY_STRIP) * KEY_STRIP * h.hd;
                let w = (nkb - j0).min(KEY_STRIP);
                let kt = &kt_all[strip..strip + KEY_STRIP * h.hd];
                let products =
                    quant::vector::sgemm(m, w, h.hd, a, h.hd, kt, KEY_STRIP, &mut sc[j0..], nkb);
                if let Err(e) = products {
                    return failure.set(e);
                }
            }
            for qi in 0..m {
                let (row, pos) = (i0 + qi / h.group, pos0 + i0 + qi / h.group);
                let (lo, hi) = (
                    input.lowest_key(pos) - klo - jlo,
                    input.row_last[row] - klo - jlo,
                );
                let row = &mut sc[qi * nkb..(qi + 1) * nkb];
                row[..lo].fill(0.0);
                row[hi + 1..].fill(0.0);
                nn::attention::probabilities(&mut row[lo..=hi], None, &scoring);
            }
            // One product per strip of value columns, each strip's rows
            // one contiguous run (as the keys' strips).
            let vstrips = h.vdim.div_ceil(KEY_STRIP);
            for d0 in (0..h.vdim).step_by(KEY_STRIP) {
                let strip = ((kvh * vstrips + d0 / KEY_STRIP) * nk + jlo) * KEY_STRIP;
                let w = (h.vdim - d0).min(KEY_STRIP);
                let vc = &vc_all[strip..strip + nkb * KEY_STRIP];
                let products =
                    quant::vector::sgemm(m, w, nkb, sc, nkb, vc, KEY_STRIP, &mut o[d0..], h.vdim);
                if let Err(e) = products {
                    return failure.set(e);
                }
            }
            let gw = h.group * h.vdim;
            for r in 0..nrows {
                let dst = r * row_len + kvh * gw;
                out_blk[dst..dst + gw].copy_from_slice(&o[r * gw..(r + 1) * gw]);
            }
        }
    });
    failure.into_result()
}

/// A score buffer no other task holds. At most one task per thread runs at
/// a time and there is a buffer per thread, so one is always free.
fn free_buffer(buffers: &[Mutex<Vec<f32>>]) -> std::sync::MutexGuard<'_, Vec<f32>> {
    loop {
        for b in buffers {
            match b.try_lock() {
                Ok(g) => return g,
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        std::hint::spin_loop();
    }
}
