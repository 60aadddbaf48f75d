//! The output head: final-normed hidden rows times the (tied) embedding
//! matrix, then the final soft-cap where the model has one. Logits are
//! computed only for the rows asked for.

use crate::{Model, ModelError, Scratch};

/// Which rows of the last batch [`Model::head_logits`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRows {
    /// The last row of each sequence (the tokens to sample after).
    LastOfEachSequence,
    /// None: only the extra rows (no batch has run on this scratch).
    None,
}
use std::ops::Range;

impl Model {
    /// Logits of the rows `batch` picks from the last batch (`vocab` values
    /// per sequence, in batch order), then those of `extra` final-normed
    /// hidden rows (another scratch's [`Scratch::hidden`], such as a prompt
    /// just prefilled on its own), all from one product with the output head,
    /// which is then read once for all of them.
    pub fn head_logits<'s>(
        &self,
        scratch: &'s mut Scratch,
        batch: BatchRows,
        extra: &[&[f32]],
    ) -> Result<&'s mut [f32], ModelError> {
        self.gathered_logits(scratch, batch == BatchRows::LastOfEachSequence, extra)
    }

    /// Logits for rows `rows` of the last batch, `vocab` values per row, in
    /// the scratch's logits buffer.
    pub fn logits<'s>(
        &self,
        scratch: &'s mut Scratch,
        rows: Range<usize>,
    ) -> Result<&'s mut [f32], ModelError> {
        let rows = rows.start.min(scratch.layout.batch)..rows.end.min(scratch.layout.batch);
        let h = self.config.hidden;
        let Scratch {
            out,
            logits,
            products,
            ..
        } = scratch;
        self.head(
            &out[rows.start * h..rows.end * h],
            rows.len(),
            logits,
            products,
        )?;
        Ok(&mut scratch.logits)
    }

    /// The last row of each sequence (when `with_batch`), then `extra`, through
    /// the head.
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
        let s = &mut *scratch;
        let n = if with_batch { s.sequences() } else { 0 };
        let m = n + extra.len();
        // One row per sequence already in place: no copy.
        if extra.is_empty() && (0..n).all(|j| s.layout.seq_start[j + 1] == j + 1) {
            self.head(&s.out[..m * h], m, &mut s.logits, &mut s.products)?;
            return Ok(&mut scratch.logits);
        }
        // Gather into `h`, free once the batch has run (grown when the extra
        // rows need more than a batch).
        if s.h.len() < m * h {
            s.h.resize(m * h, 0.0);
        }
        for j in 0..n {
            let r = s.layout.seq_start[j + 1] - 1;
            s.h[j * h..(j + 1) * h].copy_from_slice(&s.out[r * h..(r + 1) * h]);
        }
        for (j, row) in extra.iter().enumerate() {
            s.h[(n + j) * h..(n + j + 1) * h].copy_from_slice(row);
        }
        self.head(&s.h[..m * h], m, &mut s.logits, &mut s.products)?;
        Ok(&mut scratch.logits)
    }

    /// `logits = soft-cap(output · rows)` for `m` hidden rows; where the
    /// head is limited, over its ids alone, the others -inf.
    fn head(
        &self,
        rows: &[f32],
        m: usize,
        logits: &mut Vec<f32>,
        products: &mut nn::ProductBuffers,
    ) -> Result<(), ModelError> {
        let vocab = self.config.vocab;
        logits.resize(m * vocab, 0.0);
        let Some(subset) = &self.head_subset else {
            self.weights.output.apply(
                self.products(None),
                rows,
                m,
                logits,
                products,
                nn::Input::Plain,
            )?;
            if let Some(cap) = self.config.final_softcap {
                nn::softcap(logits, cap);
            }
            return Ok(());
        };
        let n = subset.ids.len();
        let w = quant::Matrix::new(subset.ty, n, self.config.hidden, &subset.rows)?;
        nn::linear::product(
            self.products(None),
            &w,
            rows,
            m,
            &mut logits[..m * n],
            products,
            nn::Input::Plain,
        )?;
        if let Some(cap) = self.config.final_softcap {
            nn::softcap(&mut logits[..m * n], cap);
        }
        subset.spread(logits, m, vocab);
        Ok(())
    }
}

/// Some rows of the output head, copied out, and their token ids.
pub(crate) struct HeadSubset {
    ty: quant::GgmlType,
    rows: Vec<u8>,
    /// Increasing, each below the vocabulary's size.
    ids: Vec<u32>,
}

impl HeadSubset {
    /// Rows `ids` of `output` (sorted, repeats and ids past it dropped).
    pub(crate) fn new(output: &quant::Matrix, ids: &[u32]) -> Self {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|&id| (id as usize) < output.rows());
        let rb = output.row_bytes();
        let (mut rows, mut row) = (Vec::with_capacity(ids.len() * rb), Vec::new());
        for &id in &ids {
            // One row in the standard layout, whatever the head's.
            output.rows_into(id as usize, 1, &mut row);
            rows.extend_from_slice(&row);
        }
        Self {
            ty: output.ty(),
            rows,
            ids,
        }
    }

    /// `m` rows of this subset's logits, packed at the front of `logits`,
    /// spread to their ids in rows of `vocab`, -inf between. Rows and values
    /// go from the back: each lands at or after where it was, so none is
    /// overwritten before it moves, and a row's own span holds no packed
    /// value of an earlier row.
    fn spread(&self, logits: &mut [f32], m: usize, vocab: usize) {
        let n = self.ids.len();
        for j in (0..m).rev() {
            for k in (0..n).rev() {
                logits[j * vocab + self.ids[k] as usize] = logits[j * n + k];
            }
            // The gaps between kept ids, and after the last one.
            let row = &mut logits[j * vocab..(j + 1) * vocab];
            let mut from = 0;
            for &id in self.ids.iter().chain([&(vocab as u32)]) {
                row[from..id as usize].fill(f32::NEG_INFINITY);
                from = id as usize + 1;
            }
        }
    }
}
