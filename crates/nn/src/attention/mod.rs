//! Attention: one computation, its variants as data. Every attention in
//! Hearth scores a query against the keys it may see, turns the scores into
//! probabilities and sums the values with them. What differs is which keys a
//! query sees and how its scores are shaped:
//!
//! - which keys: the text model's causal window over its cache ([`causal`],
//!   row by row or as blocked products, the cache's layout left to
//!   `model::attention`), a window of frames around each query ([`local`],
//!   the audio conformers'), or every position ([`full`], the vision
//!   towers', as blocked products);
//! - how scores are shaped, [`Scoring`]: a soft-cap (Gemma 2's text, the
//!   conformers), a term added per key (the conformers' relative positions),
//!   keys in range but hidden (frames past an audio clip).
//!
//! The row-wise form, [`attend_query`], serves the text model's decode steps
//! and short batches and the conformers; the blocked forms run the same
//! [`probabilities`] over their blocks of scores.

pub mod causal;
pub mod full;
pub mod local;

use quant::vector::Rows;

/// How one query's raw scores (`q·k`, already scaled) become probabilities.
#[derive(Clone, Copy, Default)]
pub struct Scoring<'a> {
    /// `cap · tanh(s / cap)` before the softmax.
    pub softcap: Option<f32>,
    /// A term added to each score before the soft-cap, laid out as the
    /// scores are (one run per head, `stride` apart).
    pub bias: Option<&'a [f32]>,
    /// Which of the query's keys it may see (all where absent); hidden keys
    /// get probability 0 after the soft-cap.
    pub visible: Option<&'a [bool]>,
}

/// One query's `scores` (one head's) into probabilities in place, under
/// `scoring`; `bias` is this head's run of added terms. Returns false, with
/// every probability 0, when no key is visible.
pub fn probabilities(scores: &mut [f32], bias: Option<&[f32]>, scoring: &Scoring<'_>) -> bool {
    if let Some(bias) = bias {
        scores.iter_mut().zip(bias).for_each(|(s, &b)| *s += b);
    }
    if let Some(cap) = scoring.softcap {
        crate::softcap(scores, cap);
    }
    if let Some(visible) = scoring.visible {
        if !visible.iter().any(|&v| v) {
            scores.fill(0.0);
            return false;
        }
        for (s, &v) in scores.iter_mut().zip(visible) {
            if !v {
                *s = f32::NEG_INFINITY;
            }
        }
    }
    crate::softmax(scores);
    true
}

