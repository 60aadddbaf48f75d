//! Gemma 4's vision encoder and its embedder into the text model, as
//! transformers' `Gemma4VisionModel` and `Gemma4MultimodalEmbedder` compute
//! them, from llama.cpp's `gemma4v` mmproj layout.
//!
//! The picture keeps its aspect ratio: it is resized to the largest size made
//! of whole `pool × pool` cells of 16-pixel patches whose patch count fits
//! the token budget (280 soft tokens by default, so up to 2,520 patches), so
//! the number of soft tokens varies from image to image. Each patch is
//! projected (pixels scaled to -1..1, no bias) and given learned x and y
//! position embeddings. The blocks are Gemma-style: RMSNorm before and after
//! attention and MLP, per-head RMSNorm of queries and keys (and of values,
//! with no weight), a 2-D rotary embedding (the first half of each head
//! turned by the patch's column, the second half by its row), attention
//! scale 1, a gated tanh-GELU MLP, and products whose inputs and outputs
//! are clamped. The output is averaged over `pool × pool` cells, scaled by
//! `sqrt(width)`, optionally standardised, RMS-normalised without weight and
//! projected into the text model's width.

use super::{patch_rows, BlockActs, Pixels, VisionConfig};
use crate::weights;
use crate::weights::{product, tensor, vector, Buffers, PRODUCT_BLOCK};
use crate::MediaError;
use gguf::GgufFile;
use nn::attention::full::attention;
use nn::Linear;
use threads::ThreadPool;

/// The size (width, height) a `width × height` picture is resized to: the
/// processor's `get_aspect_ratio_preserving_size`, in the same f64
/// arithmetic (Python's floats).
pub(crate) fn input_size(
    cfg: &VisionConfig,
    width: u32,
    height: u32,
) -> Result<(u32, u32), MediaError> {
    let (p, k) = (cfg.patch_size as u64, cfg.pool as u64);
    let max_patches = cfg.max_tokens as u64 * k * k;
    let (w, h) = (u64::from(width), u64::from(height));
    let target_px = max_patches * p * p;
    let factor = (target_px as f64 / (h * w) as f64).sqrt();
    let side = p * k;
    let mut th = (factor * h as f64 / side as f64).floor() as u64 * side;
    let mut tw = (factor * w as f64 / side as f64).floor() as u64 * side;
    let max_side = (max_patches / (k * k)) * side;
    match (th, tw) {
        (0, 0) => {
            return Err(MediaError::Decode(format!(
                "a {width}x{height} picture leaves no whole {side}-pixel cell"
            )))
        }
        (0, _) => {
            th = side;
            tw = ((w / h) * side).min(max_side);
        }
        (_, 0) => {
            tw = side;
            th = ((h / w) * side).min(max_side);
        }
        _ => {}
    }
    if th * tw > target_px || tw > u64::from(crate::MAX_SIDE) || th > u64::from(crate::MAX_SIDE) {
        return Err(MediaError::Decode(format!(
            "a {width}x{height} picture cannot fit {max_patches} patches"
        )));
    }
    Ok((tw as u32, th as u32))
}

/// One encoder block.
struct Block {
    ln1: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    attn_post: Vec<f32>,
    ln2: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
    ffn_post: Vec<f32>,
}

/// What every block of one encoding shares: the threads, the tower's
/// configuration, the patch grid's rotary embedding and its shape.
struct Grid<'a> {
    pool: &'a ThreadPool,
    cfg: &'a VisionConfig,
    rope: &'a Rope2d,
    /// Patches per row of the grid.
    pw: usize,
    /// Patches in all.
    n: usize,
}

