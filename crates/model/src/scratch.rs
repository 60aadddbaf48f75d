//! Reusable buffers for the forward pass, sized once for the largest batch,
//! so the decode loop allocates nothing.

use crate::Config;
use nn::attention::causal::BLOCKED_MIN_ROWS;
use std::ops::Range;
use std::sync::Mutex;

/// Reusable buffers for one sequence (or one multi-sequence batch): the
/// batch's row layout, the residual stream and a block's input and output,
/// and the buffers of each part of a layer.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Which sequence and position each row of the batch is.
    pub(crate) layout: RowLayout,
    /// The residual stream, `hidden` per row.
    pub(crate) x: Vec<f32>,
    /// A normed copy of the residual stream, the input of a block.
    pub(crate) h: Vec<f32>,
    /// A block's output before its post-norm and residual add.
    pub(crate) o: Vec<f32>,
    /// Final-normed hidden states of the last batch.
    pub(crate) out: Vec<f32>,
    /// Logits of the rows last asked for.
    pub(crate) logits: Vec<f32>,
    /// The attention block's buffers.
    pub(crate) attention: AttentionBuffers,
    /// The batch's RoPE angles.
    pub(crate) rope: RopeTables,
    /// The gated MLP's buffers.
    pub(crate) ffn: FfnBuffers,
    /// Gemma 4's per-layer inputs.
    pub(crate) per_layer: PerLayerBuffers,
    /// Gemma 3n's AltUp streams.
    pub(crate) altup: AltUpBuffers,
    /// Gemma 3n: LAuReL's low-rank activations, `laurel_rank` per token.
    pub(crate) laurel: Vec<f32>,
    /// Buffers of the mixture-of-experts block.
    pub(crate) moe: crate::moe::MoeScratch,
    /// Buffers of the matrix products.
    pub(crate) products: nn::ProductBuffers,
}

/// The rows of a batch: each a token of some sequence at that sequence's
/// next position.
#[derive(Debug, Default)]
pub(crate) struct RowLayout {
    /// The largest batch the buffers take.
    pub(crate) max_batch: usize,
    /// Rows in the last batch.
    pub(crate) batch: usize,
    /// Rows `seq_start[j]..seq_start[j + 1]` of the last batch belong to its
    /// sequence `j`; one entry more than there are sequences.
    pub(crate) seq_start: Vec<usize>,
    /// The sequence of each row of the last batch.
    pub(crate) row_seq: Vec<usize>,
    /// The position of each row of the last batch in its sequence.
    pub(crate) row_pos: Vec<usize>,
    /// The last position each row attends to: its own, or the end of the
    /// bidirectional span (an image) it lies in.
    pub(crate) row_last: Vec<usize>,
    /// [`Self::reach_within`]'s reach for the layer running.
    pub(crate) row_reach: Vec<usize>,
    /// The batch's token ids in row order.
    pub(crate) tokens: Vec<u32>,
    /// The adapters each row runs with: its sequence's cache's.
    pub(crate) adapters: nn::RowAdapters,
}

/// The attention block's buffers.
#[derive(Debug, Default)]
pub(crate) struct AttentionBuffers {
    /// Queries, `n_heads * head_dim` per row.
    pub(crate) q: Vec<f32>,
    /// Keys, `n_kv_heads * head_dim` per row.
    pub(crate) k: Vec<f32>,
    /// Values, `n_kv_heads * value_dim` per row.
    pub(crate) v: Vec<f32>,
    /// Attention output, `n_heads * value_dim` per row.
    pub(crate) attn: Vec<f32>,
    /// Attention scores, one row of `n_ctx` per worker thread. Each worker
    /// locks its own row once per layer, so the locks are never contended.
    pub(crate) scores: Vec<Mutex<Vec<f32>>>,
    /// Prefill attention: the keys (transposed) and values of the positions
    /// a batch attends to, gathered contiguously per KV head.
    pub(crate) attn_kv: Vec<f32>,
    /// Positions the attention buffers hold scores for.
    pub(crate) n_ctx: usize,
    /// Keys and values of the batch from layers whose KV later layers reuse,
    /// indexed by layer (empty for the others).
    pub(crate) shared_k: Vec<Vec<f32>>,
    /// See [`Self::shared_k`].
    pub(crate) shared_v: Vec<Vec<f32>>,
}

/// RoPE angles of every row of the batch, kept for the layers that share
/// them.
#[derive(Debug, Default)]
pub(crate) struct RopeTables {
    /// `pairs` cosines, then as many sines, per row, for the layer
    /// [`Self::layer`] names; layers with the same RoPE reuse them.
    pub(crate) angles: Vec<f32>,
    /// The layer whose RoPE `angles` holds, for this batch.
    pub(crate) layer: Option<usize>,
    /// The table before `angles`, kept for the next layer with its RoPE
    /// (Gemma's local and global layers alternate between two).
    pub(crate) spare: Vec<f32>,
    /// The layer whose RoPE `spare` holds, for this batch.
    pub(crate) spare_layer: Option<usize>,
}

