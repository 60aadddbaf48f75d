//! Gemma 4's mixture-of-experts block (26B-A4B): a router picks the top-k of
//! E small GeGLU experts per token; their weighted sum is added to the dense
//! FFN's output before the layer's post-FFN norm.

use crate::weights::{bind, checked_tensor, vector};
use crate::{Model, ModelError};
use gguf::{GgufFile, TensorInfo};
use nn::Linear;
use nn::ProductBuffers;

/// E expert matrices stored as one 3-D tensor `[cols, rows, E]`.
#[derive(Debug, Clone)]
pub struct Experts {
    info: TensorInfo,
    /// Output features of each expert.
    pub rows: usize,
    /// Input features of each expert.
    pub cols: usize,
    /// Number of experts.
    pub n: usize,
}

impl Experts {
    fn bind(
        file: &GgufFile,
        name: &str,
        cols: usize,
        rows: usize,
        n: usize,
    ) -> Result<Self, ModelError> {
        let info = checked_tensor(file, name, &[cols as u64, rows as u64, n as u64])?;
        Ok(Self {
            info,
            rows,
            cols,
            n,
        })
    }

    /// Expert `e` as a kernel view.
    fn matrix<'a>(&self, file: &'a GgufFile, e: usize) -> Result<quant::Matrix<'a>, ModelError> {
        let per = quant::row_size(self.info.ty, self.cols)? * self.rows;
        let bytes = file
            .tensor_data(&self.info)
            .get(e * per..(e + 1) * per)
            .ok_or_else(|| ModelError::MissingTensor(format!("{} expert {e}", self.info.name)))?;
        Ok(quant::Matrix::new(
            self.info.ty,
            self.rows,
            self.cols,
            bytes,
        )?)
    }
}

/// The experts' gate and up projections: fused (`[gate; up]` rows) or apart.
#[derive(Debug, Clone)]
pub enum GateUp {
    /// One tensor, gate rows first.
    Fused(Experts),
    /// Separate gate and up tensors.
    Split(Experts, Experts),
}

/// The weights of one layer's MoE block.
#[derive(Debug, Clone)]
pub struct MoeWeights {
    /// Router: residual stream → one logit per expert.
    pub router: Linear,
    /// Elementwise scale on the router's normed input.
    pub router_scale: Vec<f32>,
    /// Per-expert output scale.
    pub expert_scale: Option<Vec<f32>>,
    /// Norm on the experts' input.
    pub pre_norm: Vec<f32>,
    /// Norm on the dense FFN's output before the sum.
    pub post_norm_dense: Vec<f32>,
    /// Norm on the experts' weighted sum.
    pub post_norm_experts: Vec<f32>,
    /// Gate and up projections.
    pub gate_up: GateUp,
    /// Down projections.
    pub down: Experts,
    /// Experts each token uses.
    pub top_k: usize,
}

