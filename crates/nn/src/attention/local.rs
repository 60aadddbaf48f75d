//! Attention over a window of positions around each query, with a learned
//! term per relative distance (the audio conformers'): the row-wise form of
//! [`super::attend_query`] with a [`Scoring`] bias, soft-cap and hidden
//! frames.

use super::{attend_query, KeyRuns, Scoring};
use quant::vector::Rows;
use threads::ThreadPool;

/// Which keys a query sees and how its scores are shaped.
#[derive(Clone, Copy)]
pub struct LocalWindow {
    /// Heads of the queries, keys and values (each row `heads · head_dim`).
    pub heads: usize,
    /// Keys before the query it sees (the query's own is not counted).
    pub before: usize,
    /// Keys after the query it sees.
    pub after: usize,
    /// Rows of the distance table that lie before distance 0: row
    /// `past - (query - key)` holds the term for keys `query - key` back.
    pub past: usize,
    /// `cap · tanh(s / cap)` on the scores.
    pub softcap: f32,
}

/// `out[i, head] = Σ_j p_j v_j` over the keys `j` of query `i`'s window
/// that are `visible`, where `p = softmax(softcap(q·k_j + q·r_{i-j}))` and
/// `r` is `distances`' row for the distance (`heads · head_dim` wide, like
/// the keys). `q`, `k`, `v` and `out` are `visible.len()` rows. A query whose
/// window holds no visible key gets zeros.
///
/// # Panics
/// If `window.before` exceeds `window.past`, or `distances` holds fewer than
/// `past + after + 1` rows (the towers check both when they bind their
/// shapes).
#[allow(clippy::too_many_arguments)]
pub fn local(
    pool: &ThreadPool,
    window: &LocalWindow,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    distances: &[f32],
    visible: &[bool],
    out: &mut [f32],
) {
    let t = visible.len();
    let d = q.len() / t.max(1);
    let dh = d / window.heads;
    pool.for_each_chunk_mut(out, d, |qi, out| {
        let lo = qi.saturating_sub(window.before);
        let hi = (qi + window.after).min(t - 1);
        let n = hi + 1 - lo;
        let mut scores = vec![0.0f32; 2 * n];
        let (scores, bias) = scores.split_at_mut(n);
        for head in 0..window.heads {
            let col = head * dh;
            let qv = &q[qi * d + col..][..dh];
            // Rows for distances qi - lo down to qi - hi, one after another.
            let first = window.past + lo - qi;
            let table = Rows::F32(&distances[first * d + col..]);
            quant::vector::dot_rows(qv, 1, table, d, n, bias, n);
            let keys = Window {
                k: &k[lo * d + col..],
                v: &v[lo * d + col..],
                stride: d,
                n,
            };
            let scoring = Scoring {
                softcap: Some(window.softcap),
                bias: Some(bias),
                visible: Some(&visible[lo..=hi]),
            };
            attend_query(qv, 1, &keys, n, &scoring, scores, &mut out[col..col + dh]);
        }
    });
}

/// One query's window of keys and values: a single run.
struct Window<'s> {
    k: &'s [f32],
    v: &'s [f32],
    stride: usize,
    n: usize,
}

impl<'s> KeyRuns<'s> for Window<'s> {
    fn key_stride(&self) -> usize {
        self.stride
    }
    fn value_stride(&self) -> usize {
        self.stride
    }
    fn keys(&self, mut f: impl FnMut(usize, Rows<'s>, usize)) {
        f(0, Rows::F32(self.k), self.n)
    }
    fn values(&self, mut f: impl FnMut(usize, Rows<'s>, usize)) {
        f(0, Rows::F32(self.v), self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The windowed attention is the textbook one: every query against the
    /// visible keys of its window, with the distance term and soft-cap.
    #[test]
    fn local_matches_the_textbook_form() {
        let (heads, dh, t) = (2, 8, 11);
        let d = heads * dh;
        let window = LocalWindow {
            heads,
            before: 3,
            after: 1,
            past: 4,
            softcap: 2.0,
        };
        let span = window.past + window.after + 1;
        let gen = |seed: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 3 + seed * 17) as f32 * 0.29).sin())
                .collect()
        };
        let (q, k, v) = (gen(1, t * d), gen(2, t * d), gen(3, t * d));
        let distances = gen(4, span * d);
        let visible: Vec<bool> = (0..t).map(|i| i < 8 && i != 2).collect();
        let pool = ThreadPool::new(2);
        let mut out = vec![7.0f32; t * d];
        local(&pool, &window, &q, &k, &v, &distances, &visible, &mut out);
        for i in 0..t {
            for h in 0..heads {
                let keys: Vec<usize> = (i.saturating_sub(3)..=(i + 1).min(t - 1))
                    .filter(|&j| visible[j])
                    .collect();
                let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
                let qv = &q[i * d + h * dh..][..dh];
                let mut w: Vec<f32> = keys
                    .iter()
                    .map(|&j| {
                        let row = window.past + j - i;
                        let s = dot(qv, &k[j * d + h * dh..][..dh])
                            + dot(qv, &distances[row * d + h * dh..][..dh]);
                        2.0 * (s / 2.0).tanh()
                    })
                    .collect();
                if !w.is_empty() {
                    crate::softmax(&mut w);
                }
                for c in 0..dh {
                    let want: f32 = keys
                        .iter()
                        .zip(&w)
                        .map(|(&j, p)| p * v[j * d + h * dh + c])
                        .sum();
                    let got = out[i * d + h * dh + c];
                    assert!(
                        (got - want).abs() < 1e-5,
                        "query {i} head {h}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
