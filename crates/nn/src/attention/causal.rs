//! Causal attention of a text batch under the two schedules the text model
//! runs ([`Schedule`]): row by row for decode steps and short batches
//! ([`rows`]), and as matrix products over blocks of queries for a long
//! batch of one sequence, the prefill ([`blocked`]). Where the keys lie
//! (the model's cache ring, the batch's own buffer) stays with the caller:
//! the row schedule hands each task's heads to the caller, and the blocked
//! one reads keys the caller has gathered into strips ([`GatheredKeys`]).
//! Each score and output is summed over its keys in order whatever the
//! schedule's blocks, so the bits do not depend on them.

use super::{probabilities, Scoring};
use quant::QuantError;
use std::sync::Mutex;
use threads::{FirstError, ThreadPool};

/// Batches of one sequence with at least this many rows take the blocked
/// schedule (prefill); shorter ones, decode steps among them, go row by row.
pub const BLOCKED_MIN_ROWS: usize = 16;

/// Keys per strip of [`GatheredKeys`]: the matrix kernel's widest tile (two
/// 16-lane vectors).
pub const KEY_STRIP: usize = 32;

/// How a batch's attention is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// One task per row and KV head ([`rows`]).
    Rows,
    /// Matrix products over blocks of queries ([`blocked`]).
    Blocked,
}

impl Schedule {
    /// The schedule of a batch of `rows` rows over `sequences` sequences.
    pub fn for_batch(sequences: usize, rows: usize) -> Self {
        if sequences == 1 && rows >= BLOCKED_MIN_ROWS {
            Schedule::Blocked
        } else {
            Schedule::Rows
        }
    }
}

/// Sizes of one layer's heads.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// Width of one query or key head.
    pub hd: usize,
    /// Width of one value head.
    pub vdim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// KV heads.
    pub n_kv: usize,
}

impl Heads {
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv
    }
}

/// A batch's queries and how its scores are shaped.
pub struct Batch<'a> {
    /// Each row's query heads, one after another (`n_heads * hd` a row).
    pub q: &'a [f32],
    /// The layer's heads.
    pub heads: Heads,
    /// Rows in the batch.
    pub rows: usize,
    /// How scores become probabilities.
    pub scoring: Scoring<'a>,
}

/// One task of the row schedule: query heads `first..first + count` of
/// batch row `row`, which share KV head `kvh`.
#[derive(Clone, Copy, Debug)]
pub struct RowTask {
    /// The batch row.
    pub row: usize,
    /// The KV head the task's query heads share.
    pub kvh: usize,
    /// The first query head.
    pub first: usize,
    /// Query heads in the task.
    pub count: usize,
}

/// Row by row: one task is one row and one KV head, so the query heads
/// sharing that KV head read each key and value once between them. When
/// that leaves threads without a task (a decode step of a model with one
/// KV head), each KV head's query heads are split between tasks instead;
/// every head's arithmetic is the same either way. `attend(task, scores,
/// out)` attends the task's heads with `scores` (one run per head) into
/// `out` (`count * vdim`, the batch's output rows are `n_heads * vdim`).
pub fn rows(
    pool: &ThreadPool,
    batch: &Batch<'_>,
    scores: &[Mutex<Vec<f32>>],
    out: &mut [f32],
    attend: impl Fn(RowTask, &mut [f32], &mut [f32]) + Sync,
) {
    let (h, group) = (batch.heads, batch.heads.group());
    // Query heads of a KV head per task: all of them, or the largest
    // divisor of the group that gives every thread a task.
    let want = pool.threads().div_ceil(batch.rows * h.n_kv).max(1);
    let split = (1..=group)
        .rev()
        .find(|&d| group.is_multiple_of(d) && d <= want)
        .unwrap_or(1);
    let sub = group / split;
    let n_tasks = batch.rows * h.n_kv * split;
    let per_worker = n_tasks.div_ceil(scores.len());
    let out = &mut out[..batch.rows * h.n_heads * h.vdim];
    pool.for_each_chunk_mut(out, per_worker * sub * h.vdim, |worker, rows| {
        let mut guard = scores[worker].lock().unwrap_or_else(|e| e.into_inner());
        // The task's heads read each run of keys once between them.
        let stride = guard.len() / group;
        let sc = &mut guard[..stride * sub];
        for (r, o) in rows.chunks_exact_mut(sub * h.vdim).enumerate() {
            let t = worker * per_worker + r;
            let (kvh, part) = ((t / split) % h.n_kv, t % split);
            let task = RowTask {
                row: t / (h.n_kv * split),
                kvh,
                first: kvh * group + part * sub,
                count: sub,
            };
            attend(task, sc, o);
        }
    });
}