/// The gated MLP's buffers, `ffn_dim` per row each.
#[derive(Debug, Default)]
pub(crate) struct FfnBuffers {
    /// The gate projection, then the activation.
    pub(crate) gate: Vec<f32>,
    /// The up projection.
    pub(crate) up: Vec<f32>,
}

/// Gemma 4's per-layer inputs.
#[derive(Debug, Default)]
pub(crate) struct PerLayerBuffers {
    /// The batch's per-layer inputs, `n_layers * per_layer_dim` per token.
    pub(crate) inputs: Vec<f32>,
    /// The projection half of the per-layer inputs.
    pub(crate) proj: Vec<f32>,
    /// One layer's gated per-layer input.
    pub(crate) gate: Vec<f32>,
}

/// Gemma 3n's AltUp streams.
#[derive(Debug, Default)]
pub(crate) struct AltUpBuffers {
    /// The streams, `altup_streams` rows of `hidden` per token.
    pub(crate) streams: Vec<f32>,
    /// The streams' predictions for the running layer, laid out as `streams`.
    pub(crate) pred: Vec<f32>,
}

/// f32 values per token the row buffers hold.
fn row_floats(cfg: &Config) -> usize {
    4 * cfg.hidden
        + cfg.n_heads * cfg.head_dim
        + cfg.n_kv_heads * (cfg.head_dim + cfg.value_dim)
        + cfg.n_heads * cfg.value_dim
        + 2 * cfg.ffn_dim
        + (2 * cfg.n_layers + 1) * cfg.per_layer_dim
        + 2 * cfg.altup_streams * cfg.hidden
        + cfg.laurel_rank
        // RoPE angles: a cosine and a sine per rotated pair.
        + cfg.head_dim
}

impl Scratch {
    /// Buffers for batches of up to `max_batch` tokens in a context of
    /// `n_ctx`, for a pool of `threads` workers.
    pub fn new(cfg: &Config, n_ctx: usize, max_batch: usize, threads: usize) -> Self {
        let b = max_batch.max(1);
        let rows = |width: usize| vec![0.0; b * width];
        Self {
            layout: RowLayout {
                max_batch: b,
                seq_start: Vec::with_capacity(b + 1),
                row_seq: Vec::with_capacity(b),
                row_pos: Vec::with_capacity(b),
                row_last: Vec::with_capacity(b),
                row_reach: Vec::with_capacity(b),
                tokens: Vec::with_capacity(b),
                ..RowLayout::default()
            },
            x: rows(cfg.hidden),
            h: rows(cfg.hidden),
            o: rows(cfg.hidden),
            out: rows(cfg.hidden),
            attention: AttentionBuffers {
                q: rows(cfg.n_heads * cfg.head_dim),
                k: rows(cfg.n_kv_heads * cfg.head_dim),
                v: rows(cfg.n_kv_heads * cfg.value_dim),
                attn: rows(cfg.n_heads * cfg.value_dim),
                scores: (0..threads.max(1))
                    .map(|_| Mutex::new(vec![0.0; n_ctx.max(1) * cfg.n_heads]))
                    .collect(),
                n_ctx: n_ctx.max(1),
                shared_k: vec![Vec::new(); cfg.n_layers],
                shared_v: vec![Vec::new(); cfg.n_layers],
                ..AttentionBuffers::default()
            },
            ffn: FfnBuffers {
                gate: rows(cfg.ffn_dim),
                up: rows(cfg.ffn_dim),
            },
            per_layer: PerLayerBuffers {
                inputs: rows(cfg.n_layers * cfg.per_layer_dim),
                proj: rows(cfg.n_layers * cfg.per_layer_dim),
                gate: rows(cfg.per_layer_dim),
            },
            altup: AltUpBuffers {
                streams: rows(cfg.altup_streams * cfg.hidden),
                pred: rows(cfg.altup_streams * cfg.hidden),
            },
            laurel: rows(cfg.laurel_rank),
            ..Self::default()
        }
    }

    /// Bytes the buffers take (the logits buffer for one row included).
    pub fn bytes_for(cfg: &Config, n_ctx: usize, max_batch: usize, threads: usize) -> usize {
        let b = max_batch.max(1);
        // A long batch's attention gathers the keys and values it reads.
        let gathered = if b >= BLOCKED_MIN_ROWS {
            n_ctx * cfg.n_kv_heads * (cfg.head_dim + cfg.value_dim)
        } else {
            0
        };
        (b * row_floats(cfg) + threads.max(1) * n_ctx * cfg.n_heads + cfg.vocab + gathered)
            * std::mem::size_of::<f32>()
    }