impl MoeWeights {
    /// Bind layer `i`'s MoE tensors, or `None` when the layer has no router.
    pub(crate) fn bind(
        file: &GgufFile,
        i: usize,
        hidden: usize,
        n_experts: usize,
        top_k: usize,
        expert_ffn: usize,
    ) -> Result<Option<Self>, ModelError> {
        let n = |s: &str| format!("blk.{i}.{s}");
        if file.tensor(&n("ffn_gate_inp.weight")).is_none() {
            return Ok(None);
        }
        if n_experts == 0 || top_k == 0 || top_k > n_experts || expert_ffn == 0 {
            return Err(ModelError::Metadata(format!(
                "layer {i} has a router but expert_count {n_experts}, expert_used_count {top_k}, expert_feed_forward_length {expert_ffn}"
            )));
        }
        let gate_up = if file.tensor(&n("ffn_gate_up_exps.weight")).is_some() {
            GateUp::Fused(Experts::bind(
                file,
                &n("ffn_gate_up_exps.weight"),
                hidden,
                2 * expert_ffn,
                n_experts,
            )?)
        } else {
            GateUp::Split(
                Experts::bind(
                    file,
                    &n("ffn_gate_exps.weight"),
                    hidden,
                    expert_ffn,
                    n_experts,
                )?,
                Experts::bind(
                    file,
                    &n("ffn_up_exps.weight"),
                    hidden,
                    expert_ffn,
                    n_experts,
                )?,
            )
        };
        let expert_scale = if file.tensor(&n("ffn_down_exps.scale")).is_some() {
            Some(vector(file, &n("ffn_down_exps.scale"), n_experts)?)
        } else {
            None
        };
        Ok(Some(Self {
            router: bind(file, &n("ffn_gate_inp.weight"), hidden, n_experts)?,
            router_scale: vector(file, &n("ffn_gate_inp.scale"), hidden)?,
            expert_scale,
            pre_norm: vector(file, &n("pre_ffw_norm_2.weight"), hidden)?,
            post_norm_dense: vector(file, &n("post_ffw_norm_1.weight"), hidden)?,
            post_norm_experts: vector(file, &n("post_ffw_norm_2.weight"), hidden)?,
            gate_up,
            down: Experts::bind(
                file,
                &n("ffn_down_exps.weight"),
                expert_ffn,
                hidden,
                n_experts,
            )?,
            top_k,
        }))
    }
}

/// Buffers of the MoE block, grown on first use.
#[derive(Debug, Default)]
pub(crate) struct MoeScratch {
    /// Per expert, the rows routed to it and their weights.
    routes: Vec<Vec<(usize, f32)>>,
    /// Expert indices sorted by one row's router probability.
    order: Vec<usize>,
    input: Vec<f32>,
    router_in: Vec<f32>,
    logits: Vec<f32>,
    sum: Vec<f32>,
    gathered: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    out: Vec<f32>,
}

impl MoeWeights {
    /// `dense <- post_norm_dense(dense) + post_norm_experts(Σ_k w_k expert_k(pre_norm(x)))`
    /// for `b` rows, where the router reads `x` (the residual stream after
    /// attention).
    pub(crate) fn forward(
        &self,
        m: &Model,
        x: &[f32],
        dense: &mut [f32],
        b: usize,
        ms: &mut MoeScratch,
        bufs: &mut ProductBuffers,
    ) -> Result<(), ModelError> {
        let (h, eps) = (m.config.hidden, m.config.norm_eps);
        for row in dense.chunks_exact_mut(h) {
            nn::rms_norm(row, &self.post_norm_dense, eps);
        }
        // Taken out of the scratch so the loops below can borrow it freely;
        // put back at the end, so steady-state decoding allocates nothing.
        let mut routes = std::mem::take(&mut ms.routes);
        let routed = self.route(m, x, b, ms, bufs, &mut routes);
        ms.input.clear();
        ms.input.extend_from_slice(&x[..b * h]);
        for row in ms.input.chunks_exact_mut(h) {
            nn::rms_norm(row, &self.pre_norm, eps);
        }
        ms.sum.clear();
        ms.sum.resize(b * h, 0.0);
        let run = routed.and_then(|()| {
            routes
                .iter()
                .enumerate()
                .filter(|(_, rows)| !rows.is_empty())
                .try_for_each(|(e, rows)| self.expert(m, e, rows, ms, bufs))
        });
        ms.routes = routes;
        run?;
        for (row, drow) in ms.sum.chunks_exact_mut(h).zip(dense.chunks_exact_mut(h)) {
            nn::rms_norm(row, &self.post_norm_experts, eps);
            for (d, &v) in drow.iter_mut().zip(row.iter()) {
                *d += v;
            }
        }
        Ok(())
    }

