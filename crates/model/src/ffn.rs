//! The feed-forward side of a layer: the gated (GeGLU) MLP, Gemma 4's
//! mixture-of-experts added to it where the layer has a router, and Gemma 4's
//! per-layer inputs.

use crate::weights::PerLayerEmbeddings;
use crate::{Model, ModelError, Scratch};
use nn::par_rows;

impl Model {
    /// Layer `li`'s feed-forward block: `x += post_norm(down(gelu(gate) * up))`
    /// over `pre_norm(x)`, plus the experts' share on MoE layers.
    pub(crate) fn ffn_block(&self, li: usize, s: &mut Scratch) -> Result<(), ModelError> {
        let (cfg, lw) = (&self.config, &self.weights.layers[li]);
        let (b, h, fd) = (s.layout.batch, cfg.hidden, cfg.layers[li].ffn_dim);
        self.block_input_for(&lw.ffn_norm, s, &lw.gate)?;
        let input = &s.h[..b * h];
        match cfg.layers[li].sparsity {
            // Activation sparsity needs each gate row whole (its mean and
            // spread), so it runs between the products.
            Some(m) => {
                let mut outs = [&mut s.ffn.gate[..b * fd], &mut s.ffn.up[..b * fd]];
                nn::Linear::apply_many(
                    self.products(),
                    [&lw.gate, &lw.up],
                    input,
                    b,
                    &mut outs,
                    &mut s.products,
                )?;
                let up = &s.ffn.up[..b * fd];
                par_rows(&self.pool, &mut s.ffn.gate[..b * fd], fd, |i, g| {
                    nn::gaussian_top_k(g, m);
                    nn::geglu(g, &up[i * fd..(i + 1) * fd])
                });
            }
            None => {
                let outs = [&mut s.ffn.gate[..b * fd], &mut s.ffn.up[..b * fd]];
                nn::Linear::apply_gated(
                    self.products(),
                    [&lw.gate, &lw.up],
                    input,
                    b,
                    outs,
                    &mut s.products,
                    &nn::geglu,
                    &lw.down,
                )?;
            }
        }
        let (gate, o) = (&s.ffn.gate[..b * fd], &mut s.o[..b * h]);
        // With the activations the gated product quantized where it did.
        lw.down.apply(
            self.products(),
            gate,
            b,
            o,
            &mut s.products,
            nn::Input::AfterGate,
        )?;
        if let Some(moe) = &lw.moe {
            let (x, o) = (&s.x[..b * h], &mut s.o[..b * h]);
            self.moe_block(moe, x, o, b, &mut s.moe, &mut s.products)?;
        }
        self.add_block_output(&lw.post_ffn_norm, s);
        Ok(())
    }

    /// Gemma 4: `x += post_norm(proj(gelu(gate(x)) * per_layer_input))`, a
    /// gated projection of layer `li`'s per-layer input. Absent elsewhere.
    pub(crate) fn per_layer_input_block(
        &self,
        li: usize,
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        let Some(pl) = &self.weights.layers[li].per_layer else {
            return Ok(());
        };
        let (b, h) = (s.layout.batch, self.config.hidden);
        let x = std::mem::take(&mut s.x);
        let gated = self.gated_per_layer_input(li, pl, &x[..b * h], s);
        s.x = x;
        gated?;
        self.add_block_output(&pl.post_norm, s);
        Ok(())
    }

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
            self.products(),
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
            self.products(),
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
            self.products(),
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