/// One sequence's keys and values laid out for [`blocked`]: the `n` keys
/// any of the batch's rows sees (numbered from the first), of every KV
/// head. The keys are transposed in strips of [`KEY_STRIP`] keys
/// (`[kvh][strip][dim][key in strip]`, zeros past the last key, so `Q·Kᵀ`
/// over a strip is a plain product); the values lie in strips of
/// [`KEY_STRIP`] columns (`[kvh][column strip][key][column in strip]`,
/// zeros past the last column), so that each strip of `P·V` reads one
/// contiguous run.
pub struct GatheredKeys<'a> {
    /// The transposed key strips.
    pub keys: &'a [f32],
    /// The value column strips.
    pub values: &'a [f32],
    /// Keys gathered.
    pub n: usize,
}

impl GatheredKeys<'_> {
    /// The floats the keys and the values of `n` keys of heads `h` take.
    pub fn lengths(h: Heads, n: usize) -> (usize, usize) {
        let keys = h.n_kv * n.div_ceil(KEY_STRIP) * KEY_STRIP * h.hd;
        let values = h.n_kv * h.vdim.div_ceil(KEY_STRIP) * n * KEY_STRIP;
        (keys, values)
    }
}

/// Query vectors per block of the blocked schedule: a multiple of the heads
/// sharing a KV head, near the matrix kernel's 12-row tile, or four tiles
/// once a block reads more than [`LONG_KEYS`] keys. Every block reads all
/// its keys and values, which past a few thousand no longer stay in cache,
/// so longer blocks read them fewer times.
fn block_queries(keys: usize) -> usize {
    if keys > LONG_KEYS {
        48
    } else {
        12
    }
}

/// Batch rows per block of the blocked schedule over `keys` keys.
fn block_rows(keys: usize, h: Heads) -> usize {
    (block_queries(keys) / h.group()).max(1)
}

/// Keys past which a block of queries takes four tiles (see [`block_queries`]).
const LONG_KEYS: usize = 2048;

/// A long batch of one sequence as matrix products: each block of queries
/// gets its scores as one product with the gathered keys and its output as
/// one product of the probabilities with the values. Row `i` attends to
/// gathered keys `window(i)` (`lo..=hi`); keys outside it get probability
/// 0. One task per block of queries, the latest (longest causal window)
/// first: the pool hands tasks out as threads free up, so the work evens
/// out however unequal the blocks are.
pub fn blocked(
    pool: &ThreadPool,
    batch: &Batch<'_>,
    keys: &GatheredKeys<'_>,
    window: impl Fn(usize) -> (usize, usize) + Sync,
    scores: &[Mutex<Vec<f32>>],
    out: &mut [f32],
) -> Result<(), QuantError> {
    let h = batch.heads;
    let block_rows = block_rows(keys.n, h);
    let row_len = h.n_heads * h.vdim;
    let failure = FirstError::new();
    let blocks: Vec<Mutex<(usize, &mut [f32])>> = out[..batch.rows * row_len]
        .chunks_mut(block_rows * row_len)
        .enumerate()
        .rev()
        .map(Mutex::new)
        .collect();
    pool.run(blocks.len(), |task| {
        let mut block = blocks[task].lock().unwrap_or_else(|e| e.into_inner());
        let first = block.0 * block_rows;
        let out_block = &mut *block.1;
        let rows = first..first + out_block.len() / row_len;
        let mut work = free_buffer(scores);
        if let Err(e) = attend_block(batch, keys, &window, rows, &mut work, out_block) {
            failure.set(e);
        }
    });
    failure.into_result()
}