impl Block {
    /// `x += attention(x)` then `x += mlp(x)`, each normed before and after.
    fn forward(
        &self,
        file: &GgufFile,
        g: &Grid,
        x: &mut [f32],
        a: &mut BlockActs,
        bufs: &mut Buffers,
    ) -> Result<(), MediaError> {
        let (pool, cfg, n) = (g.pool, g.cfg, g.n);
        nn::pre_norm(pool, x, &mut a.h, &self.ln1, cfg.eps);
        product(pool, file, &self.q, &a.h, n, &mut a.q, bufs)?;
        product(pool, file, &self.k, &a.h, n, &mut a.k, bufs)?;
        product(pool, file, &self.v, &a.h, n, &mut a.v, bufs)?;
        self.finish_heads(g, a);
        let dh = cfg.hidden / cfg.heads;
        attention(
            pool,
            cfg.heads,
            dh,
            1.0,
            &a.q,
            &a.k,
            &a.v,
            &mut a.attn,
            &mut bufs.heads,
        )?;
        product(pool, file, &self.out, &a.attn, n, &mut a.o, bufs)?;
        nn::post_norm_add(pool, &mut a.o, x, &self.attn_post, cfg.eps);
        nn::pre_norm(pool, x, &mut a.h, &self.ln2, cfg.eps);
        product(pool, file, &self.gate, &a.h, n, &mut a.gate, bufs)?;
        product(pool, file, &self.up, &a.h, n, &mut a.up, bufs)?;
        let f = cfg.ffn;
        let up = &a.up;
        pool.for_each_chunk_mut(&mut a.gate, PRODUCT_BLOCK * f, |b, chunk| {
            nn::geglu(chunk, &up[b * PRODUCT_BLOCK * f..][..chunk.len()]);
        });
        product(pool, file, &self.down, &a.gate, n, &mut a.o, bufs)?;
        nn::post_norm_add(pool, &mut a.o, x, &self.ffn_post, cfg.eps);
        Ok(())
    }

    /// Queries and keys normed per head and turned by their patch's
    /// column and row; values normed per head without a weight.
    fn finish_heads(&self, g: &Grid, a: &mut BlockActs) {
        let (pool, cfg, pw) = (g.pool, g.cfg, g.pw);
        let (d, dh) = (cfg.hidden, cfg.hidden / cfg.heads);
        for (buf, weight) in [(&mut a.q, &self.q_norm), (&mut a.k, &self.k_norm)] {
            pool.for_each_chunk_mut(buf, PRODUCT_BLOCK * d, |b, chunk| {
                for (r, row) in chunk.chunks_exact_mut(d).enumerate() {
                    let i = b * PRODUCT_BLOCK + r;
                    for head in row.chunks_exact_mut(dh) {
                        nn::rms_norm(head, weight, cfg.eps);
                        g.rope.apply(head, i % pw, i / pw);
                    }
                }
            });
        }
        pool.for_each_chunk_mut(&mut a.v, PRODUCT_BLOCK * d, |_, chunk| {
            chunk
                .chunks_exact_mut(dh)
                .for_each(|head| nn::rms_norm_plain(head, cfg.eps));
        });
    }
}

/// Gemma 4's encoder and embedder, bound to an mmproj file.
pub(crate) struct Gemma4 {
    patch: Linear,
    /// `[2][table][width]`: the x table, then the y table.
    positions: Vec<f32>,
    table: usize,
    blocks: Vec<Block>,
    /// The standardisation `(x - bias) * scale` after pooling, if any.
    standardize: Option<(Vec<f32>, Vec<f32>)>,
    projection: Linear,
}

impl Gemma4 {
    pub(crate) fn bind(file: &GgufFile, cfg: &VisionConfig) -> Result<Self, MediaError> {
        let (d, p, f) = (cfg.hidden, cfg.patch_size, cfg.ffn);
        let patch = weights::bind_clamped(file, "v.patch_embd", d, 3 * p * p)?;
        let pos = tensor(file, "v.position_embd.weight")?;
        let table = match pos.dims[..] {
            [w, t, 2] if w == d as u64 && t > 0 => t as usize,
            _ => {
                return Err(MediaError::TensorShape {
                    name: pos.name.clone(),
                    found: pos.dims.clone(),
                    expected: vec![d as u64, 0, 2],
                })
            }
        };
        let positions = vector(file, "v.position_embd.weight", 2 * table * d)?;
        let dh = d / cfg.heads;
        let blocks = (0..cfg.layers)
            .map(|i| {
                let b = |n: &str| format!("v.blk.{i}.{n}");
                let lin = |n: &str, rows, cols| weights::bind_clamped(file, &b(n), rows, cols);
                let norm = |n: &str, len| vector(file, &b(&format!("{n}.weight")), len);
                Ok(Block {
                    ln1: norm("ln1", d)?,
                    q: lin("attn_q", d, d)?,
                    k: lin("attn_k", d, d)?,
                    v: lin("attn_v", d, d)?,
                    out: lin("attn_out", d, d)?,
                    q_norm: norm("attn_q_norm", dh)?,
                    k_norm: norm("attn_k_norm", dh)?,
                    attn_post: norm("attn_post_norm", d)?,
                    ln2: norm("ln2", d)?,
                    gate: lin("ffn_gate", f, d)?,
                    up: lin("ffn_up", f, d)?,
                    down: lin("ffn_down", d, f)?,
                    ffn_post: norm("ffn_post_norm", d)?,
                })
            })
            .collect::<Result<Vec<_>, MediaError>>()?;
        let standardize = match (file.tensor("v.std_bias"), file.tensor("v.std_scale")) {
            (Some(_), Some(_)) => Some((
                vector(file, "v.std_bias", d)?,
                vector(file, "v.std_scale", d)?,
            )),
            _ => None,
        };
        let projection = weights::bind_clamped(file, "mm.input_projection", cfg.text_hidden, d)?;
        Ok(Self {
            patch,
            positions,
            table,
            blocks,
            standardize,
            projection,
        })
    }

