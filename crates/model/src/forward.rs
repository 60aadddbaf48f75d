//! The forward pass. One code path serves batched prefill and single-token
//! decode: a batch of `B` tokens at positions `n_past .. n_past + B`.

use crate::kv::{KvCache, LayerCache};
use crate::ops::{self, Rope};
use crate::{Config, Model, ModelError, Precision};
use std::ops::Range;
use std::sync::Mutex;

/// Reusable buffers for one sequence, sized once for the largest batch, so the
/// decode loop allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    max_batch: usize,
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// Attention scores, one row of `n_ctx` per worker thread. Each worker
    /// locks its own row once per layer, so the locks are never contended.
    scores: Vec<Mutex<Vec<f32>>>,
    /// Quantized activations for the matmul kernels.
    qbuf: Vec<u8>,
    /// Transposed outputs of the exact-precision matmul.
    wide: Vec<f32>,
    /// Logits of the rows last asked for.
    logits: Vec<f32>,
    /// Final-normed hidden states of the last batch.
    out: Vec<f32>,
    batch: usize,
    ropes: Vec<Rope>,
}

impl Scratch {
    /// Buffers for batches of up to `max_batch` tokens in a context of
    /// `n_ctx`, for a pool of `threads` workers.
    pub fn new(cfg: &Config, n_ctx: usize, max_batch: usize, threads: usize) -> Self {
        let b = max_batch.max(1);
        let qd = cfg.n_heads * cfg.head_dim;
        let kd = cfg.n_kv_heads * cfg.head_dim;
        let vd = cfg.n_kv_heads * cfg.value_dim;
        let ropes = cfg
            .layers
            .iter()
            .map(|l| Rope::new(cfg.head_dim, l.rope_base, l.rope_scale))
            .collect();
        Self {
            max_batch: b,
            x: vec![0.0; b * cfg.hidden],
            h: vec![0.0; b * cfg.hidden],
            q: vec![0.0; b * qd],
            k: vec![0.0; b * kd],
            v: vec![0.0; b * vd],
            attn: vec![0.0; b * cfg.n_heads * cfg.value_dim],
            o: vec![0.0; b * cfg.hidden],
            gate: vec![0.0; b * cfg.ffn_dim],
            up: vec![0.0; b * cfg.ffn_dim],
            scores: (0..threads.max(1))
                .map(|_| Mutex::new(vec![0.0; n_ctx.max(1) * (cfg.n_heads / cfg.n_kv_heads)]))
                .collect(),
            qbuf: Vec::new(),
            wide: Vec::new(),
            logits: Vec::new(),
            out: vec![0.0; b * cfg.hidden],
            batch: 0,
            ropes,
        }
    }

    /// Bytes the buffers take (the logits buffer for one row included).
    pub fn bytes_for(cfg: &Config, n_ctx: usize, max_batch: usize, threads: usize) -> usize {
        let b = max_batch.max(1);
        let per_token = 4 * cfg.hidden
            + cfg.n_heads * cfg.head_dim
            + cfg.n_kv_heads * (cfg.head_dim + cfg.value_dim)
            + cfg.n_heads * cfg.value_dim
            + 2 * cfg.ffn_dim;
        (b * per_token + threads.max(1) * n_ctx * (cfg.n_heads / cfg.n_kv_heads) + cfg.vocab)
            * std::mem::size_of::<f32>()
    }

    /// The largest batch these buffers take.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Rows in the last batch run.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Final-normed hidden state of row `i` of the last batch.
    pub fn hidden(&self, i: usize) -> Option<&[f32]> {
        let h = self.out.len() / self.max_batch;
        (i < self.batch).then(|| &self.out[i * h..(i + 1) * h])
    }
}

