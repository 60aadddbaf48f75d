//! The forward pass. One code path serves batched prefill, single-token
//! decode and multi-sequence decode: a batch of rows, each a token of some
//! sequence at that sequence's next position, so the matrix products see all
//! rows at once while attention and the KV cache stay per sequence.

use crate::kv::{KvCache, LayerCache};
use crate::ops;
use crate::{Config, LayerKind, Model, ModelError, Precision};
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
    /// Prefill attention: the keys (transposed) and values of the positions
    /// a batch attends to, gathered contiguously per KV head.
    attn_kv: Vec<f32>,
    /// Quantized activations for the matmul kernels.
    qbuf: Vec<u8>,
    /// Transposed outputs of the exact-precision matmul.
    wide: Vec<f32>,
    /// Logits of the rows last asked for.
    logits: Vec<f32>,
    /// Final-normed hidden states of the last batch.
    out: Vec<f32>,
    batch: usize,
    /// Gemma 4: the batch's per-layer inputs, `n_layers * per_layer_dim` per token.
    ple: Vec<f32>,
    /// Gemma 4: the projection half of the per-layer inputs.
    ple_proj: Vec<f32>,
    /// Gemma 4: one layer's gated per-layer input.
    ple_gate: Vec<f32>,
    /// Keys and values of the batch from layers whose KV later layers reuse,
    /// indexed by layer (empty for the others).
    shared_k: Vec<Vec<f32>>,
    shared_v: Vec<Vec<f32>>,
    /// Buffers of the mixture-of-experts block.
    moe: crate::moe::MoeScratch,
    /// Positions the attention buffers hold scores for.
    n_ctx: usize,
    /// Rows `seq_start[j]..seq_start[j + 1]` of the last batch belong to its
    /// sequence `j`; one entry more than there are sequences.
    seq_start: Vec<usize>,
    /// The sequence of each row of the last batch.
    row_seq: Vec<usize>,
    /// The position of each row of the last batch in its sequence.
    row_pos: Vec<usize>,
    /// The batch's token ids in row order.
    tokens: Vec<u32>,
}

impl Scratch {
    /// Buffers for batches of up to `max_batch` tokens in a context of
    /// `n_ctx`, for a pool of `threads` workers.
    pub fn new(cfg: &Config, n_ctx: usize, max_batch: usize, threads: usize) -> Self {
        let b = max_batch.max(1);
        let qd = cfg.n_heads * cfg.head_dim;
        let kd = cfg.n_kv_heads * cfg.head_dim;
        let vd = cfg.n_kv_heads * cfg.value_dim;
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
                .map(|_| Mutex::new(vec![0.0; n_ctx.max(1) * cfg.n_heads]))
                .collect(),
            attn_kv: Vec::new(),
            qbuf: Vec::new(),
            wide: Vec::new(),
            logits: Vec::new(),
            out: vec![0.0; b * cfg.hidden],
            batch: 0,
            ple: vec![0.0; b * cfg.n_layers * cfg.per_layer_dim],
            ple_proj: vec![0.0; b * cfg.n_layers * cfg.per_layer_dim],
            ple_gate: vec![0.0; b * cfg.per_layer_dim],
            shared_k: (0..cfg.n_layers).map(|_| Vec::new()).collect(),
            shared_v: (0..cfg.n_layers).map(|_| Vec::new()).collect(),
            moe: Default::default(),
            n_ctx: n_ctx.max(1),
            seq_start: Vec::with_capacity(b + 1),
            row_seq: Vec::with_capacity(b),
            row_pos: Vec::with_capacity(b),
            tokens: Vec::with_capacity(b),
        }
    }

    /// Bytes the buffers take (the logits buffer for one row included).
    pub fn bytes_for(cfg: &Config, n_ctx: usize, max_batch: usize, threads: usize) -> usize {
        let b = max_batch.max(1);
        let per_token = 4 * cfg.hidden
            + cfg.n_heads * cfg.head_dim
            + cfg.n_kv_heads * (cfg.head_dim + cfg.value_dim)
            + cfg.n_heads * cfg.value_dim
            + 2 * cfg.ffn_dim
            + (2 * cfg.n_layers + 1) * cfg.per_layer_dim;
        // A long batch's attention gathers the keys and values it reads.
        let gathered = if b >= BLOCKED_ATTENTION_MIN_ROWS {
            n_ctx * cfg.n_kv_heads * (cfg.head_dim + cfg.value_dim)
        } else {
            0
        };
        (b * per_token + threads.max(1) * n_ctx * cfg.n_heads + cfg.vocab + gathered)
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

    /// Sequences in the last batch run (1 after [`Model::forward`]).
    pub fn sequences(&self) -> usize {
        self.seq_start.len().saturating_sub(1)
    }

    /// Rows of sequence `j` in the last batch run.
    pub fn sequence_rows(&self, j: usize) -> Option<Range<usize>> {
        let start = *self.seq_start.get(j)?;
        let end = *self.seq_start.get(j + 1)?;
        Some(start..end)
    }

    /// Final-normed hidden state of row `i` of the last batch.
    pub fn hidden(&self, i: usize) -> Option<&[f32]> {
        let h = self.out.len() / self.max_batch;
        (i < self.batch).then(|| &self.out[i * h..(i + 1) * h])
    }
}