/// Where one query's keys and values lie: runs of consecutive positions,
/// each run's rows `stride` elements apart in one buffer (a cache ring
/// wraps, and a batch's own keys sit in its buffer, so one query's keys may
/// take several runs).
pub trait KeyRuns<'s> {
    /// Elements between one key and the next within a run.
    fn key_stride(&self) -> usize;
    /// Elements between one value and the next within a run.
    fn value_stride(&self) -> usize;
    /// `f(j, rows, n)` for each run of `n` keys, the first of them the
    /// query's `j`-th key.
    fn keys(&self, f: impl FnMut(usize, Rows<'s>, usize));
    /// The values, in the same runs as [`KeyRuns::keys`].
    fn values(&self, f: impl FnMut(usize, Rows<'s>, usize));
}

/// `heads` query vectors that share their keys (`q`, one after another)
/// over `n_keys` keys into `out` (each head's value-width output, one after
/// another). `scores` holds one run of `scores.len() / heads` floats per head
/// (at least `n_keys`); a [`Scoring::bias`] is laid out the same way. The
/// scores are [`quant::vector::dot_rows`]'s and the sums
/// [`quant::vector::axpy_rows`]' in key order, so the bits do not depend on
/// how the keys split into runs. A head with no visible key gets zeros.
pub fn attend_query<'s>(
    q: &[f32],
    heads: usize,
    keys: &impl KeyRuns<'s>,
    n_keys: usize,
    scoring: &Scoring<'_>,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let stride = scores.len() / heads;
    let (ks, vs) = (keys.key_stride(), keys.value_stride());
    keys.keys(|j, from, n| {
        quant::vector::dot_rows(q, heads, from, ks, n, &mut scores[j..], stride);
    });
    for g in 0..heads {
        let bias = scoring.bias.map(|b| &b[g * stride..g * stride + n_keys]);
        probabilities(&mut scores[g * stride..g * stride + n_keys], bias, scoring);
    }
    out.fill(0.0);
    keys.values(|j, from, n| {
        quant::vector::axpy_rows(out, heads, &scores[j..], stride, from, vs, n);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and values in one matrix, split into runs of `run` positions.
    struct Split<'s> {
        k: &'s [f32],
        v: &'s [f32],
        width: usize,
        n: usize,
        run: usize,
    }

    impl<'s> KeyRuns<'s> for Split<'s> {
        fn key_stride(&self) -> usize {
            self.width
        }
        fn value_stride(&self) -> usize {
            self.width
        }
        fn keys(&self, mut f: impl FnMut(usize, Rows<'s>, usize)) {
            for j in (0..self.n).step_by(self.run) {
                f(
                    j,
                    Rows::F32(&self.k[j * self.width..]),
                    self.run.min(self.n - j),
                );
            }
        }
        fn values(&self, mut f: impl FnMut(usize, Rows<'s>, usize)) {
            for j in (0..self.n).step_by(self.run) {
                f(
                    j,
                    Rows::F32(&self.v[j * self.width..]),
                    self.run.min(self.n - j),
                );
            }
        }
    }

    /// The row-wise form is the textbook one under every scoring variant,
    /// and its bits do not depend on how the keys split into runs.
    #[test]
    fn attend_query_is_the_textbook_form_whatever_the_runs() {
        let (heads, width, n) = (2, 32, 37);
        let gen = |seed: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 5 + seed * 11) as f32 * 0.37).sin())
                .collect()
        };
        let (q, k, v) = (gen(1, heads * width), gen(2, n * width), gen(3, n * width));
        let bias = gen(4, heads * n);
        let visible: Vec<bool> = (0..n).map(|j| j % 3 != 1).collect();
        let hidden = vec![false; n];
        let variants = [
            Scoring::default(),
            Scoring {
                softcap: Some(0.8),
                bias: Some(&bias),
                visible: Some(&visible),
            },
            Scoring {
                visible: Some(&hidden),
                ..Scoring::default()
            },
        ];
        for scoring in &variants {
            let mut reference: Option<Vec<f32>> = None;
            for run in [1, 5, n] {
                let src = Split {
                    k: &k,
                    v: &v,
                    width,
                    n,
                    run,
                };
                let mut scores = vec![0.0; heads * n];
                let mut out = vec![9.0; heads * width];
                attend_query(&q, heads, &src, n, scoring, &mut scores, &mut out);
                for g in 0..heads {
                    let mut w: Vec<f32> = (0..n)
                        .map(|j| {
                            let s: f32 = (0..width)
                                .map(|c| q[g * width + c] * k[j * width + c])
                                .sum();
                            let s = s + scoring.bias.map_or(0.0, |b| b[g * n + j]);
                            scoring.softcap.map_or(s, |c| c * (s / c).tanh())
                        })
                        .collect();
                    let seen = scoring.visible.unwrap_or(&[true; 37]);
                    let any = seen.iter().any(|&s| s);
                    w.iter_mut()
                        .zip(seen)
                        .for_each(|(x, &s)| *x = if s { *x } else { f32::NEG_INFINITY });
                    if any {
                        crate::softmax(&mut w);
                    }
                    for c in 0..width {
                        let want: f32 = if any {
                            (0..n).map(|j| w[j] * v[j * width + c]).sum()
                        } else {
                            0.0
                        };
                        let got = out[g * width + c];
                        assert!(
                            (got - want).abs() < 1e-5,
                            "run {run} head {g}: {got} vs {want}"
                        );
                    }
                }
                match &reference {
                    None => reference = Some(out),
                    Some(r) => assert_eq!(r, &out, "bits changed with runs of {run}"),
                }
            }
        }
    }
}
