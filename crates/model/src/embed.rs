//! Embedding models (EmbeddingGemma): many texts through one forward pass,
//! packed without padding, each attending only within itself; then each
//! text's last hidden states pooled into one vector, projected by the dense
//! layers and normalised to unit length.

use crate::{Config, KvCache, Model, ModelError, Pooling, Scratch, SeqInput};
use gguf::GgufFile;
use nn::Linear;

/// The dense projections after pooling (sentence-transformers' `2_Dense`
/// and `3_Dense`, llama.cpp's `dense_2` and `dense_3`), in order.
#[derive(Debug, Clone)]
pub struct EmbeddingHead {
    /// Each projection, its input the previous one's output.
    pub dense: Vec<Linear>,
}

/// The projections llama.cpp's converter writes for EmbeddingGemma.
const DENSE_TENSORS: [&str; 2] = ["dense_2.weight", "dense_3.weight"];

impl EmbeddingHead {
    /// The head of an embedding model; `None` for a generative one.
    pub(crate) fn bind(file: &GgufFile, cfg: &Config) -> Result<Option<Self>, ModelError> {
        if cfg.pooling.is_none() {
            return Ok(None);
        }
        let mut width = cfg.hidden;
        let mut dense = Vec::with_capacity(DENSE_TENSORS.len());
        for name in DENSE_TENSORS {
            let rows = file
                .tensor(name)
                .and_then(|t| t.dims.get(1).copied())
                .and_then(|r| usize::try_from(r).ok())
                .ok_or(ModelError::MissingProjection(name))?;
            let layer = crate::weights::bind(file, name, width, rows)?;
            width = rows;
            dense.push(layer);
        }
        Ok(Some(Self { dense }))
    }

    /// Width of the vectors the head gives.
    pub fn dim(&self) -> usize {
        self.dense.last().map_or(0, |d| d.rows())
    }
}

impl Model {
    /// Width of this model's embeddings; `None` for a generative model.
    pub fn embedding_dim(&self) -> Option<usize> {
        self.weights.embedding.as_ref().map(EmbeddingHead::dim)
    }

    /// One unit vector per text (token ids, the tokenizer's markers
    /// included). The texts go through the layers together as one batch of
    /// rows, so their tokens must fit the scratch's `max_batch` and each
    /// text its `n_ctx`; nothing is cached between calls. A text's vector
    /// does not depend on which texts share its batch.
    pub fn embed_texts(
        &self,
        texts: &[&[u32]],
        adapters: &nn::Adapters,
        scratch: &mut Scratch,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let (Some(head), Some(pooling)) = (&self.weights.embedding, self.config.pooling) else {
            return Err(ModelError::NotEmbedding);
        };
        let mut caches: Vec<KvCache> = texts
            .iter()
            .map(|t| {
                let mut cache = KvCache::uncached(&self.config, t.len());
                cache.use_adapters(adapters);
                cache
            })
            .collect();
        let mut seqs: Vec<SeqInput<'_>> = caches
            .iter_mut()
            .zip(texts)
            .map(|(cache, tokens)| SeqInput {
                cache,
                tokens,
                embedded: &[],
            })
            .collect();
        self.forward_rows(&mut seqs, scratch)?;
        let h = self.config.hidden;
        let mut pooled = vec![0.0f32; texts.len() * h];
        for (j, row) in pooled.chunks_exact_mut(h).enumerate() {
            let rows = scratch.sequence_rows(j).unwrap_or_default();
            match pooling {
                Pooling::Mean => mean_rows(&scratch.out[rows.start * h..rows.end * h], row),
            }
        }
        let mut x = pooled;
        for layer in &head.dense {
            let mut y = vec![0.0f32; texts.len() * layer.rows()];
            layer.apply(
                self.products(None),
                &x,
                texts.len(),
                &mut y,
                &mut scratch.products,
                nn::Input::Plain,
            )?;
            x = y;
        }
        Ok(x.chunks_exact(head.dim()).map(unit_vector).collect())
    }
}

/// The mean of `rows` (rows of `out.len()` values) into `out`, summed in
/// f64 so a long text loses nothing to the order of the sum.
fn mean_rows(rows: &[f32], out: &mut [f32]) {
    let n = rows.len() / out.len().max(1);
    let mut sum = vec![0.0f64; out.len()];
    for row in rows.chunks_exact(out.len()) {
        sum.iter_mut().zip(row).for_each(|(s, &v)| *s += v as f64);
    }
    for (o, s) in out.iter_mut().zip(sum) {
        *o = (s / n.max(1) as f64) as f32;
    }
}

/// `v / |v|` (a zero vector stays zero), the norm taken in f64.
pub fn unit_vector(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    if norm == 0.0 {
        return v.to_vec();
    }
    v.iter().map(|&x| (x as f64 / norm) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_vectors_have_length_one_and_zero_stays_zero() {
        let u = unit_vector(&[3.0, 4.0]);
        assert_eq!(u, vec![0.6, 0.8]);
        assert_eq!(unit_vector(&[0.0, 0.0]), vec![0.0, 0.0]);
    }

    #[test]
    fn mean_rows_averages_each_column() {
        let mut out = [0.0; 2];
        mean_rows(&[1.0, 10.0, 3.0, 20.0, 5.0, 30.0], &mut out);
        assert_eq!(out, [3.0, 20.0]);
    }
}
