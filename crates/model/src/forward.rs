//! The forward pass. One code path serves batched prefill, single-token
//! decode and multi-sequence decode: a batch of rows, each a token of some
//! sequence at that sequence's next position, so the matrix products see all
//! rows at once while attention and the KV cache stay per sequence.
//!
//! A batch runs as a short sequence of named steps (see
//! [`Model::forward_batch`]): embed, then per layer the attention block, the
//! feed-forward block and (Gemma 4) the per-layer input, then the final norm.
//! What differs between Gemma variants is data in the [`crate::Config`] and the
//! bound weights (an optional tensor is an absent step), decided once at load.

use crate::attention::{attend, AttentionBuffers, AttentionInput};
use crate::kv::{slots_before_attention, store_batch_kv, KvSlot};
use crate::ops::{par_rows, post_norm_add, pre_norm};
use crate::weights::Linear;
use crate::{ops, Arch, KvCache, Model, ModelError, Precision, Scratch};

/// The query or key heads of a batch, for [`Model::rotate_heads`].
#[derive(Clone, Copy)]
struct Heads<'w> {
    /// Heads per row.
    per_row: usize,
    /// Width of a head.
    dim: usize,
    /// The layer's QK-norm weights, if it has them.
    norm: Option<&'w [f32]>,
    /// Multiplier after RoPE (queries' attention scale; 1 for keys).
    scale: f32,
}

/// One head of a batch row: the QK-norm where the layer has one, RoPE
/// through the row's angles, then the scale.
fn finish_head(
    rope: &ops::Rope,
    eps: f32,
    heads: Heads<'_>,
    head: &mut [f32],
    cos: &[f32],
    sin: &[f32],
) {
    if let Some(w) = heads.norm {
        ops::rms_norm(head, w, eps);
    }
    rope.apply_angles(head, cos, sin);
    if heads.scale != 1.0 {
        head.iter_mut().for_each(|v| *v *= heads.scale);
    }
}

/// One row of a batch's keys and values for [`Model::finish_kv_rows`], with
/// its cache slots when it stores them.
struct KvRow<'a> {
    k: &'a mut [f32],
    v: &'a mut [f32],
    slot: Option<KvSlot<'a>>,
}

/// One sequence's share of a [`Model::forward_multi`] step.
#[derive(Debug)]
pub struct SeqInput<'a> {
    /// The sequence's cache; the tokens go at positions `cache.n_past()..`.
    pub cache: &'a mut KvCache,
    /// The tokens that follow what the cache holds (at least one).
    pub tokens: &'a [u32],
    /// Embeddings that stand in for some of these tokens (images), in
    /// order, not overlapping; empty for text.
    pub embedded: &'a [Embedded<'a>],
}

