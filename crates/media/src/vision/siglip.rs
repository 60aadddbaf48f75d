//! Gemma 3's SigLIP encoder and projector: 14-pixel patches with learned
//! positions, pre-LayerNorm blocks with full attention and a tanh-GELU MLP,
//! a final LayerNorm, then the projector's pooling, RMSNorm and projection.

use super::{patch_rows, BlockActs, Pixels, VisionConfig};
use crate::weights;
use crate::weights::{product, tensor, vector, Buffers, LayerNorm, PRODUCT_BLOCK};
use crate::MediaError;
use gguf::GgufFile;
use nn::attention::full::attention;
use nn::Linear;
use threads::ThreadPool;

/// Gemma 3's SigLIP encoder and projector.
pub(super) struct Siglip {
    patch: Linear,
    positions: Vec<f32>,
    blocks: Vec<Block>,
    post_ln: LayerNorm,
    soft_norm: Vec<f32>,
    /// Text width outputs of vision width inputs (the file stores it
    /// transposed, as the reference multiplies it: `x · P`).
    projection: Linear,
}

/// One encoder block.
#[derive(Debug, Clone)]
struct Block {
    ln1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

impl Block {
    /// `x += out(attention(ln1(x)))`, then `x += down(gelu(up(ln2(x))))`.
    fn forward(
        &self,
        file: &GgufFile,
        pool: &ThreadPool,
        cfg: &VisionConfig,
        x: &mut [f32],
        a: &mut BlockActs,
        bufs: &mut Buffers,
    ) -> Result<(), MediaError> {
        let d = cfg.hidden;
        let (n, dh) = (x.len() / d, d / cfg.heads);
        let scale = 1.0 / (dh as f32).sqrt();
        self.ln1.rows(pool, x, &mut a.h, cfg.eps);
        product(pool, file, &self.q, &a.h, n, &mut a.q, bufs)?;
        product(pool, file, &self.k, &a.h, n, &mut a.k, bufs)?;
        product(pool, file, &self.v, &a.h, n, &mut a.v, bufs)?;
        attention(
            pool,
            cfg.heads,
            dh,
            scale,
            &a.q,
            &a.k,
            &a.v,
            &mut a.attn,
            &mut bufs.heads,
        )?;
        product(pool, file, &self.out, &a.attn, n, &mut a.o, bufs)?;
        x.iter_mut().zip(&a.o).for_each(|(v, &o)| *v += o);
        self.ln2.rows(pool, x, &mut a.h, cfg.eps);
        product(pool, file, &self.up, &a.h, n, &mut a.up, bufs)?;
        let ffn = cfg.ffn;
        pool.for_each_chunk_mut(&mut a.up, ffn * PRODUCT_BLOCK, |_, chunk| {
            nn::gelu(chunk);
        });
        product(pool, file, &self.down, &a.up, n, &mut a.o, bufs)?;
        x.iter_mut().zip(&a.o).for_each(|(v, &o)| *v += o);
        Ok(())
    }
}

impl Siglip {
    pub(super) fn bind(file: &GgufFile, cfg: &VisionConfig) -> Result<Self, MediaError> {
        let (d, p) = (cfg.hidden, cfg.patch_size);
        let patch = weights::bind(file, "v.patch_embd", d, 3 * p * p)?;
        let positions = vector(file, "v.position_embd.weight", cfg.patches() * d)?;
        let blocks = (0..cfg.layers)
            .map(|i| {
                let b = |n: &str| format!("v.blk.{i}.{n}");
                Ok(Block {
                    ln1: LayerNorm::bind(file, &b("ln1"), d)?,
                    q: weights::bind(file, &b("attn_q"), d, d)?,
                    k: weights::bind(file, &b("attn_k"), d, d)?,
                    v: weights::bind(file, &b("attn_v"), d, d)?,
                    out: weights::bind(file, &b("attn_out"), d, d)?,
                    ln2: LayerNorm::bind(file, &b("ln2"), d)?,
                    up: weights::bind(file, &b("ffn_up"), cfg.ffn, d)?,
                    down: weights::bind(file, &b("ffn_down"), d, cfg.ffn)?,
                })
            })
            .collect::<Result<Vec<_>, MediaError>>()?;
        let post_ln = LayerNorm::bind(file, "v.post_ln", d)?;
        let soft_norm = vector(file, "mm.soft_emb_norm.weight", d)?;
        let proj = tensor(file, "mm.input_projection.weight")?;
        if proj.dims != [cfg.text_hidden as u64, d as u64] {
            return Err(MediaError::TensorShape {
                name: proj.name.clone(),
                found: proj.dims.clone(),
                expected: vec![cfg.text_hidden as u64, d as u64],
            });
        }
        let projection = Linear::new(nn::Weight::transposed(file, proj, cfg.text_hidden, d)?);
        Ok(Self {
            patch,
            positions,
            blocks,
            post_ln,
            soft_norm,
            projection,
        })
    }

    pub(super) fn encode(
        &self,
        file: &GgufFile,
        cfg: &VisionConfig,
        pool: &ThreadPool,
        pixels: &Pixels,
    ) -> Result<Vec<f32>, MediaError> {
        let (s, p, d) = (cfg.image_size, cfg.patch_size, cfg.hidden);
        if (pixels.width, pixels.height) != (s, s) {
            return Err(MediaError::Decode(format!(
                "a {}x{} input for a {s}x{s} tower",
                pixels.width, pixels.height
            )));
        }
        let n = cfg.patches();
        let mut bufs = Buffers::default();
        let patches = patch_rows(&pixels.data, s, s, p);
        let mut x = vec![0.0f32; n * d];
        product(pool, file, &self.patch, &patches, n, &mut x, &mut bufs)?;
        drop(patches);
        x.iter_mut()
            .zip(&self.positions)
            .for_each(|(v, &pe)| *v += pe);

        let mut acts = BlockActs::new(n, d, cfg.ffn, false);
        for blk in &self.blocks {
            blk.forward(file, pool, cfg, &mut x, &mut acts, &mut bufs)?;
        }
        let mut h = acts.h;
        self.post_ln.rows(pool, &x, &mut h, cfg.eps);
        self.project(file, cfg, pool, &h, &mut bufs)
    }

    /// The projector: `pool × pool` averages of the patch grid, RMSNorm
    /// with the (already `1 + w`) weight, then the projection.
    fn project(
        &self,
        file: &GgufFile,
        cfg: &VisionConfig,
        pool: &ThreadPool,
        x: &[f32],
        bufs: &mut Buffers,
    ) -> Result<Vec<f32>, MediaError> {
        let (d, side, k) = (cfg.hidden, cfg.patches_per_side(), cfg.pool);
        let out_side = side / k;
        let tokens = out_side * out_side;
        let mut pooled = vec![0.0f32; tokens * d];
        let inv = 1.0 / (k * k) as f32;
        for (t, row) in pooled.chunks_exact_mut(d).enumerate() {
            let (ty, tx) = (t / out_side, t % out_side);
            for i in 0..k {
                for j in 0..k {
                    let patch = (ty * k + i) * side + tx * k + j;
                    row.iter_mut()
                        .zip(&x[patch * d..(patch + 1) * d])
                        .for_each(|(a, &b)| *a += b);
                }
            }
            row.iter_mut().for_each(|a| *a *= inv);
            nn::rms_norm(row, &self.soft_norm, cfg.eps);
        }
        let mut out = vec![0.0f32; tokens * cfg.text_hidden];
        product(
            pool,
            file,
            &self.projection,
            &pooled,
            tokens,
            &mut out,
            bufs,
        )?;
        Ok(out)
    }
}
