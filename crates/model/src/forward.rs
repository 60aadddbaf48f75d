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
use crate::weights::Attention;
use crate::{Arch, KvCache, Model, ModelError, Precision, Scratch};
use nn::Linear;
use nn::{par_rows, post_norm_add, pre_norm};

mod qkv;

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

impl<'a> Embedded<'a> {
    /// The part of the span within the token positions `batch` (counted
    /// from that batch's start), if any of it is there. Only a causal span
    /// may be cut so; a bidirectional one must lie in one batch whole.
    pub fn within(&self, batch: std::ops::Range<usize>) -> Option<Embedded<'a>> {
        let (from, to) = (
            self.start.max(batch.start),
            (self.start + self.len).min(batch.end),
        );
        if from >= to {
            return None;
        }
        let width = self.rows.len() / self.len.max(1);
        let skip = from - self.start;
        Some(Embedded {
            start: from - batch.start,
            len: to - from,
            rows: &self.rows[skip * width..(skip + to - from) * width],
            bidirectional: self.bidirectional,
        })
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
        self.forward_embedded(cache, scratch, tokens, &[])
    }

    /// [`Self::forward`] with some tokens' embeddings given (see
    /// [`Embedded`]). Batches are split between bidirectional spans, never
    /// inside one, so such a span longer than the scratch's `max_batch` is
    /// refused; a causal span's rows are fed a batch at a time.
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
        let max = scratch.layout.max_batch;
        if let Some(e) = embedded.iter().find(|e| e.bidirectional && e.len > max) {
            return Err(ModelError::BadBatch(format!(
                "{} embedded tokens do not fit a batch of {max}",
                e.len
            )));
        }
        self.pool.install(|| {
            let mut start = 0;
            while start < tokens.len() {
                let mut end = (start + max).min(tokens.len());
                // End the batch before a bidirectional span it would cut.
                if let Some(e) = embedded.iter().find(|e| {
                    e.bidirectional && e.start < end && e.start + e.len > end && e.start > start
                }) {
                    end = e.start;
                }
                let spans: Vec<Embedded<'_>> = embedded
                    .iter()
                    .filter_map(|e| e.within(start..end))
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
        if rows > scratch.layout.max_batch {
            return Err(ModelError::BadBatch(format!(
                "{rows} rows do not fit buffers made for {}",
                scratch.layout.max_batch
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
        let n_ctx = cache.n_ctx().min(scratch.attention.n_ctx);
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
        for (li, layer) in self.weights.layers.iter().enumerate() {
            layer.forward(self, li, seqs, s)?;
        }
        self.store_shared_kv(seqs, s);
        self.altup_merge(s)?;
        let n = s.layout.batch * self.config.hidden;
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
        let tokens = std::mem::take(&mut s.layout.tokens);
        let embd = self.weights.token_embd.weight.matrix(&self.file)?;
        let scale = (h as f32).sqrt();
        for (row, &t) in s.x.chunks_exact_mut(h).zip(&tokens) {
            embd.dequantize_row(t as usize, row)?;
            row.iter_mut().for_each(|v| *v *= scale);
        }
        for (sq, &first) in seqs.iter().zip(&s.layout.seq_start) {
            for e in sq.embedded {
                s.x[(first + e.start) * h..][..e.len * h].copy_from_slice(e.rows);
            }
        }
        let per_layer = match &self.weights.per_layer {
            Some(ple) => self.per_layer_inputs(ple, s, &tokens),
            None => Ok(()),
        };
        s.layout.tokens = tokens;
        per_layer
    }

    /// `s.h = rms_norm(s.x) * w`: the input of a block, whose first
    /// product is `next`. Where that is a panel product (a prefill batch),
    /// the tasks that norm a row also quantize it for `next` (see
    /// [`quant::PreparedActs::make_rows`]), and the block's first products
    /// take those activations.
    #[track_caller]
    pub(crate) fn block_input_for(
        &self,
        w: &[f32],
        s: &mut Scratch,
        next: &Linear,
    ) -> Result<(), ModelError> {
        let (b, h) = (s.layout.batch, self.config.hidden);
        let (x, out) = (&s.x[..b * h], &mut s.h[..b * h]);
        let eps = self.config.norm_eps;
        if self.precision != Precision::Quantized || next.cols() != h {
            s.products.block_input.clear();
            pre_norm(&self.pool, x, out, w, eps);
            return Ok(());
        }
        let norm = |i: usize, row: &mut [f32]| {
            row.copy_from_slice(&x[i * h..(i + 1) * h]);
            nn::rms_norm(row, w, eps);
        };
        let m = next.weight.matrix(&self.file)?;
        s.products
            .block_input
            .make_rows(&self.pool, &m, out, b, &norm)?;
        Ok(())
    }

    /// `s.x += rms_norm(s.o) * w`: a block's output, post-normed, into the
    /// residual stream (Gemma 1, without a norm: `s.x += s.o`).
    #[track_caller]
    pub(crate) fn add_block_output(&self, w: Option<&[f32]>, s: &mut Scratch) {
        let n = s.layout.batch * self.config.hidden;
        let Some(w) = w else {
            let (o, x) = (&s.o[..n], &mut s.x[..n]);
            x.iter_mut().zip(o).for_each(|(x, o)| *x += o);
            return;
        };
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
                    &s.layout.seq_start,
                    &s.attention.shared_k[li],
                    &s.attention.shared_v[li],
                );
            }
        }
    }
}

impl Attention {
    /// Layer `li`'s attention: `x += post_norm(o(attend(q, k, v)))` over
    /// `pre_norm(x)`, with the layer's keys and values stored in each cache.
    pub(crate) fn forward(
        &self,
        m: &Model,
        li: usize,
        seqs: &mut [SeqInput<'_>],
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let (cfg, kind) = (&m.config, &m.config.layers[li]);
        let (b, h) = (s.layout.batch, cfg.hidden);
        let (kd, vd) = (
            kind.n_kv_heads * kind.head_dim,
            kind.n_kv_heads * kind.value_dim,
        );
        m.block_input_for(&self.norm, s, &self.q)?;
        m.qkv_products(li, self, s)?;
        m.finish_queries(li, self, s);
        if let (Some(w), false) = (kind.window, cfg.causal) {
            s.layout.reach_within(w);
        }
        // A layer that shares another's KV reads that layer's cache and keys.
        let (kv_layer, stored) = match kind.kv_source {
            Some(src) => (src, false),
            None => (li, m.finish_keys_values(li, self, seqs, s)),
        };
        let (k_new, v_new) = if kv_layer == li {
            (&s.attention.k[..b * kd], &s.attention.v[..b * vd])
        } else {
            (
                &s.attention.shared_k[kv_layer][..b * kd],
                &s.attention.shared_v[kv_layer][..b * vd],
            )
        };
        // Gemma 4's global layers keep image tokens causal; an embedding
        // model's sliding layers reach half their window ahead.
        let spans_apply = cfg.arch != Arch::Gemma4 || kind.window.is_some();
        let row_last = match kind.window {
            Some(_) if !cfg.causal => &s.layout.row_reach,
            _ if spans_apply => &s.layout.row_last,
            _ => &s.layout.row_pos,
        };
        let input = AttentionInput {
            cfg,
            kind,
            seqs,
            layer: kv_layer,
            seq_start: &s.layout.seq_start,
            row_seq: &s.layout.row_seq,
            row_last,
            q: &s.attention.q[..b * cfg.n_heads * kind.head_dim],
            k_new,
            v_new,
        };
        let bufs = AttentionBuffers {
            scores: &s.attention.scores,
            gathered: &mut s.attention.attn_kv,
        };
        attend(&m.pool, input, bufs, &mut s.attention.attn)?;
        // A layer whose KV later layers reuse writes its ring only after the
        // whole batch (`store_shared_kv`): they still need the positions it
        // would evict.
        if cfg.causal && kind.kv_source.is_none() && !cfg.is_kv_source(li) && !stored {
            store_batch_kv(
                kind,
                li,
                seqs,
                &s.layout.seq_start,
                &s.attention.k,
                &s.attention.v,
            );
        }
        let ad = cfg.n_heads * kind.value_dim;
        let (attn, o) = (&s.attention.attn[..b * ad], &mut s.o[..b * h]);
        self.o.apply(
            m.products(Some(&s.layout.adapters)),
            attn,
            b,
            o,
            &mut s.products,
            nn::Input::Plain,
        )?;
        m.add_block_output(self.post_norm.as_deref(), s);
        Ok(())
    }
}