/// Rows of the model's width that replace the embeddings of some tokens of a
/// sequence: an image's soft tokens, whose embeddings come from a vision
/// tower. They enter the residual stream as they are (no embedding scale).
#[derive(Debug, Clone, Copy)]
pub struct Embedded<'a> {
    /// Index, in the sequence's tokens, of the first token replaced.
    pub start: usize,
    /// How many tokens are replaced.
    pub len: usize,
    /// `len` rows of the model's width.
    pub rows: &'a [f32],
    /// Whether the replaced tokens see each other both ways (an image's
    /// tokens attend to the whole image, as transformers' and llama.cpp's
    /// masks do), on top of the causal mask: on every layer for Gemma 3, on
    /// the sliding-window layers only for Gemma 4 (its global layers stay
    /// causal). Such a span must be fed in one batch.
    pub bidirectional: bool,
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
        self.forward_embedded(cache, scratch, tokens, &[])
    }

    /// [`Self::forward`] with some tokens' embeddings given (see
    /// [`Embedded`]). Batches are split between spans, never inside one, so
    /// a span longer than the scratch's `max_batch` is refused.
    pub fn forward_embedded(
        &self,
        cache: &mut KvCache,
        scratch: &mut Scratch,
        tokens: &[u32],
        embedded: &[Embedded<'_>],
    ) -> Result<(), ModelError> {
        self.check_generative()?;
        self.check_input(cache, scratch, tokens)?;
        self.check_embedded(tokens.len(), embedded)?;
        let max = scratch.max_batch;
        if let Some(e) = embedded.iter().find(|e| e.len > max) {
            return Err(ModelError::BadBatch(format!(
                "{} embedded tokens do not fit a batch of {max}",
                e.len
            )));
        }
        self.pool.install(|| {
            let mut start = 0;
            while start < tokens.len() {
                let mut end = (start + max).min(tokens.len());
                // End the batch before a span it would cut.
                if let Some(e) = embedded
                    .iter()
                    .find(|e| e.start < end && e.start + e.len > end && e.start > start)
                {
                    end = e.start;
                }
                let spans: Vec<Embedded<'_>> = embedded
                    .iter()
                    .filter(|e| e.start >= start && e.start < end)
                    .map(|e| Embedded {
                        start: e.start - start,
                        ..*e
                    })
                    .collect();
                let mut seq = [SeqInput {
                    cache: &mut *cache,
                    tokens: &tokens[start..end],
                    embedded: &spans,
                }];
                self.forward_batch(&mut seq, scratch)?;
                start = end;
            }
            Ok(())
        })
    }

    /// Refuse embedded spans that overlap, run past the tokens or have the
    /// wrong number of values.
    fn check_embedded(&self, n_tokens: usize, embedded: &[Embedded<'_>]) -> Result<(), ModelError> {
        let mut next_free = 0;
        for e in embedded {
            if e.len == 0 || e.start < next_free || e.start + e.len > n_tokens {
                return Err(ModelError::BadBatch(format!(
                    "embedded span {}..{} overlaps another or lies outside the {n_tokens} tokens",
                    e.start,
                    e.start + e.len
                )));
            }
            if e.rows.len() != e.len * self.config.hidden {
                return Err(ModelError::BadBatch(format!(
                    "{} values embed {} tokens of width {}",
                    e.rows.len(),
                    e.len,
                    self.config.hidden
                )));
            }
            next_free = e.start + e.len;
        }
        Ok(())
    }

    /// One forward step over several sequences: each appends its `tokens` to
    /// its own cache, at its own positions. The rows of all sequences go
    /// through every matrix product together, so the weights are read once
    /// per step instead of once per sequence; RoPE, attention and the cache
    /// writes use each row's own sequence. All rows must fit the scratch's
    /// `max_batch`. Nothing is written when the batch is refused.
    ///
    /// [`Model::head_logits`] then gives the logits of each sequence's
    /// last token.
    pub fn forward_multi(
        &self,
        seqs: &mut [SeqInput<'_>],
        scratch: &mut Scratch,
    ) -> Result<(), ModelError> {
        self.check_generative()?;
        self.forward_rows(seqs, scratch)
    }

    /// An embedding model keeps no keys and values for later tokens, so it
    /// cannot continue a sequence.
    fn check_generative(&self) -> Result<(), ModelError> {
        match self.config.causal {
            true => Ok(()),
            false => Err(ModelError::NotGenerative),
        }
    }

    /// [`Self::forward_multi`] for any model: an embedding model's texts
    /// each whole in the batch (see [`Model::embed_texts`]).
    pub(crate) fn forward_rows(
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
            self.check_embedded(s.tokens.len(), s.embedded)?;
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

    /// One batch whose rows are the tokens of `seqs` in order.
    fn forward_batch(&self, seqs: &mut [SeqInput<'_>], s: &mut Scratch) -> Result<(), ModelError> {
        s.lay_out_rows(seqs, self.config.causal);
        self.embed(s, seqs)?;
        self.altup_embed(s)?;
        for li in 0..self.config.n_layers {
            self.altup_predict(li, s);
            self.attention_block(li, seqs, s)?;
            self.laurel_block(li, s)?;
            self.ffn_block(li, s)?;
            if self.config.altup_streams > 0 {
                self.altup_correct(li, s)?;
            } else {
                self.per_layer_input_block(li, s)?;
            }
            if let Some(f) = self.weights.layers[li].out_scale {
                s.x[..s.batch * self.config.hidden]
                    .iter_mut()
                    .for_each(|v| *v *= f);
            }
        }
        self.store_shared_kv(seqs, s);
        self.altup_merge(s)?;
        let n = s.batch * self.config.hidden;
        pre_norm(
            &self.pool,
            &s.x[..n],
            &mut s.out[..n],
            &self.weights.output_norm,
            self.config.norm_eps,
        );
        for sq in seqs.iter_mut() {
            sq.cache.advance(sq.tokens.len());
        }
        Ok(())
    }

    /// The residual stream starts as the scaled token embeddings, with the
    /// rows `seqs` give in place of some tokens' (images) copied over them;
    /// on Gemma 4 the per-layer inputs are then computed from both, as
    /// transformers does (the token part from the ids, the projected part
    /// from the merged rows).
    fn embed(&self, s: &mut Scratch, seqs: &[SeqInput<'_>]) -> Result<(), ModelError> {
        let h = self.config.hidden;
        let tokens = std::mem::take(&mut s.tokens);
        let embd = self.weights.token_embd.matrix(&self.file)?;
        let scale = (h as f32).sqrt();
        for (row, &t) in s.x.chunks_exact_mut(h).zip(&tokens) {
            embd.dequantize_row(t as usize, row)?;
            row.iter_mut().for_each(|v| *v *= scale);
        }
        for (sq, &first) in seqs.iter().zip(&s.seq_start) {
            for e in sq.embedded {
                s.x[(first + e.start) * h..][..e.len * h].copy_from_slice(e.rows);
            }
        }
        let per_layer = match &self.weights.per_layer {
            Some(ple) => self.per_layer_inputs(ple, s, &tokens),
            None => Ok(()),
        };
        s.tokens = tokens;
        per_layer
    }

    /// Layer `li`'s attention: `x += post_norm(o(attend(q, k, v)))` over
    /// `pre_norm(x)`, with the layer's keys and values stored in each cache.
    fn attention_block(
        &self,
        li: usize,
        seqs: &mut [SeqInput<'_>],
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let (cfg, lw, kind) = (
            &self.config,
            &self.weights.layers[li],
            &self.config.layers[li],
        );
        let (b, h) = (s.batch, cfg.hidden);
        let (kd, vd) = (
            kind.n_kv_heads * kind.head_dim,
            kind.n_kv_heads * kind.value_dim,
        );
        self.block_input_for(&lw.attn_norm, s, &lw.q)?;
        self.qkv_products(li, s)?;
        self.finish_queries(li, s);
        if let (Some(w), false) = (kind.window, cfg.causal) {
            s.reach_within(w);
        }
        // A layer that shares another's KV reads that layer's cache and keys.
        let (kv_layer, stored) = match kind.kv_source {
            Some(src) => (src, false),
            None => (li, self.finish_keys_values(li, seqs, s)),
        };
        let (k_new, v_new) = if kv_layer == li {
            (&s.k[..b * kd], &s.v[..b * vd])
        } else {
            (
                &s.shared_k[kv_layer][..b * kd],
                &s.shared_v[kv_layer][..b * vd],
            )
        };
        // Gemma 4's global layers keep image tokens causal; an embedding
        // model's sliding layers reach half their window ahead.
        let spans_apply = cfg.arch != Arch::Gemma4 || kind.window.is_some();
        let row_last = match kind.window {
            Some(_) if !cfg.causal => &s.row_reach,
            _ if spans_apply => &s.row_last,
            _ => &s.row_pos,
        };
        let input = AttentionInput {
            cfg,
            kind,
            seqs,
            layer: kv_layer,
            seq_start: &s.seq_start,
            row_seq: &s.row_seq,
            row_last,
            q: &s.q[..b * cfg.n_heads * kind.head_dim],
            k_new,
            v_new,
        };
        let bufs = AttentionBuffers {
            scores: &s.scores,
            gathered: &mut s.attn_kv,
        };
        attend(&self.pool, input, bufs, &mut s.attn)?;
        // A layer whose KV later layers reuse writes its ring only after the
        // whole batch (`store_shared_kv`): they still need the positions it
        // would evict.
        if cfg.causal && kind.kv_source.is_none() && !cfg.is_kv_source(li) && !stored {
            store_batch_kv(kind, li, seqs, &s.seq_start, &s.k, &s.v);
        }
        let ad = cfg.n_heads * kind.value_dim;
        let (attn, o) = (&s.attn[..b * ad], &mut s.o[..b * h]);
        self.linear(&lw.o, attn, b, o, &mut s.products)?;
        self.add_block_output(&lw.post_attn_norm, s);
        Ok(())
    }

    /// Layer `li`'s projections of `s.h`: the queries into `s.q` and, on a
    /// layer with its own keys and values, those into `s.k` and `s.v` (the
    /// value projection only where the layer has one), as one product.
    fn qkv_products(&self, li: usize, s: &mut Scratch) -> Result<(), ModelError> {
        let (cfg, lw, kind) = (
            &self.config,
            &self.weights.layers[li],
            &self.config.layers[li],
        );
        let (b, h, hd) = (s.batch, cfg.hidden, kind.head_dim);
        let qd = cfg.n_heads * hd;
        let (kd, vd) = (kind.n_kv_heads * hd, kind.n_kv_heads * kind.value_dim);
        let input = &s.h[..b * h];
        if kind.kv_source.is_some() {
            return self.linear(&lw.q, input, b, &mut s.q[..b * qd], &mut s.products);
        }
        let k_w =
            lw.k.as_ref()
                .ok_or_else(|| ModelError::MissingTensor(format!("blk.{li}.attn_k.weight")))?;
        let (q, k, v) = (&mut s.q[..b * qd], &mut s.k[..b * kd], &mut s.v[..b * vd]);
        match &lw.v {
            Some(v_w) => {
                self.linear_many([&lw.q, k_w, v_w], input, b, &mut [q, k, v], &mut s.products)
            }
            None => self.linear_many([&lw.q, k_w], input, b, &mut [q, k], &mut s.products),
        }
    }

    /// The projected queries of layer `li`, QK-normed where the layer has
    /// the norm, rotated, and scaled.
    fn finish_queries(&self, li: usize, s: &mut Scratch) {
        let (cfg, lw) = (&self.config, &self.weights.layers[li]);
        let hd = cfg.layers[li].head_dim;
        let (b, qd) = (s.batch, cfg.n_heads * hd);
        let heads = Heads {
            per_row: cfg.n_heads,
            dim: hd,
            norm: lw.q_norm.as_deref(),
            scale: cfg.attn_scale,
        };
        self.rope_angles(li, s);
        self.rotate_heads(li, &mut s.q[..b * qd], heads, &s.rope_angles);
    }

    /// The projected keys and values of layer `li`: values taken from the
    /// keys where the layer has no value projection, keys normed and
    /// rotated, values normed where the model does, and both kept aside
    /// when later layers share them. Returns whether they are in the
    /// sequences' caches already: a batch long enough for the pool stores
    /// them as it finishes them, where that is safe (see
    /// [`slots_before_attention`]), so no thread copies them alone after
    /// attention.
    fn finish_keys_values(&self, li: usize, seqs: &mut [SeqInput<'_>], s: &mut Scratch) -> bool {
        let (cfg, lw, kind) = (
            &self.config,
            &self.weights.layers[li],
            &self.config.layers[li],
        );
        let (b, hd) = (s.batch, kind.head_dim);
        let (kd, vd) = (kind.n_kv_heads * hd, kind.n_kv_heads * kind.value_dim);
        let heads = Heads {
            per_row: kind.n_kv_heads,
            dim: hd,
            norm: lw.k_norm.as_deref(),
            scale: 1.0,
        };
        self.rope_angles(li, s);
        let shared = cfg.is_kv_source(li);
        let stored = if b * kind.n_kv_heads >= ops::PAR_MIN_ROWS {
            self.finish_kv_rows(li, seqs, s, heads, !shared && cfg.causal)
        } else {
            if lw.v.is_none() {
                // k = v: values are the keys' projection before the key norm and RoPE.
                s.v[..b * vd].copy_from_slice(&s.k[..b * kd]);
            }
            self.rotate_heads(li, &mut s.k[..b * kd], heads, &s.rope_angles);
            if cfg.v_norm {
                par_rows(&self.pool, &mut s.v[..b * vd], kind.value_dim, |_, head| {
                    ops::rms_norm_plain(head, cfg.norm_eps)
                });
            }
            self.kv_type.round(&mut s.k[..b * kd]);
            self.kv_type.round(&mut s.v[..b * vd]);
            false
        };
        if shared {
            s.shared_k[li].clear();
            s.shared_k[li].extend_from_slice(&s.k[..b * kd]);
            s.shared_v[li].clear();
            s.shared_v[li].extend_from_slice(&s.v[..b * vd]);
        }
        stored
    }

    /// [`Self::finish_keys_values`] of a long batch as one parallel operation
    /// over its rows: each row's values (copied from its keys where the
    /// layer has no value projection, normed where the model norms them) and
    /// keys (normed, rotated), both rounded to what the cache keeps (f16,
    /// Q8_0), then, where `store` asks and it is safe, both into the row's
    /// cache slots while they are in the thread's cache.
    /// Returns whether they were stored.
    fn finish_kv_rows(
        &self,
        li: usize,
        seqs: &mut [SeqInput<'_>],
        s: &mut Scratch,
        heads: Heads<'_>,
        store: bool,
    ) -> bool {
        let (cfg, kind) = (&self.config, &self.config.layers[li]);
        let (b, kd, vd) = (
            s.batch,
            kind.n_kv_heads * kind.head_dim,
            kind.n_kv_heads * kind.value_dim,
        );
        let copy_values = self.weights.layers[li].v.is_none();
        let kv_type = self.kv_type;
        let (rope, eps) = (&self.ropes[li], cfg.norm_eps);
        let pairs = rope.pairs();
        let slots = if store {
            slots_before_attention(kind, li, seqs, &s.seq_start)
        } else {
            None
        };
        let stored = slots.is_some();
        let mut slots = slots.map(Vec::into_iter);
        let angles = &s.rope_angles;
        let mut rows: Vec<KvRow<'_>> = s.k[..b * kd]
            .chunks_exact_mut(kd)
            .zip(s.v[..b * vd].chunks_exact_mut(vd))
            .map(|(k, v)| KvRow {
                k,
                v,
                slot: slots.as_mut().and_then(Iterator::next).flatten(),
            })
            .collect();
        let per = b.div_ceil(self.pool.threads());
        self.pool.for_each_chunk_mut(&mut rows, per, |chunk, rows| {
            for (j, row) in rows.iter_mut().enumerate() {
                if copy_values {
                    // k = v: values are the keys' projection before the key norm and RoPE.
                    row.v.copy_from_slice(row.k);
                }
                let (cos, sin) =
                    angles[(chunk * per + j) * 2 * pairs..][..2 * pairs].split_at(pairs);
                for head in row.k.chunks_exact_mut(heads.dim) {
                    finish_head(rope, eps, heads, head, cos, sin);
                }
                if cfg.v_norm {
                    for head in row.v.chunks_exact_mut(kind.value_dim) {
                        ops::rms_norm_plain(head, eps);
                    }
                }
                match &mut row.slot {
                    Some((k, v)) => {
                        k.store_rounded(row.k);
                        v.store_rounded(row.v);
                    }
                    None => {
                        kv_type.round(row.k);
                        kv_type.round(row.v);
                    }
                }
            }
        });
        stored
    }

    /// Fills `s.rope_angles` with layer `li`'s RoPE angles at every row's
    /// position, unless they are there already: the queries and keys of a
    /// layer, and every layer with the same RoPE, share one table a batch.
    fn rope_angles(&self, li: usize, s: &mut Scratch) {
        let rope = &self.ropes[li];
        if s.rope_layer.is_some_and(|l| self.ropes[l] == *rope) {
            return;
        }
        // The table before holds it: swap back (a decode step of Gemma 3
        // switched between its local and global tables 9 times, each 128
        // sines and cosines on one thread).
        std::mem::swap(&mut s.rope_angles, &mut s.rope_spare);
        std::mem::swap(&mut s.rope_layer, &mut s.rope_spare_layer);
        if s.rope_layer.is_some_and(|l| self.ropes[l] == *rope) {
            return;
        }
        let pairs = rope.pairs();
        s.rope_angles.resize(s.batch * 2 * pairs, 0.0);
        for (row, &pos) in s.rope_angles.chunks_exact_mut(2 * pairs).zip(&s.row_pos) {
            let (cos, sin) = row.split_at_mut(pairs);
            rope.angles(pos, cos, sin);
        }
        s.rope_layer = Some(li);
    }

    /// Per head of `data` (rows of `heads.per_row` heads): the QK-norm where
    /// the layer has one, RoPE through the row's `angles` (see
    /// [`Self::rope_angles`]), then the scale.
    fn rotate_heads(&self, li: usize, data: &mut [f32], heads: Heads<'_>, angles: &[f32]) {
        let (rope, eps) = (&self.ropes[li], self.config.norm_eps);
        let pairs = rope.pairs();
        par_rows(&self.pool, data, heads.dim, |i, head| {
            let row = &angles[(i / heads.per_row) * 2 * pairs..][..2 * pairs];
            let (cos, sin) = row.split_at(pairs);
            finish_head(rope, eps, heads, head, cos, sin);
        });
    }

    /// `s.h = rms_norm(s.x) * w`: the input of a block, whose first
    /// product is `next`. Where that is a panel product (a prefill batch),
    /// the tasks that norm a row also quantize it for `next` (see
    /// [`quant::prepare_rows`]), and the product takes those activations.
    #[track_caller]
    pub(crate) fn block_input_for(
        &self,
        w: &[f32],
        s: &mut Scratch,
        next: &Linear,
    ) -> Result<(), ModelError> {
        let (b, h) = (s.batch, self.config.hidden);
        let (x, out) = (&s.x[..b * h], &mut s.h[..b * h]);
        let eps = self.config.norm_eps;
        if self.precision != Precision::Quantized || next.cols != h {
            pre_norm(&self.pool, x, out, w, eps);
            return Ok(());
        }
        let norm = |i: usize, row: &mut [f32]| {
            row.copy_from_slice(&x[i * h..(i + 1) * h]);
            ops::rms_norm(row, w, eps);
        };
        let m = next.matrix(&self.file)?;
        quant::prepare_rows(&self.pool, &m, out, b, &norm, &mut s.products.ready)?;
        Ok(())
    }

    /// `s.x += rms_norm(s.o) * w`: a block's output, post-normed, into the
    /// residual stream.
    #[track_caller]
    pub(crate) fn add_block_output(&self, w: &[f32], s: &mut Scratch) {
        let n = s.batch * self.config.hidden;
        post_norm_add(
            &self.pool,
            &mut s.o[..n],
            &mut s.x[..n],
            w,
            self.config.norm_eps,
        );
    }

    /// Layers whose keys and values later layers reuse write their caches
    /// once the whole batch has run.
    fn store_shared_kv(&self, seqs: &mut [SeqInput<'_>], s: &Scratch) {
        for (li, kind) in self.config.layers.iter().enumerate() {
            if self.config.is_kv_source(li) {
                store_batch_kv(
                    kind,
                    li,
                    seqs,
                    &s.seq_start,
                    &s.shared_k[li],
                    &s.shared_v[li],
                );
            }
        }
    }
}
