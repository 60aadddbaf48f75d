//! Gemma 3n's additions to the layer: AltUp and LAuReL.
//!
//! AltUp keeps `n` copies (streams) of the residual stream. Before a layer
//! every stream is predicted from all of them; the layer runs on stream 0
//! only (the "active" one, held in `s.x` while it runs); afterwards every
//! stream is corrected by how far the layer moved stream 0, and the layer's
//! per-layer input is added to the other streams. A router reading stream 0
//! sets the mixing coefficients per token. At the ends, the extra streams
//! are made from the embeddings and mapped back, each rescaled to stream 0's
//! magnitude, and averaged.
//!
//! The streams live token-major in `s.altup.streams` (`n` rows of `hidden` per token),
//! so every per-token step is one parallel pass over contiguous rows.

use crate::weights::{AltUpLayer, Laurel, PerLayerInput};
use crate::{Model, ModelError, Scratch};
use nn::par_rows;

/// AltUp's bound on streams, so per-token coefficients live on the stack.
pub(crate) const MAX_STREAMS: usize = 16;

/// `sqrt(mean(x²))`, the magnitude AltUp matches between streams.
fn magnitude(x: &[f32]) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    (ss / x.len().max(1) as f64).sqrt() as f32
}

/// `x *= target / sqrt(max(mean(x²), 1e-5))`: a projected stream rescaled
/// to the magnitude of stream 0, as transformers clamps it.
fn rescale(x: &mut [f32], target: f32) {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let mean = (ss / x.len().max(1) as f64) as f32;
    let f = target / mean.max(1e-5).sqrt();
    x.iter_mut().for_each(|v| *v *= f);
}

impl AltUpLayer {
    /// The router's view of `active`: `tanh(router · (rms_norm(x) · w / hidden))`,
    /// one value per stream, into `out`.
    fn modalities(&self, active: &[f32], eps: f32, out: &mut [f32]) {
        let h = active.len();
        let ss: f64 = active.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let inv = 1.0 / ((ss / h as f64) as f32 + eps).sqrt();
        for (m, row) in out.iter_mut().zip(self.router.chunks_exact(h)) {
            let dot: f32 = row
                .iter()
                .zip(active)
                .zip(&self.router_norm)
                .map(|((&r, &a), &w)| r * (a * inv * w))
                .sum();
            *m = nn::tanh(dot / h as f32);
        }
    }

    /// Before the layer: every stream predicted from all streams
    /// (`pred_j = alt_j + Σ_k c_jk alt_k`, the coefficients from the
    /// router), and stream 0's prediction put in `s.x` for the layer.
    pub(crate) fn predict(&self, m: &Model, s: &mut Scratch) {
        let (b, h, n, eps) = (
            s.layout.batch,
            m.config.hidden,
            m.config.altup_streams,
            m.config.norm_eps,
        );
        let alt = &s.altup.streams[..b * n * h];
        par_rows(&m.pool, &mut s.altup.pred[..b * n * h], n * h, |r, pred| {
            let streams = &alt[r * n * h..][..n * h];
            let mut modal = [0.0f32; MAX_STREAMS];
            self.modalities(&streams[..h], eps, &mut modal[..n]);
            let mut coef = [0.0f32; MAX_STREAMS * MAX_STREAMS];
            for (c, row) in coef.iter_mut().zip(self.predict.chunks_exact(n)) {
                *c = row.iter().zip(&modal[..n]).map(|(&w, &m)| w * m).sum();
            }
            for (j, out) in pred.chunks_exact_mut(h).enumerate() {
                out.copy_from_slice(&streams[j * h..][..h]);
                for (k, src) in streams.chunks_exact(h).enumerate() {
                    let c = coef[j * n + k];
                    out.iter_mut().zip(src).for_each(|(o, &v)| *o += c * v);
                }
            }
        });
        for (r, row) in s.x[..b * h].chunks_exact_mut(h).enumerate() {
            row.copy_from_slice(&s.altup.pred[r * n * h..][..h]);
        }
    }

    /// After layer `li`: every stream corrected by the layer's change to
    /// stream 0 (`alt_j = pred_j + (1 + c_j)(x - pred_0)`), then the
    /// per-layer input, gated by the scaled corrected stream 0, added to
    /// the other streams.
    pub(crate) fn correct(
        &self,
        m: &Model,
        li: usize,
        per_layer: Option<&PerLayerInput>,
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let (b, h, n, eps) = (
            s.layout.batch,
            m.config.hidden,
            m.config.altup_streams,
            m.config.norm_eps,
        );
        let (x, pred) = (&s.x[..b * h], &s.altup.pred[..b * n * h]);
        par_rows(
            &m.pool,
            &mut s.altup.streams[..b * n * h],
            n * h,
            |r, alt| {
                let active = &x[r * h..][..h];
                let pred = &pred[r * n * h..][..n * h];
                let mut modal = [0.0f32; MAX_STREAMS];
                self.modalities(active, eps, &mut modal[..n]);
                for (j, out) in alt.chunks_exact_mut(h).enumerate() {
                    let c: f32 = self.correct[j * n..][..n]
                        .iter()
                        .zip(&modal[..n])
                        .map(|(&w, &m)| w * m)
                        .sum::<f32>()
                        + 1.0;
                    let p = &pred[j * h..][..h];
                    for ((o, &pv), (&a, &p0)) in out.iter_mut().zip(p).zip(active.iter().zip(pred))
                    {
                        *o = pv + c * (a - p0);
                    }
                }
            },
        );
        let Some(pl) = per_layer else {
            return Ok(());
        };
        for (r, row) in s.h[..b * h].chunks_exact_mut(h).enumerate() {
            let first = &s.altup.streams[r * n * h..][..h];
            for ((v, &a), &g) in row.iter_mut().zip(first).zip(&self.correct_scale) {
                *v = a * g;
            }
        }
        let first = std::mem::take(&mut s.h);
        let gated = m.gated_per_layer_input(li, pl, &first[..b * h], s);
        s.h = first;
        gated?;
        let o = &mut s.o[..b * h];
        par_rows(&m.pool, o, h, |_, row| {
            nn::rms_norm(row, &pl.post_norm, eps)
        });
        let o = &s.o[..b * h];
        par_rows(
            &m.pool,
            &mut s.altup.streams[..b * n * h],
            n * h,
            |r, alt| {
                let add = &o[r * h..][..h];
                for stream in alt.chunks_exact_mut(h).skip(1) {
                    stream.iter_mut().zip(add).for_each(|(v, &a)| *v += a);
                }
            },
        );
        Ok(())
    }
}