impl Model {
    /// Run `tokens` through the model at positions `cache.n_past()..`, append
    /// their keys and values to `cache`, and leave their final hidden states
    /// in `scratch`. Batches longer than the scratch's `max_batch` are split.
    pub fn forward(
        &self,
        cache: &mut KvCache,
        scratch: &mut Scratch,
        tokens: &[u32],
    ) -> Result<(), ModelError> {
        let needed = cache.n_past() + tokens.len();
        if needed > cache.n_ctx() {
            return Err(ModelError::ContextFull {
                needed,
                n_ctx: cache.n_ctx(),
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(ModelError::BadToken {
                id,
                vocab: self.config.vocab,
            });
        }
        self.pool.install(|| {
            for chunk in tokens.chunks(scratch.max_batch) {
                self.forward_batch(cache, scratch, chunk)?;
            }
            Ok(())
        })
    }

    /// Logits for rows `rows` of the last batch, `vocab` values per row, in
    /// the scratch's logits buffer.
    pub fn logits<'s>(
        &self,
        scratch: &'s mut Scratch,
        rows: Range<usize>,
    ) -> Result<&'s mut [f32], ModelError> {
        let rows = rows.start.min(scratch.batch)..rows.end.min(scratch.batch);
        let n = rows.len();
        let h = self.config.hidden;
        let vocab = self.config.vocab;
        scratch.logits.resize(n * vocab, 0.0);
        let out = self.weights.output.matrix(&self.file)?;
        self.matmul(
            &out,
            &scratch.out[rows.start * h..rows.end * h],
            n,
            &mut scratch.logits,
            &mut scratch.qbuf,
            &mut scratch.wide,
        )?;
        if let Some(cap) = self.config.final_softcap {
            ops::softcap(&mut scratch.logits, cap);
        }
        Ok(&mut scratch.logits)
    }

