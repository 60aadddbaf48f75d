//! Low-rank adapters (LoRA) applied beside a weight, never merged into it:
//! `y = x Wᵀ + s · (x Aᵀ) Bᵀ` for each adapter a sequence runs with, where
//! `A` is `rank × cols`, `B` is `rows × rank` and `s` the adapter's scale.
//!
//! The weights stay as they are in the file (quantized, shared by every
//! sequence), so one model serves sequences with different adapters in one
//! batch: a [`RowAdapters`] says which rows of the batch run which
//! [`Adapters`], and [`crate::Linear::apply`] adds each row's updates after
//! the product. The updates are f32 products of their own.

use crate::linear::{product, Input, ProductBuffers, Products};
use gguf::GgmlType;
use quant::{Matrix, QuantError};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// One weight's low-rank update `ΔW = B A`, in f32.
#[derive(Debug, Clone)]
pub struct LoraPair {
    /// The inner dimension of the update.
    pub rank: usize,
    /// Output features of the weight.
    pub rows: usize,
    /// Input features of the weight.
    pub cols: usize,
    /// `A`, `rank` rows of `cols` f32 values, as little-endian bytes (what
    /// the kernels' float path reads).
    a: Vec<u8>,
    /// `B`, `rows` rows of `rank` values.
    b: Vec<u8>,
}

impl LoraPair {
    /// The update `B A` of a `rows × cols` weight; `a` holds `rank × cols`
    /// values and `b` `rows × rank`.
    pub fn new(a: &[f32], b: &[f32], rows: usize, cols: usize) -> Result<Self, QuantError> {
        let rank = a.len() / cols.max(1);
        if rank == 0 || a.len() != rank * cols || b.len() != rows * rank {
            return Err(QuantError::Shape(format!(
                "a LoRA update of a {rows}×{cols} weight needs A of rank×{cols} and B of {rows}×rank, \
                 not {} and {} values",
                a.len(),
                b.len()
            )));
        }
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Ok(Self {
            rank,
            rows,
            cols,
            a: bytes(a),
            b: bytes(b),
        })
    }

    /// `A` as values (a merge, a test).
    pub fn a(&self) -> Vec<f32> {
        floats(&self.a)
    }

    /// `B` as values.
    pub fn b(&self) -> Vec<f32> {
        floats(&self.b)
    }

    /// `out[..n·rows] += scale · (x Aᵀ) Bᵀ` for `n` rows of `x`.
    fn add_to(
        &self,
        ctx: Products,
        x: &[f32],
        n: usize,
        scale: f32,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
    ) -> Result<(), QuantError> {
        let a = Matrix::new(GgmlType::F32, self.rank, self.cols, &self.a)?;
        let b = Matrix::new(GgmlType::F32, self.rows, self.rank, &self.b)?;
        let (mut low, mut delta) = std::mem::take(&mut bufs.lora);
        low.resize(n * self.rank, 0.0);
        delta.resize(n * self.rows, 0.0);
        let mut run = || -> Result<(), QuantError> {
            product(ctx, &a, x, n, &mut low, bufs, Input::Plain)?;
            low.iter_mut().for_each(|v| *v *= scale);
            product(ctx, &b, &low, n, &mut delta, bufs, Input::Plain)?;
            out.iter_mut().zip(&delta).for_each(|(o, d)| *o += d);
            Ok(())
        };
        let result = run();
        bufs.lora = (low, delta);
        result
    }
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// An adapter: the updates of the weights it changes, by their tensor
/// names, and its `alpha`.
#[derive(Debug)]
pub struct Adapter {
    /// What identifies its contents (a digest of its file): two adapters
    /// with the same id compute the same numbers.
    pub id: [u8; 32],
    /// `alpha`: an update of rank `r` at user scale `s` is applied at
    /// `s · alpha / r` (PEFT's and llama.cpp's rule); `None`: at `s`.
    pub alpha: Option<f32>,
    /// The updates, by the name of the weight they change.
    pairs: HashMap<String, LoraPair>,
}

impl Adapter {
    /// An adapter of `pairs`, keyed by the names of the weights they change.
    pub fn new(id: [u8; 32], alpha: Option<f32>, pairs: HashMap<String, LoraPair>) -> Self {
        Self { id, alpha, pairs }
    }

    /// The update of the weight `name`, if the adapter changes it.
    pub fn pair(&self, name: &str) -> Option<&LoraPair> {
        self.pairs.get(name)
    }

    /// The names of the weights it changes.
    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.pairs.keys().map(String::as_str)
    }