impl Laurel {
    /// LAuReL after the layer's attention: with `s.h` still the block's
    /// normed input, `x = (x + h + post_norm(right(left(h)))) / √2`.
    pub(crate) fn forward(&self, m: &Model, s: &mut Scratch) -> Result<(), ModelError> {
        let (b, h, rank) = (s.layout.batch, m.config.hidden, self.left.rows());
        let (input, low) = (&s.h[..b * h], &mut s.laurel[..b * rank]);
        self.left.apply(
            m.products(None),
            input,
            b,
            low,
            &mut s.products,
            nn::Input::Plain,
        )?;
        let (low, o) = (&s.laurel[..b * rank], &mut s.o[..b * h]);
        self.right.apply(
            m.products(None),
            low,
            b,
            o,
            &mut s.products,
            nn::Input::Plain,
        )?;
        let (o, normed, eps) = (&mut s.o[..b * h], &s.h[..b * h], m.config.norm_eps);
        par_rows(&m.pool, o, h, |_, row| {
            nn::rms_norm(row, &self.post_norm, eps)
        });
        let o = &s.o[..b * h];
        par_rows(&m.pool, &mut s.x[..b * h], h, |r, x| {
            let (l, n) = (&o[r * h..][..h], &normed[r * h..][..h]);
            for ((xv, &lv), &nv) in x.iter_mut().zip(l).zip(n) {
                *xv = (*xv + (nv + lv)) * std::f32::consts::FRAC_1_SQRT_2;
            }
        });
        Ok(())
    }
}

impl Model {
    /// The streams at the start of a batch: stream 0 is the embeddings in
    /// `s.x`; stream `i` is its `i`-th projection rescaled to stream 0's
    /// magnitude.
    pub(crate) fn altup_embed(&self, s: &mut Scratch) -> Result<(), ModelError> {
        let Some(proj) = &self.weights.altup else {
            return Ok(());
        };
        let (b, h, n) = (
            s.layout.batch,
            self.config.hidden,
            self.config.altup_streams,
        );
        for (r, row) in s.x[..b * h].chunks_exact(h).enumerate() {
            s.altup.streams[r * n * h..][..h].copy_from_slice(row);
        }
        for (k, w) in proj.embed.iter().enumerate() {
            w.apply(
                self.products(None),
                &s.x[..b * h],
                b,
                &mut s.o[..b * h],
                &mut s.products,
                nn::Input::Plain,
            )?;
            let (x, o) = (&s.x[..b * h], &mut s.o[..b * h]);
            par_rows(&self.pool, o, h, |r, row| {
                rescale(row, magnitude(&x[r * h..][..h]));
            });
            for (r, row) in s.o[..b * h].chunks_exact(h).enumerate() {
                s.altup.streams[(r * n + k + 1) * h..][..h].copy_from_slice(row);
            }
        }
        Ok(())
    }

    /// After the last layer: the streams back into one, in `s.x`: stream 0
    /// and each other stream's unembedding (rescaled to stream 0's
    /// magnitude), averaged.
    pub(crate) fn altup_merge(&self, s: &mut Scratch) -> Result<(), ModelError> {
        let Some(proj) = &self.weights.altup else {
            return Ok(());
        };
        let (b, h, n) = (
            s.layout.batch,
            self.config.hidden,
            self.config.altup_streams,
        );
        for (r, row) in s.x[..b * h].chunks_exact_mut(h).enumerate() {
            row.copy_from_slice(&s.altup.streams[r * n * h..][..h]);
        }
        for (k, w) in proj.unembed.iter().enumerate() {
            for (r, row) in s.h[..b * h].chunks_exact_mut(h).enumerate() {
                row.copy_from_slice(&s.altup.streams[(r * n + k + 1) * h..][..h]);
            }
            w.apply(
                self.products(None),
                &s.h[..b * h],
                b,
                &mut s.o[..b * h],
                &mut s.products,
                nn::Input::Plain,
            )?;
            let alt = &s.altup.streams[..b * n * h];
            par_rows(&self.pool, &mut s.o[..b * h], h, |r, row| {
                rescale(row, magnitude(&alt[r * n * h..][..h]));
            });
            let o = &s.o[..b * h];
            s.x[..b * h].iter_mut().zip(o).for_each(|(x, &v)| *x += v);
        }
        let inv = 1.0 / n as f32;
        s.x[..b * h].iter_mut().for_each(|v| *v *= inv);
        Ok(())
    }
}
