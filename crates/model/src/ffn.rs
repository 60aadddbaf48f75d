//! The feed-forward side of a layer: the gated (GeGLU) MLP, Gemma 4's
//! mixture-of-experts added to it where the layer has a router, and Gemma 4's
//! per-layer inputs.

use crate::moe::MoeWeights;
use crate::weights::{Mlp, PerLayerEmbeddings, PerLayerInput};
use crate::LayerKind;
use crate::{Model, ModelError, Scratch};
use nn::par_rows;

impl Model {
    /// `s.o = proj(gelu(gate(input)) * per_layer_input)` for layer `li`,
    /// over the batch's rows of `input` (Gemma 4: the residual stream;
    /// Gemma 3n: the scaled, corrected active stream).
    pub(crate) fn gated_per_layer_input(
        &self,
        li: usize,
        pl: &crate::weights::PerLayerInput,
        input: &[f32],
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let cfg = &self.config;
        let (b, h, pd) = (s.layout.batch, cfg.hidden, cfg.per_layer_dim);
        let width = cfg.n_layers * pd;
        pl.gate.apply(
            self.products(None),
            input,
            b,
            &mut s.per_layer.gate[..b * pd],
            &mut s.products,
            nn::Input::Plain,
        )?;
        for (i, g) in s.per_layer.gate[..b * pd].chunks_exact_mut(pd).enumerate() {
            let per_layer = &s.per_layer.inputs[i * width + li * pd..][..pd];
            for (gv, &iv) in g.iter_mut().zip(per_layer) {
                *gv = nn::gelu_tanh(*gv) * iv;
            }
        }
        let (gated, o) = (&s.per_layer.gate[..b * pd], &mut s.o[..b * h]);
        Ok(pl.proj.apply(
            self.products(None),
            gated,
            b,
            o,
            &mut s.products,
            nn::Input::Plain,
        )?)
    }

    /// Gemma 4's per-layer inputs for the batch: each token's row of the
    /// per-layer embedding table (scaled by `sqrt(per_layer_dim)`) plus a
    /// normed projection of its scaled embedding, the sum scaled by `1/sqrt 2`.
    /// Needs the scaled embeddings in `s.x`.
    pub(crate) fn per_layer_inputs(
        &self,
        ple: &PerLayerEmbeddings,
        s: &mut Scratch,
        tokens: &[u32],
    ) -> Result<(), ModelError> {
        let cfg = &self.config;
        let b = tokens.len();
        let pd = cfg.per_layer_dim;
        let width = cfg.n_layers * pd;
        let table = ple.token_embd.weight.matrix(&self.file)?;
        let tok_scale = (pd as f32).sqrt();
        for (row, &t) in s.per_layer.inputs.chunks_exact_mut(width).zip(tokens) {
            table.dequantize_row(t as usize, row)?;
            row.iter_mut().for_each(|v| *v *= tok_scale);
        }
        let x = &s.x[..b * cfg.hidden];
        ple.model_proj.apply(
            self.products(None),
            x,
            b,
            &mut s.per_layer.proj[..b * width],
            &mut s.products,
            nn::Input::Plain,
        )?;
        let proj_scale = 1.0 / (cfg.hidden as f32).sqrt();
        let mix = std::f32::consts::FRAC_1_SQRT_2;
        for (p, t) in s.per_layer.proj[..b * width]
            .chunks_exact_mut(pd)
            .zip(s.per_layer.inputs[..b * width].chunks_exact_mut(pd))
        {
            p.iter_mut().for_each(|v| *v *= proj_scale);
            nn::rms_norm(p, &ple.proj_norm, cfg.norm_eps);
            for (tv, &pv) in t.iter_mut().zip(p.iter()) {
                *tv = (pv + *tv) * mix;
            }
        }
        Ok(())
    }
}

impl Mlp {
    /// The layer's feed-forward block: `x += post_norm(down(gelu(gate) * up))`
    /// over `pre_norm(x)`, plus the experts' share on MoE layers.
    pub(crate) fn forward(
        &self,
        m: &Model,
        kind: &LayerKind,
        moe: Option<&MoeWeights>,
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let (b, h, fd) = (s.layout.batch, m.config.hidden, kind.ffn_dim);
        m.block_input_for(&self.norm, s, &self.gate)?;
        let input = &s.h[..b * h];
        match kind.sparsity {
            // Activation sparsity needs each gate row whole (its mean and
            // spread), so it runs between the products.
            Some(spread) => {
                let mut outs = [&mut s.ffn.gate[..b * fd], &mut s.ffn.up[..b * fd]];
                nn::Linear::apply_many(
                    m.products(Some(&s.layout.adapters)),
                    [&self.gate, &self.up],
                    input,
                    b,
                    &mut outs,
                    &mut s.products,
                )?;
                let up = &s.ffn.up[..b * fd];
                par_rows(&m.pool, &mut s.ffn.gate[..b * fd], fd, |i, g| {
                    nn::gaussian_top_k(g, spread);
                    nn::geglu(g, &up[i * fd..(i + 1) * fd])
                });
            }
            None => {
                let outs = [&mut s.ffn.gate[..b * fd], &mut s.ffn.up[..b * fd]];
                nn::Linear::apply_gated(
                    m.products(Some(&s.layout.adapters)),
                    [&self.gate, &self.up],
                    input,
                    b,
                    outs,
                    &mut s.products,
                    &nn::geglu,
                    &self.down,
                )?;
            }
        }
        let (gate, o) = (&s.ffn.gate[..b * fd], &mut s.o[..b * h]);
        // With the activations the gated product quantized where it did.
        self.down.apply(
            m.products(Some(&s.layout.adapters)),
            gate,
            b,
            o,
            &mut s.products,
            nn::Input::AfterGate,
        )?;
        if let Some(moe) = moe {
            let (x, o) = (&s.x[..b * h], &mut s.o[..b * h]);
            moe.forward(m, x, o, b, &mut s.moe, &mut s.products)?;
        }
        m.add_block_output(self.post_norm.as_deref(), s);
        Ok(())
    }
}

impl PerLayerInput {
    /// Gemma 4: `x += post_norm(proj(gelu(gate(x)) * per_layer_input))`, a
    /// gated projection of layer `li`'s per-layer input.
    pub(crate) fn forward(&self, m: &Model, li: usize, s: &mut Scratch) -> Result<(), ModelError> {
        let (b, h) = (s.layout.batch, m.config.hidden);
        let x = std::mem::take(&mut s.x);
        let gated = m.gated_per_layer_input(li, self, &x[..b * h], s);
        s.x = x;
        gated?;
        m.add_block_output(Some(&self.post_norm), s);
        Ok(())
    }
}