    /// The tower over one picture's pixels, projected into the text
    /// model's width: a row per soft token.
    pub(crate) fn encode(
        &self,
        file: &GgufFile,
        cfg: &VisionConfig,
        pool: &ThreadPool,
        pixels: &Pixels,
    ) -> Result<Vec<f32>, MediaError> {
        let (p, k, d) = (cfg.patch_size, cfg.pool, cfg.hidden);
        let (w, h) = (pixels.width, pixels.height);
        if w == 0 || h == 0 || !w.is_multiple_of(p * k) || !h.is_multiple_of(p * k) {
            return Err(MediaError::Decode(format!(
                "a {w}x{h} input is not whole {}-pixel cells",
                p * k
            )));
        }
        let (pw, ph) = (w / p, h / p);
        if pw.max(ph) > self.table {
            return Err(MediaError::Decode(format!(
                "a {w}x{h} input has more patches on a side than the {} positions the tower knows",
                self.table
            )));
        }
        let n = pw * ph;
        let mut bufs = Buffers::default();
        // The model takes pixels in 0..1 and scales them itself.
        let scaled: Vec<f32> = pixels.data.iter().map(|&v| 2.0 * (v - 0.5)).collect();
        let patches = patch_rows(&scaled, w, h, p);
        drop(scaled);
        let mut x = vec![0.0f32; n * d];
        product(pool, file, &self.patch, &patches, n, &mut x, &mut bufs)?;
        drop(patches);
        let (tx, ty) = self.positions.split_at(self.table * d);
        for (i, row) in x.chunks_exact_mut(d).enumerate() {
            let (px, py) = (i % pw, i / pw);
            let (ex, ey) = (&tx[px * d..][..d], &ty[py * d..][..d]);
            for ((v, &a), &b) in row.iter_mut().zip(ex).zip(ey) {
                *v += a + b;
            }
        }

        let rope = Rope2d::new(d / cfg.heads, cfg.rope_theta, pw.max(ph));
        let grid = Grid {
            pool,
            cfg,
            rope: &rope,
            pw,
            n,
        };
        let mut acts = BlockActs::new(n, d, cfg.ffn, true);
        for blk in &self.blocks {
            blk.forward(file, &grid, &mut x, &mut acts, &mut bufs)?;
        }
        drop(acts);
        let mut pooled = self.pool_cells(cfg, &x, pw, ph);
        let tokens = pooled.len() / d;
        for row in pooled.chunks_exact_mut(d) {
            nn::rms_norm_plain(row, cfg.eps);
        }
        let mut out = vec![0.0f32; tokens * cfg.text_hidden];
        product(
            pool,
            file,
            &self.projection,
            &pooled,
            tokens,
            &mut out,
            &mut bufs,
        )?;
        Ok(out)
    }

