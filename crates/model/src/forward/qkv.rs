//! The queries, keys and values of a layer: one product for all three,
//! then each head's QK-norm, RoPE and scale, and the keys and values
//! rounded and stored in the cache where the layer keeps its own.

use super::*;

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
    rope: &nn::Rope,
    eps: f32,
    heads: Heads<'_>,
    head: &mut [f32],
    cos: &[f32],
    sin: &[f32],
) {
    if let Some(w) = heads.norm {
        nn::rms_norm(head, w, eps);
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

impl Model {
    /// Layer `li`'s projections of `s.h`: the queries into `s.attention.q` and, on a
    /// layer with its own keys and values, those into `s.attention.k` and `s.attention.v` (the
    /// value projection only where the layer has one), as one product.
    pub(super) fn qkv_products(
        &self,
        li: usize,
        lw: &Attention,
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let (cfg, kind) = (&self.config, &self.config.layers[li]);
        let (b, h, hd) = (s.layout.batch, cfg.hidden, kind.head_dim);
        let qd = cfg.n_heads * hd;
        let (kd, vd) = (kind.n_kv_heads * hd, kind.n_kv_heads * kind.value_dim);
        let input = &s.h[..b * h];
        if kind.kv_source.is_some() {
            let q = &mut s.attention.q[..b * qd];
            return Ok(nn::Linear::apply_many(
                self.products(Some(&s.layout.adapters)),
                [&lw.q],
                input,
                b,
                &mut [q],
                &mut s.products,
            )?);
        }
        let k_w =
            lw.k.as_ref()
                .ok_or_else(|| ModelError::MissingTensor(format!("blk.{li}.attn_k.weight")))?;
        let (q, k, v) = (
            &mut s.attention.q[..b * qd],
            &mut s.attention.k[..b * kd],
            &mut s.attention.v[..b * vd],
        );
        let ctx = self.products(Some(&s.layout.adapters));
        match &lw.v {
            Some(v_w) => nn::Linear::apply_many(
                ctx,
                [&lw.q, k_w, v_w],
                input,
                b,
                &mut [q, k, v],
                &mut s.products,
            )?,
            None => {
                nn::Linear::apply_many(ctx, [&lw.q, k_w], input, b, &mut [q, k], &mut s.products)?
            }
        }
        Ok(())
    }

    /// The projected queries of layer `li`, QK-normed where the layer has
    /// the norm, rotated, and scaled.
    pub(super) fn finish_queries(&self, li: usize, lw: &Attention, s: &mut Scratch) {
        let cfg = &self.config;
        let hd = cfg.layers[li].head_dim;
        let (b, qd) = (s.layout.batch, cfg.n_heads * hd);
        let heads = Heads {
            per_row: cfg.n_heads,
            dim: hd,
            norm: lw.q_norm.as_deref(),
            scale: cfg.attn_scale,
        };
        self.rope_angles(li, s);
        self.rotate_heads(li, &mut s.attention.q[..b * qd], heads, &s.rope.angles);
    }

    /// The projected keys and values of layer `li`: values taken from the
    /// keys where the layer has no value projection, keys normed and
    /// rotated, values normed where the model does, and both kept aside
    /// when later layers share them. Returns whether they are in the
    /// sequences' caches already: a batch long enough for the pool stores
    /// them as it finishes them, where that is safe (see
    /// [`slots_before_attention`]), so no thread copies them alone after
    /// attention.
    pub(super) fn finish_keys_values(
        &self,
        li: usize,
        lw: &Attention,
        seqs: &mut [SeqInput<'_>],
        s: &mut Scratch,
    ) -> bool {
        let (cfg, kind) = (&self.config, &self.config.layers[li]);
        let (b, hd) = (s.layout.batch, kind.head_dim);
        let (kd, vd) = (kind.n_kv_heads * hd, kind.n_kv_heads * kind.value_dim);
        let heads = Heads {
            per_row: kind.n_kv_heads,
            dim: hd,
            norm: lw.k_norm.as_deref(),
            scale: 1.0,
        };
        self.rope_angles(li, s);
        let shared = cfg.is_kv_source(li);
        let stored = if b * kind.n_kv_heads >= nn::PAR_MIN_ROWS {
            let copy_values = lw.v.is_none();
            self.finish_kv_rows(li, seqs, s, heads, copy_values, !shared && cfg.causal)
        } else {
            if lw.v.is_none() {
                // k = v: values are the keys' projection before the key norm and RoPE.
                s.attention.v[..b * vd].copy_from_slice(&s.attention.k[..b * kd]);
            }
            self.rotate_heads(li, &mut s.attention.k[..b * kd], heads, &s.rope.angles);
            if cfg.v_norm {
                par_rows(
                    &self.pool,
                    &mut s.attention.v[..b * vd],
                    kind.value_dim,
                    |_, head| nn::rms_norm_plain(head, cfg.norm_eps),
                );
            }
            self.kv_type.round(&mut s.attention.k[..b * kd]);
            self.kv_type.round(&mut s.attention.v[..b * vd]);
            false
        };
        if shared {
            s.attention.shared_k[li].clear();
            s.attention.shared_k[li].extend_from_slice(&s.attention.k[..b * kd]);
            s.attention.shared_v[li].clear();
            s.attention.shared_v[li].extend_from_slice(&s.attention.v[..b * vd]);
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
        copy_values: bool,
        store: bool,
    ) -> bool {
        let (cfg, kind) = (&self.config, &self.config.layers[li]);
        let (b, kd, vd) = (
            s.layout.batch,
            kind.n_kv_heads * kind.head_dim,
            kind.n_kv_heads * kind.value_dim,
        );
        let kv_type = self.kv_type;
        let (rope, eps) = (&self.ropes[li], cfg.norm_eps);
        let pairs = rope.pairs();
        let slots = if store {
            slots_before_attention(kind, li, seqs, &s.layout.seq_start)
        } else {
            None
        };
        let stored = slots.is_some();
        let mut slots = slots.map(Vec::into_iter);
        let angles = &s.rope.angles;
        let mut rows: Vec<KvRow<'_>> = s.attention.k[..b * kd]
            .chunks_exact_mut(kd)
            .zip(s.attention.v[..b * vd].chunks_exact_mut(vd))
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
                        nn::rms_norm_plain(head, eps);
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

    /// Fills `s.rope.angles` with layer `li`'s RoPE angles at every row's
    /// position, unless they are there already: the queries and keys of a
    /// layer, and every layer with the same RoPE, share one table a batch.
    pub(super) fn rope_angles(&self, li: usize, s: &mut Scratch) {
        let rope = &self.ropes[li];
        if s.rope.layer.is_some_and(|l| self.ropes[l] == *rope) {
            return;
        }
        // The table before holds it: swap back (a decode step of Gemma 3
        // switched between its local and global tables 9 times, each 128
        // sines and cosines on one thread).
        std::mem::swap(&mut s.rope.angles, &mut s.rope.spare);
        std::mem::swap(&mut s.rope.layer, &mut s.rope.spare_layer);
        if s.rope.layer.is_some_and(|l| self.ropes[l] == *rope) {
            return;
        }
        let pairs = rope.pairs();
        s.rope.angles.resize(s.layout.batch * 2 * pairs, 0.0);
        for (row, &pos) in s
            .rope
            .angles
            .chunks_exact_mut(2 * pairs)
            .zip(&s.layout.row_pos)
        {
            let (cos, sin) = row.split_at_mut(pairs);
            rope.angles(pos, cos, sin);
        }
        s.rope.layer = Some(li);
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
}