    /// The factor an update of rank `rank` is applied with at user scale
    /// `scale`.
    pub fn factor(&self, rank: usize, scale: f32) -> f32 {
        match self.alpha {
            Some(alpha) if alpha != 0.0 => scale * alpha / rank as f32,
            _ => scale,
        }
    }

    /// Bytes its updates hold.
    pub fn bytes(&self) -> usize {
        self.pairs.values().map(|p| p.a.len() + p.b.len()).sum()
    }
}

/// The adapters a sequence runs with, each at its scale (none: the model as
/// it is). Two sets are equal when they compute the same numbers.
#[derive(Debug, Clone, Default)]
pub struct Adapters(Arc<[(Arc<Adapter>, f32)]>);

impl PartialEq for Adapters {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Adapters {
    /// `list` at its scales; an adapter at scale 0 is left out.
    pub fn new(list: Vec<(Arc<Adapter>, f32)>) -> Self {
        Self(list.into_iter().filter(|(_, s)| *s != 0.0).collect())
    }

    /// Whether no adapter applies.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What tells this set apart from any other that computes other
    /// numbers (empty for none): each adapter's id and scale, in order.
    /// Prompt states are kept apart by it.
    pub fn key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.0.len() * 36);
        for (a, s) in self.0.iter() {
            key.extend_from_slice(&a.id);
            key.extend_from_slice(&s.to_bits().to_le_bytes());
        }
        key
    }

    /// Whether some adapter of the set changes the weight `name`.
    fn changes(&self, name: &str) -> bool {
        self.0.iter().any(|(a, _)| a.pairs.contains_key(name))
    }
}

/// Which rows of a batch run which adapters: runs of consecutive rows (one
/// sequence's), each with its set. Rows in no run use none.
#[derive(Debug, Clone, Default)]
pub struct RowAdapters {
    runs: Vec<(Range<usize>, Adapters)>,
}

impl RowAdapters {
    /// Forgets every run (a new batch).
    pub fn clear(&mut self) {
        self.runs.clear();
    }

    /// The rows `rows` run `adapters` (nothing is kept for an empty set).
    pub fn push(&mut self, rows: Range<usize>, adapters: &Adapters) {
        if !adapters.is_empty() && !rows.is_empty() {
            self.runs.push((rows, adapters.clone()));
        }
    }

    /// Whether some row's adapters change the weight `name`.
    pub fn changes(&self, name: &str) -> bool {
        self.runs.iter().any(|(_, a)| a.changes(name))
    }