    /// The averages of `pool × pool` cells of the patch grid, row-major over
    /// the cells, scaled by `sqrt(width)` and standardised.
    fn pool_cells(&self, cfg: &VisionConfig, x: &[f32], pw: usize, ph: usize) -> Vec<f32> {
        let (k, d) = (cfg.pool, cfg.hidden);
        let (cw, ch) = (pw / k, ph / k);
        let mut pooled = vec![0.0f32; cw * ch * d];
        let inv = 1.0 / (k * k) as f32;
        let root = (d as f64).sqrt() as f32;
        for (t, row) in pooled.chunks_exact_mut(d).enumerate() {
            let (cy, cx) = (t / cw, t % cw);
            for i in 0..k {
                for j in 0..k {
                    let patch = (cy * k + i) * pw + cx * k + j;
                    row.iter_mut()
                        .zip(&x[patch * d..][..d])
                        .for_each(|(a, &b)| *a += b * inv);
                }
            }
            row.iter_mut().for_each(|a| *a *= root);
            if let Some((bias, scale)) = &self.standardize {
                for ((a, &b), &s) in row.iter_mut().zip(bias).zip(scale) {
                    *a = (*a - b) * s;
                }
            }
        }
        pooled
    }
}

/// The 2-D rotary embedding of one head: the shared [`nn::Rope`] over
/// each half of the head (NeoX pairs `i` and `i + dh/4`, frequencies
/// `theta^(-2i / (dh/2))`), the first half turned by the patch's column and
/// the second by its row, from tables of every coordinate's angles.
struct Rope2d {
    rope: nn::Rope,
    /// `cos` and `sin` of coordinate `c` at pair `i`: `[c * pairs + i]`.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope2d {
    fn new(dh: usize, theta: f32, coords: usize) -> Self {
        let rope = nn::Rope::new(dh / 2, theta, 1.0);
        let q = rope.pairs();
        let (mut cos, mut sin) = (vec![0.0; coords * q], vec![0.0; coords * q]);
        for c in 0..coords {
            rope.angles(c, &mut cos[c * q..][..q], &mut sin[c * q..][..q]);
        }
        Self { rope, cos, sin }
    }

    fn apply(&self, head: &mut [f32], x: usize, y: usize) {
        let q = self.rope.pairs();
        let (first, second) = head.split_at_mut(2 * q);
        for (part, c) in [(first, x), (second, y)] {
            self.rope
                .apply_angles(part, &self.cos[c * q..][..q], &self.sin[c * q..][..q]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::Projector;

    fn config(tokens: usize) -> VisionConfig {
        VisionConfig {
            projector: Projector::Gemma4,
            image_size: 224,
            patch_size: 16,
            hidden: 768,
            ffn: 3072,
            layers: 16,
            heads: 12,
            eps: 1e-6,
            mean: [0.0; 3],
            std: [1.0; 3],
            pool: 3,
            text_hidden: 1536,
            max_tokens: tokens,
            rope_theta: 100.0,
        }
    }

    #[test]
    fn input_sizes_follow_the_processor() {
        // Values from transformers' get_aspect_ratio_preserving_size.
        let c = config(280);
        assert_eq!(input_size(&c, 896, 896).unwrap(), (768, 768));
        assert_eq!(input_size(&c, 1920, 1080).unwrap(), (1056, 576));
        assert_eq!(input_size(&c, 100, 10_000).unwrap(), (48, 8016));
        assert_eq!(input_size(&c, 10_000, 100).unwrap(), (8016, 48));
        assert_eq!(input_size(&c, 3, 16_000).unwrap(), (48, 13_440));
        assert_eq!(input_size(&c, 640, 480).unwrap(), (912, 672));
        assert_eq!(input_size(&c, 64, 64).unwrap(), (768, 768));
        let small = config(70);
        assert_eq!(input_size(&small, 896, 896).unwrap(), (384, 384));
        for (w, h) in [(1, 1), (3, 16_000), (16_000, 3), (640, 480)] {
            let (tw, th) = input_size(&c, w, h).unwrap();
            assert!(tw % 48 == 0 && th % 48 == 0 && (tw / 16) * (th / 16) <= 2520);
        }
    }

    #[test]
    fn rope_turns_each_half_by_its_own_coordinate() {
        let rope = Rope2d::new(8, 100.0, 4);
        let mut head = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        rope.apply(&mut head, 0, 3);
        // Column 0: the first half is unchanged.
        assert_eq!(&head[..4], &[1.0, 0.0, 0.0, 0.0]);
        // Row 3 at frequency 1: (cos 3, sin 3) in the pair (4, 6).
        assert!((head[4] - 3f32.cos()).abs() < 1e-6 && (head[6] - 3f32.sin()).abs() < 1e-6);
        let norm: f32 = head.iter().map(|v| v * v).sum();
        assert!((norm - 2.0).abs() < 1e-5);
    }
}