/// One sequence's share of a [`Model::forward_multi`] step.
#[derive(Debug)]
pub struct SeqInput<'a> {
    /// The sequence's cache; the tokens go at positions `cache.n_past()..`.
    pub cache: &'a mut KvCache,
    /// The tokens that follow what the cache holds (at least one).
    pub tokens: &'a [u32],
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
        self.check_input(cache, scratch, tokens)?;
        self.pool.install(|| {
            for chunk in tokens.chunks(scratch.max_batch) {
                self.forward_batch(
                    &mut [SeqInput {
                        cache: &mut *cache,
                        tokens: chunk,
                    }],
                    scratch,
                )?;
            }
            Ok(())
        })
    }

    /// One forward step over several sequences: each appends its `tokens` to
    /// its own cache, at its own positions. The rows of all sequences go
    /// through every matrix product together, so the weights are read once
    /// per step instead of once per sequence; RoPE, attention and the cache
    /// writes use each row's own sequence. All rows must fit the scratch's
    /// `max_batch`. Nothing is written when the batch is refused.
    ///
    /// [`Model::sequence_logits`] then gives the logits of each sequence's
    /// last token.
    pub fn forward_multi(
        &self,
        seqs: &mut [SeqInput<'_>],
        scratch: &mut Scratch,
    ) -> Result<(), ModelError> {
        let rows: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        if seqs.is_empty() || seqs.iter().any(|s| s.tokens.is_empty()) {
            return Err(ModelError::BadBatch(
                "every sequence of a batch needs at least one token".into(),
            ));
        }
        if rows > scratch.max_batch {
            return Err(ModelError::BadBatch(format!(
                "{rows} rows do not fit buffers made for {}",
                scratch.max_batch
            )));
        }
        for s in seqs.iter() {
            self.check_input(s.cache, scratch, s.tokens)?;
        }
        self.pool.install(|| self.forward_batch(seqs, scratch))
    }

    /// Refuse tokens that would not fit the cache or the scratch's attention
    /// buffers, and ids outside the vocabulary.
    fn check_input(
        &self,
        cache: &KvCache,
        scratch: &Scratch,
        tokens: &[u32],
    ) -> Result<(), ModelError> {
        let needed = cache.n_past() + tokens.len();
        let n_ctx = cache.n_ctx().min(scratch.n_ctx);
        if needed > n_ctx {
            return Err(ModelError::ContextFull { needed, n_ctx });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(ModelError::BadToken {
                id,
                vocab: self.config.vocab,
            });
        }
        Ok(())
    }

    /// Logits of the last row of each sequence of the last batch, `vocab`
    /// values per sequence in batch order, from one product with the output
    /// head (which is then read once for all of them).
    pub fn sequence_logits<'s>(
        &self,
        scratch: &'s mut Scratch,
    ) -> Result<&'s mut [f32], ModelError> {
        self.gathered_logits(scratch, true, &[])
    }

    /// [`Model::sequence_logits`], then the logits of `extra` final-normed
    /// hidden rows (another scratch's [`Scratch::hidden`], such as a prompt
    /// just prefilled on its own), all from the same product with the head.
    pub fn sequence_logits_with<'s>(
        &self,
        scratch: &'s mut Scratch,
        extra: &[&[f32]],
    ) -> Result<&'s mut [f32], ModelError> {
        self.gathered_logits(scratch, true, extra)
    }

    /// The logits of final-normed hidden rows alone (the last batch of
    /// `scratch` is left out), using `scratch`'s buffers.
    pub fn hidden_logits<'s>(
        &self,
        scratch: &'s mut Scratch,
        rows: &[&[f32]],
    ) -> Result<&'s mut [f32], ModelError> {
        self.gathered_logits(scratch, false, rows)
    }

    fn gathered_logits<'s>(
        &self,
        scratch: &'s mut Scratch,
        with_batch: bool,
        extra: &[&[f32]],
    ) -> Result<&'s mut [f32], ModelError> {
        let h = self.config.hidden;
        if let Some(bad) = extra.iter().find(|r| r.len() != h) {
            return Err(ModelError::BadBatch(format!(
                "a hidden row of {} values where the model has {h}",
                bad.len()
            )));
        }
        let n = if with_batch { scratch.sequences() } else { 0 };
        let m = n + extra.len();
        // One row per sequence already in place: no copy.
        let in_place = extra.is_empty() && (0..n).all(|j| scratch.seq_start[j + 1] == j + 1);
        if !in_place {
            // Gather into `h`, free once the batch has run (grown when the
            // extra rows need more than a batch).
            if scratch.h.len() < m * h {
                scratch.h.resize(m * h, 0.0);
            }
            for j in 0..n {
                let r = scratch.seq_start[j + 1] - 1;
                scratch.h[j * h..(j + 1) * h].copy_from_slice(&scratch.out[r * h..(r + 1) * h]);
            }
            for (j, row) in extra.iter().enumerate() {
                scratch.h[(n + j) * h..(n + j + 1) * h].copy_from_slice(row);
            }
        }
        let vocab = self.config.vocab;
        scratch.logits.resize(m * vocab, 0.0);
        let out = self.weights.output.matrix(&self.file)?;
        let input = if in_place {
            &scratch.out[..m * h]
        } else {
            &scratch.h[..m * h]
        };
        self.matmul(
            &out,
            input,
            m,
            &mut scratch.logits,
            &mut scratch.qbuf,
            &mut scratch.wide,
        )?;
        if let Some(cap) = self.config.final_softcap {
            ops::softcap(&mut scratch.logits, cap);
        }
        Ok(&mut scratch.logits)
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

    /// One batch whose rows are the tokens of `seqs` in order; each row
    /// carries its sequence and position (`s.row_seq`, `s.row_pos`).
    fn forward_batch(&self, seqs: &mut [SeqInput<'_>], s: &mut Scratch) -> Result<(), ModelError> {
        let cfg = &self.config;
        let file = &*self.file;
        let h = cfg.hidden;
        s.seq_start.clear();
        s.row_seq.clear();
        s.row_pos.clear();
        s.tokens.clear();
        for (j, sq) in seqs.iter().enumerate() {
            s.seq_start.push(s.row_pos.len());
            let p0 = sq.cache.n_past();
            s.row_pos.extend(p0..p0 + sq.tokens.len());
            s.row_seq.extend(std::iter::repeat_n(j, sq.tokens.len()));
            s.tokens.extend_from_slice(sq.tokens);
        }
        let b = s.row_pos.len();
        s.seq_start.push(b);
        s.batch = b;

        let tokens = std::mem::take(&mut s.tokens);
        let embd = self.weights.token_embd.matrix(file)?;
        let scale = (h as f32).sqrt();
        for (row, &t) in s.x.chunks_exact_mut(h).zip(&tokens) {
            embd.dequantize_row(t as usize, row)?;
            row.iter_mut().for_each(|v| *v *= scale);
        }
        if let Some(ple) = &self.weights.per_layer {
            self.per_layer_inputs(ple, s, &tokens)?;
        }
        s.tokens = tokens;

        let mm = |w: &crate::weights::Linear,
                  input: &[f32],
                  out: &mut [f32],
                  qbuf: &mut Vec<u8>,
                  wide: &mut Vec<f32>| {
            self.matmul(&w.matrix(file)?, input, b, out, qbuf, wide)
        };
        for (li, lw) in self.weights.layers.iter().enumerate() {
            let kind = &cfg.layers[li];
            let hd = kind.head_dim;
            let qd = cfg.n_heads * hd;
            let kd = kind.n_kv_heads * hd;
            let vd = kind.n_kv_heads * kind.value_dim;
            pre_norm(
                &self.pool,
                &s.x[..b * h],
                &mut s.h[..b * h],
                &lw.attn_norm,
                cfg.norm_eps,
            );

            mm(
                &lw.q,
                &s.h[..b * h],
                &mut s.q[..b * qd],
                &mut s.qbuf,
                &mut s.wide,
            )?;
            let rope = &self.ropes[li];
            par_rows(&self.pool, &mut s.q[..b * qd], hd, |i, head| {
                if let Some(w) = &lw.q_norm {
                    ops::rms_norm(head, w, cfg.norm_eps);
                }
                rope.apply(head, s.row_pos[i / cfg.n_heads]);
                if cfg.attn_scale != 1.0 {
                    head.iter_mut().for_each(|v| *v *= cfg.attn_scale);
                }
            });

            let (kv_layer, k_new, v_new) = match kind.kv_source {
                Some(src) => (src, &s.shared_k[src][..b * kd], &s.shared_v[src][..b * vd]),
                None => {
                    let k_w = lw.k.as_ref().ok_or_else(|| {
                        ModelError::MissingTensor(format!("blk.{li}.attn_k.weight"))
                    })?;
                    mm(
                        k_w,
                        &s.h[..b * h],
                        &mut s.k[..b * kd],
                        &mut s.qbuf,
                        &mut s.wide,
                    )?;
                    match &lw.v {
                        Some(v_w) => mm(
                            v_w,
                            &s.h[..b * h],
                            &mut s.v[..b * vd],
                            &mut s.qbuf,
                            &mut s.wide,
                        )?,
                        // k = v: values are the keys' projection before
                        // the key norm and RoPE.
                        None => s.v[..b * vd].copy_from_slice(&s.k[..b * kd]),
                    }
                    par_rows(&self.pool, &mut s.k[..b * kd], hd, |i, head| {
                        if let Some(w) = &lw.k_norm {
                            ops::rms_norm(head, w, cfg.norm_eps);
                        }
                        rope.apply(head, s.row_pos[i / kind.n_kv_heads]);
                    });
                    if cfg.v_norm {
                        par_rows(&self.pool, &mut s.v[..b * vd], kind.value_dim, |_, head| {
                            ops::rms_norm_plain(head, cfg.norm_eps)
                        });
                    }
                    if cfg.is_kv_source(li) {
                        s.shared_k[li].clear();
                        s.shared_k[li].extend_from_slice(&s.k[..b * kd]);
                        s.shared_v[li].clear();
                        s.shared_v[li].extend_from_slice(&s.v[..b * vd]);
                    }
                    (li, &s.k[..b * kd], &s.v[..b * vd])
                }
            };

            attention(
                &self.pool,
                cfg,
                kind,
                Rows {
                    seqs,
                    layer: kv_layer,
                    seq_start: &s.seq_start,
                    row_seq: &s.row_seq,
                },
                &s.q[..b * qd],
                k_new,
                v_new,
                &mut s.attn,
                &s.scores,
                &mut s.attn_kv,
            );
            // A layer whose KV later layers reuse writes its ring only after
            // the whole batch: they still need the positions it would evict.
            if kind.kv_source.is_none() && !cfg.is_kv_source(li) {
                store_seqs_kv(kind, li, seqs, &s.seq_start, &s.k, &s.v);
            }

            let ad = cfg.n_heads * kind.value_dim;
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
            let fd = kind.ffn_dim;
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
            if let Some(moe) = &lw.moe {
                self.moe_block(
                    moe,
                    &s.x[..b * h],
                    &mut s.o[..b * h],
                    b,
                    &mut s.moe,
                    &mut s.qbuf,
                    &mut s.wide,
                )?;
            }
            post_norm_add(
                &self.pool,
                &mut s.o[..b * h],
                &mut s.x[..b * h],
                &lw.post_ffn_norm,
                cfg.norm_eps,
            );

            if let Some(pl) = &lw.per_layer {
                // Gemma 4: a gated projection of this layer's per-layer input.
                let pd = cfg.per_layer_dim;
                let width = cfg.n_layers * pd;
                mm(
                    &pl.gate,
                    &s.x[..b * h],
                    &mut s.ple_gate[..b * pd],
                    &mut s.qbuf,
                    &mut s.wide,
                )?;
                for (i, g) in s.ple_gate[..b * pd].chunks_exact_mut(pd).enumerate() {
                    let input = &s.ple[i * width + li * pd..][..pd];
                    for (gv, &iv) in g.iter_mut().zip(input) {
                        *gv = ops::gelu_tanh(*gv) * iv;
                    }
                }
                mm(
                    &pl.proj,
                    &s.ple_gate[..b * pd],
                    &mut s.o[..b * h],
                    &mut s.qbuf,
                    &mut s.wide,
                )?;
                post_norm_add(
                    &self.pool,
                    &mut s.o[..b * h],
                    &mut s.x[..b * h],
                    &pl.post_norm,
                    cfg.norm_eps,
                );
            }
            if let Some(f) = lw.out_scale {
                s.x[..b * h].iter_mut().for_each(|v| *v *= f);
            }
        }

        for (li, kind) in cfg.layers.iter().enumerate() {
            if cfg.is_kv_source(li) {
                store_seqs_kv(
                    kind,
                    li,
                    seqs,
                    &s.seq_start,
                    &s.shared_k[li],
                    &s.shared_v[li],
                );
            }
        }
        pre_norm(
            &self.pool,
            &s.x[..b * h],
            &mut s.out[..b * h],
            &self.weights.output_norm,
            cfg.norm_eps,
        );
        for sq in seqs.iter_mut() {
            sq.cache.advance(sq.tokens.len());
        }
        Ok(())
    }

    /// Gemma 4's per-layer inputs for the batch: each token's row of the
    /// per-layer embedding table (scaled by `sqrt(per_layer_dim)`) plus a
    /// normed projection of its scaled embedding, the sum scaled by `1/sqrt 2`.
    /// Needs the scaled embeddings in `s.x`.
    fn per_layer_inputs(
        &self,
        ple: &crate::weights::PerLayerEmbeddings,
        s: &mut Scratch,
        tokens: &[u32],
    ) -> Result<(), ModelError> {
        let cfg = &self.config;
        let file = &*self.file;
        let b = tokens.len();
        let pd = cfg.per_layer_dim;
        let width = cfg.n_layers * pd;
        let table = ple.token_embd.matrix(file)?;
        let tok_scale = (pd as f32).sqrt();
        for (row, &t) in s.ple.chunks_exact_mut(width).zip(tokens) {
            table.dequantize_row(t as usize, row)?;
            row.iter_mut().for_each(|v| *v *= tok_scale);
        }
        self.matmul(
            &ple.model_proj.matrix(file)?,
            &s.x[..b * cfg.hidden],
            b,
            &mut s.ple_proj[..b * width],
            &mut s.qbuf,
            &mut s.wide,
        )?;
        let proj_scale = 1.0 / (cfg.hidden as f32).sqrt();
        let mix = std::f32::consts::FRAC_1_SQRT_2;
        for (p, t) in s.ple_proj[..b * width]
            .chunks_exact_mut(pd)
            .zip(s.ple[..b * width].chunks_exact_mut(pd))
        {
            p.iter_mut().for_each(|v| *v *= proj_scale);
            ops::rms_norm(p, &ple.proj_norm, cfg.norm_eps);
            for (tv, &pv) in t.iter_mut().zip(p.iter()) {
                *tv = (pv + *tv) * mix;
            }
        }
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

/// Which sequence each row of a batch belongs to, and the cache layer its
/// queries read.
struct Rows<'r, 'a> {
    seqs: &'r [SeqInput<'a>],
    /// The layer whose cache holds the keys (the KV source on sharing layers).
    layer: usize,
    seq_start: &'r [usize],
    row_seq: &'r [usize],
}

/// Causal attention of the batch's queries, each over its own sequence: the
/// cached positions before the batch and the sequence's keys in the batch.
/// Reading the batch's keys from its own buffer (not the ring) keeps a
/// sliding-window ring correct when a batch is longer than the window. One
/// task is one row and one KV head: the query heads sharing that KV head read
/// each key and value once between them.
#[allow(clippy::too_many_arguments)]
fn attention(
    pool: &quant::ThreadPool,
    cfg: &Config,
    kind: &LayerKind,
    rows: Rows<'_, '_>,
    q: &[f32],
    k_new: &[f32],
    v_new: &[f32],
    out: &mut [f32],
    scores: &[Mutex<Vec<f32>>],
    gathered: &mut Vec<f32>,
) {
    let b = rows.row_seq.len();
    if rows.seqs.len() == 1 && b >= BLOCKED_ATTENTION_MIN_ROWS {
        let view = BlockedView {
            kind,
            rows,
            q,
            k_new,
            v_new,
        };
        return attention_blocked(pool, cfg, view, out, scores, gathered);
    }
    let window = kind.window;
    let hd = kind.head_dim;
    let vdim = kind.value_dim;
    let n_heads = cfg.n_heads;
    let n_kv = kind.n_kv_heads;
    let group = n_heads / n_kv;
    let kd = n_kv * hd;
    let vd = n_kv * vdim;
    let n_tasks = b * n_kv;
    let per_worker = n_tasks.div_ceil(scores.len());
    let out = &mut out[..b * n_heads * vdim];

    let attend = |task: usize, o: &mut [f32], sc: &mut [f32]| {
        let (i, kvh) = (task / n_kv, task % n_kv);
        let seq = rows.row_seq[i];
        let row0 = rows.seq_start[seq];
        let seq_cache = &*rows.seqs[seq].cache;
        let pos0 = seq_cache.n_past();
        let cache: &LayerCache = &seq_cache.layers[rows.layer];
        let key = |p: usize| -> &[f32] {
            if p < pos0 {
                let slot = p % cache.cap;
                &cache.k[slot * kd + kvh * hd..][..hd]
            } else {
                &k_new[(row0 + p - pos0) * kd + kvh * hd..][..hd]
            }
        };
        let value = |p: usize| -> &[f32] {
            if p < pos0 {
                let slot = p % cache.cap;
                &cache.v[slot * vd + kvh * vdim..][..vdim]
            } else {
                &v_new[(row0 + p - pos0) * vd + kvh * vdim..][..vdim]
            }
        };
        let pos = pos0 + (i - row0);
        let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let n_keys = pos + 1 - lo;
        let stride = sc.len() / group;
        let q0 = (i * n_heads + kvh * group) * hd;
        for (j, p) in (lo..=pos).enumerate() {
            let k = key(p);
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
            let v = value(p);
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

/// Batches of one sequence with at least this many rows take the blocked
/// attention (prefill); shorter ones, decode steps among them, go row by row.
const BLOCKED_ATTENTION_MIN_ROWS: usize = 16;

/// Query vectors per block of the blocked attention: a multiple of the
/// heads sharing a KV head, near the matrix kernel's 12-row tile.
const BLOCK_QUERIES: usize = 12;

/// What the blocked attention reads: the layer, the single sequence's rows,
/// and the batch's queries, keys and values.
struct BlockedView<'v, 'r, 'a> {
    kind: &'v LayerKind,
    rows: Rows<'r, 'a>,
    q: &'v [f32],
    k_new: &'v [f32],
    v_new: &'v [f32],
}

/// [`attention`] for a long batch of one sequence, as matrix products: the
/// keys and values it attends to are gathered once per KV head (keys
/// transposed), and each block of queries gets its scores as one product
/// with the keys and its output as one product of the probabilities with the
/// values. Positions outside a query's causal window get probability 0.
fn attention_blocked(
    pool: &quant::ThreadPool,
    cfg: &Config,
    view: BlockedView<'_, '_, '_>,
    out: &mut [f32],
    scores: &[Mutex<Vec<f32>>],
    gathered: &mut Vec<f32>,
) {
    let BlockedView {
        kind,
        rows,
        q,
        k_new,
        v_new,
    } = view;
    let b = rows.row_seq.len();
    let (hd, vdim) = (kind.head_dim, kind.value_dim);
    let (n_heads, n_kv) = (cfg.n_heads, kind.n_kv_heads);
    let group = n_heads / n_kv;
    let (kd, vd) = (n_kv * hd, n_kv * vdim);
    let seq_cache = &*rows.seqs[0].cache;
    let pos0 = seq_cache.n_past();
    let cache: &LayerCache = &seq_cache.layers[rows.layer];
    let lo_of = |pos: usize| kind.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    // Keys klo..=khi cover every row's window.
    let klo = lo_of(pos0);
    let nk = pos0 + b - klo;
    gathered.resize(n_kv * nk * (hd + vdim), 0.0);
    let (kt_all, vc_all) = gathered.split_at_mut(n_kv * nk * hd);
    for j in 0..nk {
        let p = klo + j;
        let (k_row, v_row) = if p < pos0 {
            let slot = p % cache.cap;
            (
                &cache.k[slot * kd..(slot + 1) * kd],
                &cache.v[slot * vd..(slot + 1) * vd],
            )
        } else {
            let r = p - pos0;
            (&k_new[r * kd..(r + 1) * kd], &v_new[r * vd..(r + 1) * vd])
        };
        for kvh in 0..n_kv {
            let kt = &mut kt_all[kvh * nk * hd..(kvh + 1) * nk * hd];
            for (d, &x) in k_row[kvh * hd..(kvh + 1) * hd].iter().enumerate() {
                kt[d * nk + j] = x;
            }
            vc_all[(kvh * nk + j) * vdim..(kvh * nk + j + 1) * vdim]
                .copy_from_slice(&v_row[kvh * vdim..(kvh + 1) * vdim]);
        }
    }
    let (kt_all, vc_all) = (&*kt_all, &*vc_all);
    let block_rows = (BLOCK_QUERIES / group).max(1);
    let per_worker = b.div_ceil(scores.len()).div_ceil(block_rows) * block_rows;
    let row_len = n_heads * vdim;
    pool.for_each_chunk_mut(
        &mut out[..b * row_len],
        per_worker * row_len,
        |worker, mine| {
            let mut guard = scores[worker].lock().unwrap_or_else(|e| e.into_inner());
            let first_row = worker * per_worker;
            let m_max = block_rows * group;
            guard.resize(m_max * (hd + nk + vdim), 0.0);
            let (a, rest) = guard.split_at_mut(m_max * hd);
            let (sc, o) = rest.split_at_mut(m_max * nk);
            for (blk, out_blk) in mine.chunks_mut(block_rows * row_len).enumerate() {
                let i0 = first_row + blk * block_rows;
                let nrows = out_blk.len() / row_len;
                let m = nrows * group;
                // Keys the block's rows attend to, as indices into the gathered ones.
                let jlo = lo_of(pos0 + i0) - klo;
                let nkb = pos0 + i0 + nrows - klo - jlo;
                for kvh in 0..n_kv {
                    for r in 0..nrows {
                        let src = ((i0 + r) * n_heads + kvh * group) * hd;
                        a[r * group * hd..(r + 1) * group * hd]
                            .copy_from_slice(&q[src..src + group * hd]);
                    }
                    let kt = &kt_all[kvh * nk * hd + jlo..];
                    quant::vector::sgemm(m, nkb, hd, a, hd, kt, nk, sc, nkb);
                    for qi in 0..m {
                        let pos = pos0 + i0 + qi / group;
                        let (lo, hi) = (lo_of(pos) - klo - jlo, pos - klo - jlo);
                        let row = &mut sc[qi * nkb..(qi + 1) * nkb];
                        row[..lo].fill(0.0);
                        row[hi + 1..].fill(0.0);
                        let live = &mut row[lo..=hi];
                        if let Some(cap) = cfg.attn_softcap {
                            ops::softcap(live, cap);
                        }
                        ops::softmax(live);
                    }
                    let vc = &vc_all[(kvh * nk + jlo) * vdim..];
                    quant::vector::sgemm(m, vdim, nkb, sc, nkb, vc, vdim, o, vdim);
                    for r in 0..nrows {
                        let dst = r * row_len + kvh * group * vdim;
                        out_blk[dst..dst + group * vdim]
                            .copy_from_slice(&o[r * group * vdim..(r + 1) * group * vdim]);
                    }
                }
            }
        },
    );
}

/// Write each sequence's keys and values of layer `li` into its own cache.
fn store_seqs_kv(
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
        store_kv(
            kind,
            &mut sq.cache.layers[li],
            pos0,
            r1 - r0,
            &k[r0 * kd..r1 * kd],
            &v[r0 * vd..r1 * vd],
        );
    }
}

/// Write the batch's keys and values into the cache; a ring keeps only the
/// last `cap` of them.
fn store_kv(kind: &LayerKind, cache: &mut LayerCache, pos0: usize, b: usize, k: &[f32], v: &[f32]) {
    let kd = kind.n_kv_heads * kind.head_dim;
    let vd = kind.n_kv_heads * kind.value_dim;
    for r in b.saturating_sub(cache.cap)..b {
        let slot = (pos0 + r) % cache.cap;
        cache.k[slot * kd..(slot + 1) * kd].copy_from_slice(&k[r * kd..(r + 1) * kd]);
        cache.v[slot * vd..(slot + 1) * vd].copy_from_slice(&v[r * vd..(r + 1) * vd]);
    }
}

impl Model {
    /// `out = W x` for a batch, in the precision the model was loaded with.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul(
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