    /// `out[..n·rows] += ` each row's updates of the weight `name`, whose
    /// input rows are `x`.
    pub(crate) fn add_updates(
        &self,
        ctx: Products,
        name: &str,
        x: &[f32],
        n: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
    ) -> Result<(), QuantError> {
        for (rows, set) in &self.runs {
            let rows = rows.start.min(n)..rows.end.min(n);
            for (adapter, scale) in set.0.iter() {
                let Some(pair) = adapter.pairs.get(name) else {
                    continue;
                };
                let (cols, width) = (pair.cols, pair.rows);
                let x = x
                    .get(rows.start * cols..rows.end * cols)
                    .ok_or_else(|| QuantError::Shape("a LoRA input is short".into()))?;
                let out = out
                    .get_mut(rows.start * width..rows.end * width)
                    .ok_or_else(|| QuantError::Shape("a LoRA output is short".into()))?;
                let factor = adapter.factor(pair.rank, *scale);
                pair.add_to(ctx, x, rows.len(), factor, out, bufs)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Input, Linear, Precision, Weight};
    use gguf::{GgufFile, GgufWriter};
    use threads::ThreadPool;

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32 + seed) * 0.731).sin()).collect()
    }

    /// `x Mᵀ` for `m` of `rows × cols`, textbook.
    fn product(x: &[f32], m: &[f32], n: usize, rows: usize, cols: usize) -> Vec<f32> {
        let mut out = vec![0.0; n * rows];
        for i in 0..n {
            for r in 0..rows {
                out[i * rows + r] = (0..cols).map(|c| x[i * cols + c] * m[r * cols + c]).sum();
            }
        }
        out
    }

    /// Gate, up and down weights of a gated MLP in a file of type `ty`.
    fn mlp(ty: GgmlType, hidden: usize, ffn: usize) -> (GgufFile, [Linear; 3]) {
        let mut gguf = GgufWriter::new();
        let shapes = [("g", ffn, hidden), ("u", ffn, hidden), ("d", hidden, ffn)];
        for (k, (name, rows, cols)) in shapes.iter().enumerate() {
            let v = values(rows * cols, k as f32 * 10.0);
            let mut bytes = vec![0u8; quant::row_size(ty, *cols).unwrap() * rows];
            quant::quantize(ty, &v, &mut bytes).unwrap();
            let dims = [*cols as u64, *rows as u64];
            gguf.add_tensor(*name, &dims, ty, bytes).unwrap();
        }
        let file = GgufFile::from_bytes(gguf.to_bytes()).unwrap();
        let ws = shapes.map(|(name, rows, cols)| {
            let info = file.tensor(name).unwrap().clone();
            Linear::new(Weight::new(info, rows, cols).unwrap())
        });
        (file, ws)
    }

    /// `got` is `want` within a relative 1e-3 (the weights' products run
    /// in 8-bit activations on one path).
    fn near(got: &[f32], want: &[f32], what: &str) {
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() < 1e-3 * (1.0 + w.abs()),
                "{what} [{k}]: {g} vs {w}"
            );
        }
    }

    /// Each row's update is `scale · alpha / rank · x Aᵀ Bᵀ` of its own
    /// sequence's adapters, added to the weight's product before the gated
    /// MLP's activation and to the down product, in both precisions; rows
    /// of no adapter and weights no adapter changes are as without.
    #[test]
    fn updates_are_each_rows_own_and_textbook() {
        let (hidden, ffn, rank, n) = (64, 96, 3, 20);
        let pool = ThreadPool::new(2);
        let (ga, gb) = (values(rank * hidden, 3.0), values(ffn * rank, 4.0));
        let (da, db) = (values(rank * ffn, 5.0), values(hidden * rank, 6.0));
        let pairs = HashMap::from([
            (
                "g".to_string(),
                LoraPair::new(&ga, &gb, ffn, hidden).unwrap(),
            ),
            (
                "d".to_string(),
                LoraPair::new(&da, &db, hidden, ffn).unwrap(),
            ),
        ]);
        let adapter = Arc::new(Adapter::new([1; 32], Some(6.0), pairs));
        let factor = 0.5 * 6.0 / rank as f32;
        let mut rows = RowAdapters::default();
        rows.push(5..12, &Adapters::new(vec![(adapter, 0.5)]));
        let adapted_row = |i: usize| (5..12).contains(&i);
        // The activation doubles the gate: an update added after it would
        // count once.
        let act =
            |g: &mut [f32], u: &[f32]| g.iter_mut().zip(u).for_each(|(g, u)| *g = 2.0 * *g + u);
        let x = values(n * hidden, 0.5);
        for (ty, precision) in [
            (GgmlType::F32, Precision::Quantized),
            (GgmlType::Q8_0, Precision::Quantized),
            (GgmlType::Q8_0, Precision::Exact),
        ] {
            let (file, [g, u, d]) = mlp(ty, hidden, ffn);
            let plain = Products {
                file: &file,
                pool: &pool,
                precision,
                adapters: None,
            };
            let adapted = Products {
                adapters: Some(&rows),
                ..plain
            };
            let mut bufs = ProductBuffers::default();
            let mut gated = |ctx: Products| {
                let (mut gate, mut up) = (vec![0.0; n * ffn], vec![0.0; n * ffn]);
                let outs = [&mut gate[..], &mut up[..]];
                Linear::apply_gated(ctx, [&g, &u], &x, n, outs, &mut bufs, &act, &d).unwrap();
                let mut down = vec![0.0; n * hidden];
                d.apply(ctx, &gate, n, &mut down, &mut bufs, Input::AfterGate)
                    .unwrap();
                (gate, up, down)
            };
            let (g0, u0, _) = gated(plain);
            let (g1, u1, d1) = gated(adapted);
            near(&u1, &u0, "up");
            let update = product(&product(&x, &ga, n, rank, hidden), &gb, n, ffn, rank);
            let want: Vec<f32> = (0..n * ffn)
                .map(|k| {
                    g0[k]
                        + if adapted_row(k / ffn) {
                            2.0 * factor * update[k]
                        } else {
                            0.0
                        }
                })
                .collect();
            near(&g1, &want, &format!("{ty:?} gate"));
            let mut d0 = vec![0.0; n * hidden];
            d.apply(plain, &g1, n, &mut d0, &mut bufs, Input::Plain)
                .unwrap();
            let update = product(&product(&g1, &da, n, rank, ffn), &db, n, hidden, rank);
            let want: Vec<f32> = (0..n * hidden)
                .map(|k| {
                    d0[k]
                        + if adapted_row(k / hidden) {
                            factor * update[k]
                        } else {
                            0.0
                        }
                })
                .collect();
            near(&d1, &want, &format!("{ty:?} down"));
        }
    }
}