/// [`blocked`]'s work for the block of batch rows `rows` into `out` (its
/// rows' outputs), KV head by KV head, in `work`, laid out for the longest
/// block.
fn attend_block(
    batch: &Batch<'_>,
    keys: &GatheredKeys<'_>,
    window: &impl Fn(usize) -> (usize, usize),
    rows: std::ops::Range<usize>,
    work: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<(), QuantError> {
    let (h, group) = (batch.heads, batch.heads.group());
    let (nrows, m) = (rows.len(), rows.len() * group);
    let m_max = block_rows(keys.n, h) * group;
    // Keys the block's rows attend to, from the start of the strip that
    // holds the first one any of them sees (the keys before it get
    // probability 0 like any outside a window).
    let jlo = window(rows.start).0 / KEY_STRIP * KEY_STRIP;
    let last = rows.clone().map(|i| window(i).1).max().unwrap_or(jlo);
    let nkb = last + 1 - jlo;
    work.resize(m_max * (h.hd + keys.n + h.vdim), 0.0);
    let (a, rest) = work.split_at_mut(m_max * h.hd);
    let (sc, o) = rest.split_at_mut(m_max * keys.n);
    let width = group * h.hd;
    let strips = keys.n.div_ceil(KEY_STRIP);
    for kvh in 0..h.n_kv {
        for r in 0..nrows {
            let src = ((rows.start + r) * h.n_heads + kvh * group) * h.hd;
            a[r * width..(r + 1) * width].copy_from_slice(&batch.q[src..src + width]);
        }
        // One product per strip of keys: each reads its strip as one
        // contiguous run (a product over the keys of a whole transposed
        // head read each of its rows 4·n bytes apart, a stride no
        // prefetcher follows).
        for j0 in (0..nkb).step_by(KEY_STRIP) {
            let strip = (kvh * strips + (jlo + j0) / KEY_STRIP) * KEY_STRIP * h.hd;
            let w = (nkb - j0).min(KEY_STRIP);
            let kt = &keys.keys[strip..strip + KEY_STRIP * h.hd];
            quant::vector::sgemm(m, w, h.hd, a, h.hd, kt, KEY_STRIP, &mut sc[j0..], nkb)?;
        }
        for qi in 0..m {
            let (lo, hi) = window(rows.start + qi / group);
            let (lo, hi) = (lo - jlo, hi - jlo);
            let row = &mut sc[qi * nkb..(qi + 1) * nkb];
            row[..lo].fill(0.0);
            row[hi + 1..].fill(0.0);
            probabilities(&mut row[lo..=hi], None, &batch.scoring);
        }
        // One product per strip of value columns, each strip's rows one
        // contiguous run (as the keys' strips).
        let vstrips = h.vdim.div_ceil(KEY_STRIP);
        for d0 in (0..h.vdim).step_by(KEY_STRIP) {
            let strip = ((kvh * vstrips + d0 / KEY_STRIP) * keys.n + jlo) * KEY_STRIP;
            let w = (h.vdim - d0).min(KEY_STRIP);
            let vc = &keys.values[strip..strip + nkb * KEY_STRIP];
            quant::vector::sgemm(m, w, nkb, sc, nkb, vc, KEY_STRIP, &mut o[d0..], h.vdim)?;
        }
        let (gw, row_len) = (group * h.vdim, h.n_heads * h.vdim);
        for r in 0..nrows {
            let dst = r * row_len + kvh * gw;
            out[dst..dst + gw].copy_from_slice(&o[r * gw..(r + 1) * gw]);
        }
    }
    Ok(())
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