    /// The largest batch these buffers take.
    pub fn max_batch(&self) -> usize {
        self.layout.max_batch
    }

    /// Rows in the last batch run.
    pub fn batch(&self) -> usize {
        self.layout.batch
    }

    /// Sequences in the last batch run (1 after [`crate::Model::forward`]).
    pub fn sequences(&self) -> usize {
        self.layout.seq_start.len().saturating_sub(1)
    }

    /// Rows of sequence `j` in the last batch run.
    pub fn sequence_rows(&self, j: usize) -> Option<Range<usize>> {
        let start = *self.layout.seq_start.get(j)?;
        let end = *self.layout.seq_start.get(j + 1)?;
        Some(start..end)
    }

    /// Final-normed hidden state of row `i` of the last batch.
    pub fn hidden(&self, i: usize) -> Option<&[f32]> {
        let h = self.out.len() / self.layout.max_batch;
        (i < self.layout.batch).then(|| &self.out[i * h..(i + 1) * h])
    }

    /// Make the last row of `from`'s last batch this scratch's whole last
    /// batch: a prompt prefilled in buffers lent by another (a server's
    /// slots share one set for their prompts) leaves here what its first
    /// sample reads ([`Self::hidden`], [`crate::Model::logits`]). A batch
    /// of another width (another model's) leaves no batch.
    pub fn adopt_last_row(&mut self, from: &Scratch) {
        let last = from.layout.batch.checked_sub(1);
        let row = last
            .and_then(|r| from.hidden(r))
            .filter(|r| r.len() <= self.out.len());
        self.layout.clear();
        self.rope.forget();
        let (Some(r), Some(row)) = (last, row) else {
            return;
        };
        self.out[..row.len()].copy_from_slice(row);
        self.layout.adopt_row(&from.layout, r);
    }

    /// Lay the batch's rows out (see [`RowLayout::lay_out`]); the RoPE
    /// tables of the last batch no longer apply.
    pub(crate) fn lay_out_rows(&mut self, seqs: &[crate::SeqInput<'_>], causal: bool) {
        self.layout.lay_out(seqs, causal);
        self.rope.forget();
    }
}

impl RowLayout {
    /// No rows.
    fn clear(&mut self) {
        self.batch = 0;
        self.seq_start.clear();
        self.row_seq.clear();
        self.row_pos.clear();
        self.row_last.clear();
        self.tokens.clear();
        self.adapters.clear();
    }

    /// Row `r` of `from` as this layout's one row, of its one sequence.
    fn adopt_row(&mut self, from: &RowLayout, r: usize) {
        self.batch = 1;
        self.seq_start.extend([0, 1]);
        self.row_seq.push(0);
        self.row_pos.extend(from.row_pos.get(r));
        self.row_last.extend(from.row_last.get(r));
        self.tokens.extend(from.tokens.get(r));
    }

    /// Each sequence's tokens in order, each row tagged with its sequence
    /// and its position there. Without `causal`, every row attends to its
    /// whole sequence.
    fn lay_out(&mut self, seqs: &[crate::SeqInput<'_>], causal: bool) {
        self.clear();
        for (j, sq) in seqs.iter().enumerate() {
            self.seq_start.push(self.row_pos.len());
            let p0 = sq.cache.n_past();
            self.row_pos.extend(p0..p0 + sq.tokens.len());
            let first = self.row_last.len();
            match causal {
                true => self.row_last.extend(p0..p0 + sq.tokens.len()),
                false => self.row_last.extend(std::iter::repeat_n(
                    p0 + sq.tokens.len() - 1,
                    sq.tokens.len(),
                )),
            }
            for e in sq.embedded.iter().filter(|e| e.bidirectional) {
                let end = p0 + e.start + e.len - 1;
                self.row_last[first + e.start..][..e.len].fill(end);
            }
            self.row_seq.extend(std::iter::repeat_n(j, sq.tokens.len()));
            self.tokens.extend_from_slice(sq.tokens);
            self.adapters
                .push(first..first + sq.tokens.len(), sq.cache.adapters());
        }
        self.batch = self.row_pos.len();
        self.seq_start.push(self.batch);
    }

    /// Into `row_reach`: the last position each row attends to in a layer
    /// that reaches `w - 1` positions either way (an embedding model's
    /// sliding layers): its own position plus `w - 1`, within its sequence.
    pub(crate) fn reach_within(&mut self, w: usize) {
        self.row_reach.clear();
        let rows = self.row_pos.iter().zip(&self.row_last);
        self.row_reach
            .extend(rows.map(|(&pos, &last)| (pos + w - 1).min(last)));
    }
}

impl RopeTables {
    /// Holds no layer's angles (a new batch).
    fn forget(&mut self) {
        self.layer = None;
        self.spare_layer = None;
    }
}