    fn forward_batch(
        &self,
        cache: &mut KvCache,
        s: &mut Scratch,
        tokens: &[u32],
    ) -> Result<(), ModelError> {
        let cfg = &self.config;
        let file = &*self.file;
        let b = tokens.len();
        let h = cfg.hidden;
        let pos0 = cache.n_past();
        s.batch = b;

        let embd = self.weights.token_embd.matrix(file)?;
        let scale = (h as f32).sqrt();
        for (row, &t) in s.x.chunks_exact_mut(h).zip(tokens) {
            embd.dequantize_row(t as usize, row)?;
            row.iter_mut().for_each(|v| *v *= scale);
        }

        let qd = cfg.n_heads * cfg.head_dim;
        let kd = cfg.n_kv_heads * cfg.head_dim;
        let vd = cfg.n_kv_heads * cfg.value_dim;
        for (li, lw) in self.weights.layers.iter().enumerate() {
            pre_norm(
                &self.pool,
                &s.x[..b * h],
                &mut s.h[..b * h],
                &lw.attn_norm,
                cfg.norm_eps,
            );

            let mm = |w: &crate::weights::Linear,
                      input: &[f32],
                      out: &mut [f32],
                      qbuf: &mut Vec<u8>,
                      wide: &mut Vec<f32>| {
                self.matmul(&w.matrix(file)?, input, b, out, qbuf, wide)
            };
            mm(
                &lw.q,
                &s.h[..b * h],
                &mut s.q[..b * qd],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            mm(
                &lw.k,
                &s.h[..b * h],
                &mut s.k[..b * kd],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            mm(
                &lw.v,
                &s.h[..b * h],
                &mut s.v[..b * vd],
                &mut s.qbuf,
                &mut s.wide,
            )?;

            let rope = &s.ropes[li];
            par_rows(&self.pool, &mut s.q[..b * qd], cfg.head_dim, |i, head| {
                ops::rms_norm(head, &lw.q_norm, cfg.norm_eps);
                rope.apply(head, pos0 + i / cfg.n_heads);
                head.iter_mut().for_each(|v| *v *= cfg.attn_scale);
            });
            par_rows(&self.pool, &mut s.k[..b * kd], cfg.head_dim, |i, head| {
                ops::rms_norm(head, &lw.k_norm, cfg.norm_eps);
                rope.apply(head, pos0 + i / cfg.n_kv_heads);
            });

            let layer = &mut cache.layers[li];
            attention(
                &self.pool,
                cfg,
                cfg.layers[li].window,
                pos0,
                b,
                layer,
                &s.q[..b * qd],
                &s.k[..b * kd],
                &s.v[..b * vd],
                &mut s.attn,
                &s.scores,
            );
            store_kv(cfg, layer, pos0, b, &s.k[..b * kd], &s.v[..b * vd]);

            let ad = cfg.n_heads * cfg.value_dim;
            mm(
                &lw.o,
                &s.attn[..b * ad],
                &mut s.o[..b * h],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            post_norm_add(
                &self.pool,
                &mut s.o[..b * h],
                &mut s.x[..b * h],
                &lw.post_attn_norm,
                cfg.norm_eps,
            );

            pre_norm(
                &self.pool,
                &s.x[..b * h],
                &mut s.h[..b * h],
                &lw.ffn_norm,
                cfg.norm_eps,
            );
            let fd = cfg.ffn_dim;
            mm(
                &lw.gate,
                &s.h[..b * h],
                &mut s.gate[..b * fd],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            mm(
                &lw.up,
                &s.h[..b * h],
                &mut s.up[..b * fd],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            let up = &s.up[..b * fd];
            par_rows(&self.pool, &mut s.gate[..b * fd], fd, |i, g| {
                ops::geglu(g, &up[i * fd..(i + 1) * fd])
            });
            mm(
                &lw.down,
                &s.gate[..b * fd],
                &mut s.o[..b * h],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            post_norm_add(
                &self.pool,
                &mut s.o[..b * h],
                &mut s.x[..b * h],
                &lw.post_ffn_norm,
                cfg.norm_eps,
            );
        }

        pre_norm(
            &self.pool,
            &s.x[..b * h],
            &mut s.out[..b * h],
            &self.weights.output_norm,
            cfg.norm_eps,
        );
        cache.advance(b);
        Ok(())
    }
}

/// `h = rms_norm(x) * w` row by row: the norm in front of a block.
fn pre_norm(pool: &quant::ThreadPool, x: &[f32], h: &mut [f32], w: &[f32], eps: f32) {
    h.copy_from_slice(x);
    par_rows(pool, h, w.len(), |_, row| ops::rms_norm(row, w, eps));
}

/// `x += rms_norm(o) * w` row by row: Gemma's norm after a block, then the
/// residual add.
fn post_norm_add(pool: &quant::ThreadPool, o: &mut [f32], x: &mut [f32], w: &[f32], eps: f32) {
    par_rows(pool, o, w.len(), |_, row| ops::rms_norm(row, w, eps));
    for (xv, &ov) in x.iter_mut().zip(o.iter()) {
        *xv += ov;
    }
}

/// Apply `f(row_index, row)` to every `row_len`-wide row of `data`, split
/// over the pool when there are enough rows to pay for the hand-off.
fn par_rows(
    pool: &quant::ThreadPool,
    data: &mut [f32],
    row_len: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let rows = data.len() / row_len.max(1);
    if rows < 16 || pool.threads() == 1 {
        data.chunks_exact_mut(row_len)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
        return;
    }
    let per = rows.div_ceil(pool.threads());
    pool.for_each_chunk_mut(data, per * row_len, |chunk, rows| {
        for (j, r) in rows.chunks_exact_mut(row_len).enumerate() {
            f(chunk * per + j, r);
        }
    });
}

/// Causal attention of the batch's queries over the cached positions before
/// the batch and the batch's own keys. Reading the batch's keys from its own
/// buffer (not the ring) keeps a sliding-window ring correct when a batch is
/// longer than the window. One task is one token and one KV head: the query
/// heads sharing that KV head read each key and value once between them.
#[allow(clippy::too_many_arguments)]
fn attention(
    pool: &quant::ThreadPool,
    cfg: &Config,
    window: Option<usize>,
    pos0: usize,
    b: usize,
    cache: &LayerCache,
    q: &[f32],
    k_new: &[f32],
    v_new: &[f32],
    out: &mut [f32],
    scores: &[Mutex<Vec<f32>>],
) {
    let hd = cfg.head_dim;
    let vdim = cfg.value_dim;
    let n_heads = cfg.n_heads;
    let n_kv = cfg.n_kv_heads;
    let group = n_heads / n_kv;
    let kd = n_kv * hd;
    let vd = n_kv * vdim;
    let n_tasks = b * n_kv;
    let per_worker = n_tasks.div_ceil(scores.len());
    let out = &mut out[..b * n_heads * vdim];

    let key = |p: usize, kvh: usize| -> &[f32] {
        if p < pos0 {
            let slot = p % cache.cap;
            &cache.k[slot * kd + kvh * hd..][..hd]
        } else {
            &k_new[(p - pos0) * kd + kvh * hd..][..hd]
        }
    };
    let value = |p: usize, kvh: usize| -> &[f32] {
        if p < pos0 {
            let slot = p % cache.cap;
            &cache.v[slot * vd + kvh * vdim..][..vdim]
        } else {
            &v_new[(p - pos0) * vd + kvh * vdim..][..vdim]
        }
    };

    let attend = |task: usize, o: &mut [f32], sc: &mut [f32]| {
        let (i, kvh) = (task / n_kv, task % n_kv);
        let pos = pos0 + i;
        let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let n_keys = pos + 1 - lo;
        let stride = sc.len() / group;
        let q0 = (i * n_heads + kvh * group) * hd;
        for (j, p) in (lo..=pos).enumerate() {
            let k = key(p, kvh);
            for g in 0..group {
                sc[g * stride + j] = quant::vector::dot(&q[q0 + g * hd..q0 + (g + 1) * hd], k);
            }
        }
        for g in 0..group {
            let row = &mut sc[g * stride..g * stride + n_keys];
            if let Some(cap) = cfg.attn_softcap {
                ops::softcap(row, cap);
            }
            ops::softmax(row);
        }
        o.fill(0.0);
        for (j, p) in (lo..=pos).enumerate() {
            let v = value(p, kvh);
            for (g, og) in o.chunks_exact_mut(vdim).enumerate() {
                quant::vector::axpy(og, sc[g * stride + j], v);
            }
        }
    };

    pool.for_each_chunk_mut(out, per_worker * group * vdim, |worker, rows| {
        let mut guard = scores[worker].lock().unwrap_or_else(|e| e.into_inner());
        for (r, o) in rows.chunks_exact_mut(group * vdim).enumerate() {
            attend(worker * per_worker + r, o, &mut guard);
        }
    });
}

/// Write the batch's keys and values into the cache; a ring keeps only the
/// last `cap` of them.
fn store_kv(cfg: &Config, cache: &mut LayerCache, pos0: usize, b: usize, k: &[f32], v: &[f32]) {
    let kd = cfg.n_kv_heads * cfg.head_dim;
    let vd = cfg.n_kv_heads * cfg.value_dim;
    for r in b.saturating_sub(cache.cap)..b {
        let slot = (pos0 + r) % cache.cap;
        cache.k[slot * kd..(slot + 1) * kd].copy_from_slice(&k[r * kd..(r + 1) * kd]);
        cache.v[slot * vd..(slot + 1) * vd].copy_from_slice(&v[r * vd..(r + 1) * vd]);
    }
}

impl Model {
    /// `out = W x` for a batch, in the precision the model was loaded with.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        w: &quant::Matrix,
        x: &[f32],
        batch: usize,
        out: &mut [f32],
        qbuf: &mut Vec<u8>,
        wide: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        match self.precision {
            Precision::Quantized => quant::try_matmul(&self.pool, w, x, batch, out, qbuf)?,
            Precision::Exact => matmul_exact(&self.pool, w, x, batch, out, wide)?,
        }
        Ok(())
    }
}

/// `out = W x` with f32 activations: each weight row is dequantized once and
/// dotted with every row of the batch. Slower than the integer kernels, but
/// free of activation-quantization error (see [`Precision`]).
fn matmul_exact(
    pool: &quant::ThreadPool,
    w: &quant::Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    transposed: &mut Vec<f32>,
) -> Result<(), quant::QuantError> {
    let (rows, cols) = (w.rows(), w.cols());
    transposed.resize(rows * batch, 0.0);
    let per_worker = rows.div_ceil(pool.threads());
    let failure = Mutex::new(None);
    pool.for_each_chunk_mut(
        &mut transposed[..rows * batch],
        per_worker * batch,
        |worker, chunk| {
            let mut row = vec![0.0f32; cols];
            for (i, outs) in chunk.chunks_exact_mut(batch).enumerate() {
                if let Err(e) = w.dequantize_row(worker * per_worker + i, &mut row) {
                    *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    return;
                }
                for (b, o) in outs.iter_mut().enumerate() {
                    *o = quant::vector::dot(&row, &x[b * cols..(b + 1) * cols]);
                }
            }
        },
    );
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    for r in 0..rows {
        for b in 0..batch {
            out[b * rows + r] = transposed[r * batch + b];
        }
    }
    Ok(())
}
