//! Scoring helpers: log-sum-exp, top-k, and perplexity the way
//! llama-perplexity computes it.

use crate::{EngineError, Session};

/// `log(sum(exp(x)))`, computed stably in f64.
pub fn logsumexp(x: &[f32]) -> f64 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
    max + sum.ln()
}

/// The `k` largest `(id, value)` pairs, largest first, ties to the lower id.
pub fn top_k(x: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut v: Vec<(u32, f32)> = x.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
    let cmp = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let k = k.min(v.len());
    if k == 0 {
        return Vec::new();
    }
    if k < v.len() {
        v.select_nth_unstable_by(k - 1, cmp);
        v.truncate(k);
    }
    v.sort_unstable_by(cmp);
    v
}

/// A sampled token's log-probability and the most likely tokens at its
/// place, under the model's own distribution: the log-softmax of the raw
/// logits, before the sampler's penalties, temperature and filters (what
/// the model thinks, whatever the sampler then allowed).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The sampled id.
    pub id: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely ids and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// [`TokenLogprob`] of `id` from the raw logits `raw`, with `top`
/// alternatives.
pub fn token_logprob(raw: &[f32], id: u32, top: usize) -> TokenLogprob {
    let lse = logsumexp(raw);
    let lp = |x: f32| (x as f64 - lse) as f32;
    TokenLogprob {
        id,
        logprob: raw.get(id as usize).map_or(f32::NEG_INFINITY, |&x| lp(x)),
        top: top_k(raw, top)
            .into_iter()
            .map(|(i, x)| (i, lp(x)))
            .collect(),
    }
}

/// The result of a perplexity run.
#[derive(Debug, Clone, PartialEq)]
pub struct PerplexityReport {
    /// Final perplexity.
    pub ppl: f64,
    /// Its standard error, as llama-perplexity reports it.
    pub stderr: f64,
    /// Running perplexity after each chunk.
    pub running: Vec<f64>,
    /// Tokens scored.
    pub scored: usize,
    /// Chunks evaluated.
    pub chunks: usize,
}

impl Session {
    /// Perplexity over `ids` (the whole text tokenized once, BOS first) in
    /// non-overlapping chunks of `n_ctx` tokens: each chunk's first token is
    /// replaced by `bos`, and only the second half of each chunk is scored,
    /// exactly as llama-perplexity does. `on_chunk` sees the running value.
    pub fn perplexity(
        &mut self,
        ids: &[u32],
        n_ctx: usize,
        bos: Option<u32>,
        mut on_chunk: impl FnMut(usize, f64),
    ) -> Result<PerplexityReport, EngineError> {
        if n_ctx < 4 || n_ctx > self.n_ctx() {
            return Err(EngineError::InvalidRequest(format!(
                "perplexity context {n_ctx} must be between 4 and the session context {}",
                self.n_ctx()
            )));
        }
        let n_chunks = ids.len() / n_ctx;
        if n_chunks == 0 {
            return Err(EngineError::InvalidRequest(format!(
                "the text has {} tokens, fewer than one chunk of {n_ctx}",
                ids.len()
            )));
        }
        let first = n_ctx / 2;
        let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
        let mut running = Vec::with_capacity(n_chunks);
        let mut chunk = Vec::with_capacity(n_ctx);
        for c in 0..n_chunks {
            chunk.clear();
            chunk.extend_from_slice(&ids[c * n_ctx..(c + 1) * n_ctx]);
            if let Some(b) = bos {
                chunk[0] = b;
            }
            let targets = &ids[c * n_ctx..(c + 1) * n_ctx];
            self.score(&chunk, |pos, logits| {
                if pos >= first && pos + 1 < n_ctx {
                    let target = targets[pos + 1] as usize;
                    let lp = logits.get(target).map_or(f64::NEG_INFINITY, |&l| l as f64)
                        - logsumexp(logits);
                    nll -= lp;
                    nll2 += lp * lp;
                    count += 1;
                }
            })?;
            let ppl = (nll / count as f64).exp();
            running.push(ppl);
            on_chunk(c, ppl);
        }
        let mean = nll / count as f64;
        let ppl = mean.exp();
        let var = nll2 / count as f64 - mean * mean;
        let stderr = if var > 0.0 && count > 1 {
            (var / (count - 1) as f64).sqrt() * ppl
        } else {
            0.0
        };
        Ok(PerplexityReport {
            ppl,
            stderr,
            running,
            scored: count,
            chunks: n_chunks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logsumexp_is_stable() {
        let v = logsumexp(&[1000.0, 1000.0]);
        assert!((v - (1000.0 + 2f64.ln())).abs() < 1e-9);
        assert_eq!(logsumexp(&[]), f64::NEG_INFINITY);
    }

    #[test]
    fn top_k_orders_and_breaks_ties_by_id() {
        let t = top_k(&[0.5, 2.0, 2.0, -1.0], 3);
        assert_eq!(t, vec![(1, 2.0), (2, 2.0), (0, 0.5)]);
        assert_eq!(top_k(&[1.0], 5).len(), 1);
        assert!(top_k(&[1.0], 0).is_empty());
    }
}
