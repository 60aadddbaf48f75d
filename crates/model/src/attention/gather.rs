//! Keys and values gathered once per layer into strips, so the blocked
//! attention's products read contiguous runs.

use super::*;
use nn::attention::causal::KEY_STRIP;

/// Copies keys `klo..klo + nk` of every KV head into `kt_all` and their
/// values into `vc_all`, laid out as [`GatheredKeys`] says, in parallel.
pub(super) fn gather_keys(
    pool: &threads::ThreadPool,
    keys: &SeqKeys<'_>,
    klo: usize,
    nk: usize,
    h: Heads,
    kt_all: &mut [f32],
    vc_all: &mut [f32],
) {
    let strips = nk.div_ceil(KEY_STRIP);
    pool.for_each_chunk_mut(kt_all, KEY_STRIP * h.hd, |chunk, strip| {
        let (kvh, s) = (chunk / strips, chunk % strips);
        let j0 = s * KEY_STRIP;
        let n = (nk - j0).min(KEY_STRIP);
        // Each key widened a piece at a time into a buffer on the stack.
        let mut piece = [0.0f32; 64];
        for j in 0..n {
            for d0 in (0..h.hd).step_by(piece.len()) {
                let k = &mut piece[..(h.hd - d0).min(64)];
                keys.copy(&keys.keys, klo + j0 + j, kvh, d0, k);
                for (i, &x) in k.iter().enumerate() {
                    strip[(d0 + i) * KEY_STRIP + j] = x;
                }
            }
        }
        for row in strip.chunks_exact_mut(KEY_STRIP) {
            row[n..].fill(0.0);
        }
    });
    // 64 keys' strips of values per task: enough to be worth a task.
    let per_task = 64;
    let vstrips = h.vdim.div_ceil(KEY_STRIP);
    pool.for_each_chunk_mut(vc_all, per_task * KEY_STRIP, |chunk, dst| {
        for (i, row) in dst.chunks_exact_mut(KEY_STRIP).enumerate() {
            // Row `idx` is key `j`'s columns of strip `ds` of KV head `kvh`.
            let idx = chunk * per_task + i;
            let (kvh, ds, j) = (idx / (vstrips * nk), (idx / nk) % vstrips, idx % nk);
            let d0 = ds * KEY_STRIP;
            let w = (h.vdim - d0).min(KEY_STRIP);
            keys.copy(&keys.values, klo + j, kvh, d0, &mut row[..w]);
            row[w..].fill(0.0);
        }
    });
}