    /// Into `routes`, per expert: the rows that chose it and their weights
    /// (the router's softmax over the top k, renormalized, times the
    /// expert's scale).
    fn route(
        &self,
        m: &Model,
        x: &[f32],
        b: usize,
        ms: &mut MoeScratch,
        bufs: &mut ProductBuffers,
        routes: &mut Vec<Vec<(usize, f32)>>,
    ) -> Result<(), ModelError> {
        let (h, eps) = (m.config.hidden, m.config.norm_eps);
        let n_exp = self.router.rows();
        ms.router_in.clear();
        ms.router_in.extend_from_slice(&x[..b * h]);
        let inv_sqrt_h = 1.0 / (h as f32).sqrt();
        for row in ms.router_in.chunks_exact_mut(h) {
            nn::rms_norm_plain(row, eps);
            for (v, &s) in row.iter_mut().zip(&self.router_scale) {
                *v *= s * inv_sqrt_h;
            }
        }
        ms.logits.resize(b * n_exp, 0.0);
        self.router.apply(
            m.products(None),
            &ms.router_in,
            b,
            &mut ms.logits,
            bufs,
            nn::Input::Plain,
        )?;
        routes.resize_with(n_exp, Vec::new);
        routes.iter_mut().for_each(Vec::clear);
        let order = &mut ms.order;
        for (r, logits) in ms.logits.chunks_exact_mut(n_exp).enumerate() {
            nn::softmax(logits);
            order.clear();
            order.extend(0..n_exp);
            // Highest probability first; ties to the lower index, as topk does.
            order.sort_by(|&a, &c| logits[c].total_cmp(&logits[a]).then(a.cmp(&c)));
            let chosen = &order[..self.top_k];
            let total: f32 = chosen.iter().map(|&e| logits[e]).sum();
            for &e in chosen {
                let scale = self.expert_scale.as_ref().map_or(1.0, |s| s[e]);
                routes[e].push((r, logits[e] / total * scale));
            }
        }
        Ok(())
    }

    /// Expert `e` over the normed input rows routed to it, its outputs
    /// added to `ms.sum` with their weights.
    fn expert(
        &self,
        m: &Model,
        e: usize,
        rows: &[(usize, f32)],
        ms: &mut MoeScratch,
        bufs: &mut ProductBuffers,
    ) -> Result<(), ModelError> {
        let (file, h, ffn) = (&*m.file, m.config.hidden, self.down.cols);
        let n = rows.len();
        ms.gathered.clear();
        for &(r, _) in rows {
            ms.gathered.extend_from_slice(&ms.input[r * h..(r + 1) * h]);
        }
        let product = |w: &quant::Matrix, x: &[f32], out: &mut [f32], bufs: &mut ProductBuffers| {
            nn::linear::product(m.products(None), w, x, n, out, bufs, nn::Input::Plain)
        };
        match &self.gate_up {
            GateUp::Fused(gu) => {
                ms.up.resize(n * 2 * ffn, 0.0);
                product(&gu.matrix(file, e)?, &ms.gathered, &mut ms.up, bufs)?;
                ms.gate.clear();
                for row in ms.up.chunks_exact(2 * ffn) {
                    let (g, u) = row.split_at(ffn);
                    ms.gate
                        .extend(g.iter().zip(u).map(|(&g, &u)| nn::gelu_tanh(g) * u));
                }
            }
            GateUp::Split(g, u) => {
                ms.gate.resize(n * ffn, 0.0);
                ms.up.resize(n * ffn, 0.0);
                product(&g.matrix(file, e)?, &ms.gathered, &mut ms.gate, bufs)?;
                product(&u.matrix(file, e)?, &ms.gathered, &mut ms.up, bufs)?;
                nn::geglu(&mut ms.gate, &ms.up);
            }
        }
        ms.out.resize(n * h, 0.0);
        product(&self.down.matrix(file, e)?, &ms.gate, &mut ms.out, bufs)?;
        for (j, &(r, w)) in rows.iter().enumerate() {
            for (acc, &v) in ms.sum[r * h..(r + 1) * h]
                .iter_mut()
                .zip(&ms.out[j * h..(j + 1) * h])
            {
                *acc += w * v;
            }
        }
        Ok(())
    }
}
