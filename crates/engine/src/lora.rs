//! LoRA adapters on an engine: loaded at start (`--lora FILE[:SCALE]`,
//! GGUF adapters or PEFT directories), applied beside the weights at the
//! scales the engine holds (llama.cpp's `/lora-adapters`) or a request
//! gives (its `lora` field), never merged into them.
//!
//! A session's cache records the adapters its keys and values were
//! computed with ([`model::KvCache::use_adapters`]), so two adapter sets
//! never share cached state; stored prompt states are kept apart by
//! [`nn::Adapters::key`] too.

use crate::{Engine, EngineError, Session};
use gguf::{GgmlType, GgufFile, GgufWriter};
use nn::{Adapter, Adapters};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// An adapter to load and the scale it starts at: `FILE[:SCALE]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSpec {
    /// A GGUF adapter (llama.cpp's `convert_lora_to_gguf.py`) or a PEFT
    /// adapter directory.
    pub path: PathBuf,
    /// Its scale until changed (1: as trained; 0: loaded but off).
    pub scale: f32,
}

impl FromStr for LoraSpec {
    type Err = String;

    /// `FILE` at scale 1, or `FILE:SCALE` where what follows the last `:`
    /// is a number (a path with a colon of its own stays whole).
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("an adapter path is empty".into());
        }
        let (path, scale) = match s.rsplit_once(':') {
            Some((p, n)) if !p.is_empty() => match n.parse::<f32>() {
                Ok(v) => (p, v),
                Err(_) => (s, 1.0),
            },
            _ => (s, 1.0),
        };
        check_scale(scale).map_err(|e| format!("{s}: {e}"))?;
        Ok(Self {
            path: path.into(),
            scale,
        })
    }
}

/// A scale a user may give an adapter: finite, and within ±100 (beyond,
/// the model's outputs are noise).
fn check_scale(scale: f32) -> Result<(), String> {
    match scale.is_finite() && scale.abs() <= 100.0 {
        true => Ok(()),
        false => Err(format!(
            "an adapter scale must be a number within ±100, not {scale}"
        )),
    }
}

/// The adapter at `path` (a GGUF adapter or a PEFT directory) bound to
/// the model in `base`, its id a digest of its tensors and alpha.
fn read_adapter(base: &GgufFile, path: &Path) -> Result<Adapter, EngineError> {
    let file = match hf::is_adapter_dir(path) {
        true => {
            let arch = base.get_str("general.architecture").unwrap_or("");
            GgufFile::from_bytes(hf::convert_adapter_dir(path, arch)?.to_bytes())?
        }
        false => GgufFile::open(path)?,
    };
    let mut sha = Sha256::new();
    for t in file.tensors() {
        sha.update(t.name.as_bytes());
        sha.update(file.tensor_data(t));
    }
    let alpha = file.get_f32("adapter.lora.alpha").unwrap_or(0.0);
    sha.update(alpha.to_le_bytes());
    Ok(model::bind_adapter(base, &file, sha.finalize().into())?)
}

/// The model in `base` with the adapters of `specs` merged into its
/// weights at their scales (what `hearth quantize --lora` quantizes):
/// each weight they change becomes f32 `W + Σ scale · alpha / r · B A`,
/// the others are copied as they are.
pub fn merge_adapters(base: &GgufFile, specs: &[LoraSpec]) -> Result<GgufFile, EngineError> {
    let mut adapters = Vec::with_capacity(specs.len());
    for spec in specs {
        check_scale(spec.scale).map_err(EngineError::InvalidOptions)?;
        let adapter = read_adapter(base, &spec.path).map_err(|e| {
            EngineError::InvalidOptions(format!("adapter {}: {e}", spec.path.display()))
        })?;
        adapters.push((adapter, spec.scale));
    }
    let mut w = GgufWriter::new();
    for (k, v) in base.metadata() {
        w.set(k.clone(), v.clone());
    }
    for t in base.tensors() {
        let data = base.tensor_data(t);
        let changes: Vec<_> = adapters
            .iter()
            .filter_map(|(a, s)| a.pair(&t.name).map(|p| (p, a.factor(p.rank, *s))))
            .filter(|(_, f)| *f != 0.0)
            .collect();
        let Some((first, _)) = changes.first() else {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, data.to_vec())?;
            continue;
        };
        let (rows, cols) = (first.rows, first.cols);
        let mut m = vec![0.0f32; rows * cols];
        quant::dequantize(t.ty, data, &mut m).map_err(model::ModelError::from)?;
        for (pair, factor) in changes {
            add_update(&mut m, pair, factor);
        }
        let bytes = m.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(t.name.clone(), &t.dims, GgmlType::F32, bytes)?;
    }
    Ok(GgufFile::from_bytes(w.to_bytes())?)
}

/// `m += factor · B A` for the `rows × cols` matrix `m`.
fn add_update(m: &mut [f32], pair: &nn::LoraPair, factor: f32) {
    let (a, b, rank, cols) = (pair.a(), pair.b(), pair.rank, pair.cols);
    for (r, row) in m.chunks_exact_mut(cols).enumerate() {
        for k in 0..rank {
            let coef = factor * b[r * rank + k];
            let a_row = &a[k * cols..(k + 1) * cols];
            row.iter_mut().zip(a_row).for_each(|(v, &x)| *v += coef * x);
        }
    }
}

/// An adapter the engine holds, as `GET /lora-adapters` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraInfo {
    /// Its index, in the order the adapters were given.
    pub id: usize,
    /// Where it was loaded from.
    pub path: PathBuf,
    /// The scale requests that name no adapters run it at.
    pub scale: f32,
    /// How many weights it changes.
    pub weights: usize,
    /// Bytes its updates take in memory.
    pub bytes: usize,
}

impl std::fmt::Display for LoraInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LoRA adapter {}: {} ({} weights, {:.1} MiB) at scale {}",
            self.id,
            self.path.display(),
            self.weights,
            self.bytes as f64 / (1024.0 * 1024.0),
            self.scale
        )
    }
}

/// The adapters an engine holds and their current scales.
#[derive(Debug, Default)]
pub(crate) struct LoraSet {
    adapters: Vec<(PathBuf, Arc<Adapter>)>,
    scales: std::sync::RwLock<Vec<f32>>,
}

impl Engine {
    /// Loads `specs` for this model, in order (their ids).
    pub(crate) fn load_adapters(&mut self, specs: &[LoraSpec]) -> Result<(), EngineError> {
        let mut adapters = Vec::with_capacity(specs.len());
        for spec in specs {
            check_scale(spec.scale).map_err(EngineError::InvalidOptions)?;
            let adapter = read_adapter(self.model.gguf(), &spec.path).map_err(|e| {
                EngineError::InvalidOptions(format!("adapter {}: {e}", spec.path.display()))
            })?;
            adapters.push((spec.path.clone(), Arc::new(adapter)));
        }
        let scales = specs.iter().map(|s| s.scale).collect();
        self.lora = Arc::new(LoraSet {
            adapters,
            scales: std::sync::RwLock::new(scales),
        });
        Ok(())
    }

    /// The adapters loaded, with the scales requests that name none run
    /// them at.
    pub fn lora_adapters(&self) -> Vec<LoraInfo> {
        let scales = self.lora.scales.read().unwrap_or_else(|e| e.into_inner());
        self.lora
            .adapters
            .iter()
            .zip(scales.iter())
            .enumerate()
            .map(|(id, ((path, adapter), &scale))| LoraInfo {
                id,
                path: path.clone(),
                scale,
                weights: adapter.targets().count(),
                bytes: adapter.bytes(),
            })
            .collect()
    }

    /// Sets the scales requests that name no adapters run at: each listed
    /// `(id, scale)`, and 0 for the adapters not listed (llama.cpp's
    /// `POST /lora-adapters`).
    pub fn set_lora_scales(&self, scales: &[(usize, f32)]) -> Result<(), EngineError> {
        let new = self.scales_from(scales)?;
        *self.lora.scales.write().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(())
    }

    /// Every adapter's scale from a request's list: those listed at their
    /// scale, the others at 0. An unknown id or a bad scale is refused.
    fn scales_from(&self, listed: &[(usize, f32)]) -> Result<Vec<f32>, EngineError> {
        let mut scales = vec![0.0; self.lora.adapters.len()];
        for &(id, scale) in listed {
            let slot = scales.get_mut(id).ok_or_else(|| {
                EngineError::InvalidRequest(format!(
                    "no LoRA adapter has id {id} ({} loaded)",
                    self.lora.adapters.len()
                ))
            })?;
            check_scale(scale).map_err(EngineError::InvalidRequest)?;
            *slot = scale;
        }
        Ok(scales)
    }

    /// The adapters a request runs with: those it lists (`Some`, the
    /// others off), or the engine's current scales (`None`).
    pub fn adapters_for(&self, listed: Option<&[(usize, f32)]>) -> Result<Adapters, EngineError> {
        let scales = match listed {
            Some(l) => self.scales_from(l)?,
            None => self
                .lora
                .scales
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        let list = self.lora.adapters.iter().zip(scales);
        Ok(Adapters::new(
            list.map(|((_, a), s)| (Arc::clone(a), s)).collect(),
        ))
    }
}

impl Session {
    /// Runs the next generations with `adapters`. What the session holds
    /// was computed with its earlier adapters; when those differ, it is
    /// forgotten.
    pub fn use_adapters(&mut self, adapters: &Adapters) {
        if self.cache.adapters() != adapters {
            self.reset();
            self.cache.use_adapters(adapters);
        }
    }

    /// The adapters the session runs with.
    pub fn adapters(&self) -> &Adapters {
        self.cache.adapters()
    }
}
