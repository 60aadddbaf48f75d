//! Gemma architectures: configuration from metadata, weights bound to kernels,
//! the forward pass (batched prefill and single-token decode) and the KV cache.
//!
//! The model never samples or prints: it turns token ids into hidden states and
//! logits for the positions asked for.

mod altup;
mod attention;
mod config;
mod embed;
mod ffn;
mod forward;
mod kv;
mod layer;
mod layout;
mod logits;
mod lora;
mod moe;
mod scratch;
mod weights;

pub use config::{Arch, Config, LayerKind, Pooling};
pub use embed::{unit_vector, EmbeddingHead};
pub use forward::{Embedded, SeqInput};
pub use kv::{ring_slack, saved_rows, KvCache, KvStateError, KvType, SavedKv, SavedLayerRows};
pub use logits::BatchRows;
pub use lora::bind_adapter;
pub use moe::{Experts, GateUp, MoeWeights};
pub use nn::Precision;
pub use scratch::Scratch;
pub use weights::Weights;

use gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;
use threads::ThreadPool;

/// Why a model cannot be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The container is unreadable.
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    /// `general.architecture` names something we do not implement.
    #[error("unknown model architecture `{name}` (supported: {})", Arch::SUPPORTED.join(", "))]
    UnknownArchitecture {
        /// The architecture found.
        name: String,
    },
    /// A required hyper-parameter is missing or inconsistent.
    #[error("bad model metadata: {0}")]
    Metadata(String),
    /// A required tensor is absent.
    #[error("tensor `{0}` is missing")]
    MissingTensor(String),
    /// A tensor has the wrong shape for the configuration.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor.
        name: String,
        /// Its dimensions.
        found: Vec<u64>,
        /// What the configuration implies.
        expected: Vec<u64>,
    },
    /// A tensor is stored in a type we have no kernels for.
    #[error("tensor `{name}` has type {ty}, which is not supported")]
    UnsupportedTensorType {
        /// The tensor.
        name: String,
        /// Its type.
        ty: gguf::GgmlType,
    },
    /// The sequence would grow past the context.
    #[error("context full: {needed} positions needed, the context holds {n_ctx}")]
    ContextFull {
        /// Positions the request needs.
        needed: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    BadToken {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// A kernel rejected its input (a bug or a corrupt tensor).
    #[error("kernel error: {0}")]
    Kernel(#[from] quant::QuantError),
    /// The KV cache type asked for cannot hold this model's heads.
    #[error("a {ty} KV cache stores whole blocks of 32, and this model's heads are {width} wide (use --kv-cache f16)")]
    KvCacheType {
        /// The type asked for.
        ty: &'static str,
        /// The head (or value) width it cannot hold.
        width: usize,
    },
    /// An embedding model's file lacks a dense projection.
    #[error("this embedding model has no `{0}` (EmbeddingGemma's Dense projections): convert it with llama.cpp's convert_hf_to_gguf.py --sentence-transformers-dense-modules, or load its sentence-transformers directory")]
    MissingProjection(&'static str),
    /// Text was asked of an embedding model.
    #[error("this is an embedding model: it does not generate text (use `hearth embed` or /v1/embeddings)")]
    NotGenerative,
    /// Embeddings were asked of a generative model.
    #[error("this model does not embed (it generates text; use an embedding model such as EmbeddingGemma)")]
    NotEmbedding,
    /// A multi-sequence batch is malformed (an empty sequence, or more rows
    /// than the buffers hold).
    #[error("bad batch: {0}")]
    BadBatch(String),
}

/// Options for loading.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Worker threads for the kernels.
    pub threads: usize,
    /// Activation precision of the matrix products.
    pub precision: Precision,
    /// How KV caches store keys and values; `None`: f16 with `Quantized`
    /// (as llama.cpp), f32 with `Exact`.
    pub kv_cache: Option<KvType>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            threads: threads::default_threads(),
            precision: Precision::default(),
            kv_cache: None,
        }
    }
}

/// A loaded model: configuration, weights (borrowed from the mapped file) and
/// the thread pool its kernels run on. Shared read-only between sessions.
pub struct Model {
    config: Config,
    weights: Weights,
    /// Each layer's rotary embedding (bases, scales and divisors differ).
    ropes: Vec<nn::Rope>,
    file: Arc<GgufFile>,
    pool: ThreadPool,
    precision: Precision,
    kv_type: KvType,
    /// The only rows of the output head computed (see [`Model::limit_head`]).
    head_subset: Option<logits::HeadSubset>,
    /// The decode layout still being made after the load, if it is.
    layout: Option<layout::Background>,
}

/// When a load makes the decode layout (the x86 kernels' rows interleaved
/// by eight; the same bits either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LayoutTiming {
    /// Before the load returns: every product reads it from the first.
    #[default]
    AtLoad,
    /// On a background thread after the load: the first prompt does not
    /// wait for it, and products read the file's layout until each
    /// matrix's is made (a server loading a model for a request waiting).
    AfterLoad,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("config", &self.config)
            .finish()
    }
}

impl Model {
    /// Open a GGUF file and bind its weights. (Hugging Face checkpoint
    /// directories are converted to GGUF by the `hf` crate first; the engine's
    /// loader does both.)
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self, ModelError> {
        Self::from_gguf(Arc::new(GgufFile::open(path.as_ref())?), opts)
    }

    /// Bind the weights of an already opened file.
    pub fn from_gguf(file: Arc<GgufFile>, opts: &LoadOptions) -> Result<Self, ModelError> {
        Self::from_gguf_timed(file, opts, LayoutTiming::AtLoad)
    }

    /// Bind the weights of an already opened file, making the decode
    /// layout when `timing` says.
    pub fn from_gguf_timed(
        file: Arc<GgufFile>,
        opts: &LoadOptions,
        timing: LayoutTiming,
    ) -> Result<Self, ModelError> {
        let config = Config::from_gguf(&file)?;
        let mut weights = Weights::bind(&file, &config)?;
        let with_head = config.pooling.is_none();
        // Exact products dequantize each weight row to f32, which the
        // file's layout serves faster than the integer kernels' one.
        let interleave = layout::enabled() && opts.precision == Precision::Quantized;
        let background = match (interleave, timing) {
            (false, _) => None,
            (true, LayoutTiming::AtLoad) => {
                layout::interleave(&mut weights, &file, with_head)?;
                None
            }
            (true, LayoutTiming::AfterLoad) => {
                layout::interleave_later(&mut weights, &file, with_head)
            }
        };
        let ropes = config
            .layers
            .iter()
            .zip(&weights.layers)
            .map(|(l, w)| {
                nn::Rope::new(l.rope_dims, l.rope_base, l.rope_scale)
                    .with_divisors(w.attention.rope_freqs.clone())
            })
            .collect();
        // An embedding model caches nothing, so its keys stay f32.
        let kv_type = match config.causal {
            true => opts.kv_cache.unwrap_or(KvType::default_for(opts.precision)),
            false => KvType::F32,
        };
        let cached = config.layers.iter().filter(|l| l.kv_source.is_none());
        if let Some(width) = cached
            .flat_map(|l| [l.head_dim, l.value_dim])
            .find(|&w| !kv_type.holds_width(w))
        {
            return Err(ModelError::KvCacheType {
                ty: kv_type.name(),
                width,
            });
        }
        Ok(Self {
            head_subset: None,
            layout: background,
            config,
            weights,
            ropes,
            file,
            pool: ThreadPool::new(opts.threads.max(1)),
            precision: opts.precision,
            kv_type,
        })
    }

    /// Whether the decode layout is still being made after the load
    /// ([`LayoutTiming::AfterLoad`]).
    pub fn layout_pending(&self) -> bool {
        self.layout
            .as_ref()
            .is_some_and(layout::Background::pending)
    }

    /// The thread pool the kernels run on (other encoders of the same
    /// request, such as a vision tower, share it).
    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The underlying file (metadata for the tokenizer, `inspect`).
    pub fn gguf(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// Activation precision in use.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Where this model's weight products run: its file, pool and
    /// precision, with the adapters of the batch's rows where the product
    /// is one an adapter may change (a layer's attention and MLP).
    pub(crate) fn products<'a>(
        &'a self,
        adapters: Option<&'a nn::RowAdapters>,
    ) -> nn::Products<'a> {
        nn::Products {
            file: &self.file,
            pool: &self.pool,
            precision: self.precision,
            adapters,
        }
    }

    /// How this model's KV caches store keys and values.
    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Worker threads in use.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The thread pool's counters so far: parallel operations, and the time
    /// its threads spent working and waiting.
    pub fn pool_stats(&self) -> threads::PoolStats {
        self.pool.stats()
    }

    /// Compute logits for token `ids` only, the others -inf: a draft
    /// model's head, whose greedy guess need only be likely, at a fraction
    /// of the whole vocabulary's cost. Their rows of the output head are
    /// copied out of the file once, here.
    pub fn limit_head(&mut self, ids: &[u32]) -> Result<(), ModelError> {
        self.head_subset = Some(logits::HeadSubset::new(
            &self.weights.output.weight.matrix(&self.file)?,
            ids,
        ));
        Ok(())
    }

    /// Turns the thread pool's profiling by call site on or off (see
    /// [`threads::ThreadPool::set_profiling`]).
    pub fn set_profiling(&self, on: bool) {
        self.pool.set_profiling(on);
    }

    /// The pool's profile by call site since the last reading, most time
    /// first (see [`threads::ThreadPool::profile`]).
    pub fn profile(&self) -> Vec<(String, threads::SiteProfile)> {
        self.pool.profile()
    }

    /// Bytes of weights the forward pass reads.
    pub fn weight_bytes(&self) -> u64 {
        self.file.tensors().iter().map(|t| t.n_bytes).sum()
    }

    /// Bytes of weights one decode step reads: every tensor but the tables
    /// it only gathers a row from (per-layer token embeddings, and the token
    /// embeddings when a separate output head exists; with tied embeddings
    /// the head reads the whole table).
    pub fn decode_bytes(&self) -> u64 {
        let tensors = self.file.tensors();
        let untied = tensors.iter().any(|t| t.name == "output.weight");
        tensors
            .iter()
            .filter(|t| {
                !(t.name.starts_with("per_layer_token_embd")
                    || (untied && t.name == "token_embd.weight"))
            })
            .map(|t| t.n_bytes)
            .sum()
    }

    /// Bytes of cached keys and values a decode step at position `pos`
    /// reads (see [`KvCache::bytes_read_at`]).
    pub fn kv_bytes_read_at(&self, pos: usize) -> u64 {
        KvCache::bytes_read_at(&self.config, pos, self.kv_type) as u64
    }

    /// Bytes a session of `n_ctx` positions with prefill batches of up to
    /// `max_batch` tokens needs: the KV cache plus the scratch buffers.
    pub fn session_bytes(&self, n_ctx: usize, max_batch: usize) -> usize {
        KvCache::bytes_for(&self.config, n_ctx, self.kv_type)
            + Scratch::bytes_for(&self.config, n_ctx, max_batch, self.pool.threads())
    }

    /// A fresh KV cache.
    pub fn new_cache(&self, n_ctx: usize) -> KvCache {
        KvCache::new(&self.config, n_ctx, self.kv_type)
    }

    /// A new scratch area for batches of up to `max_batch` tokens.
    pub fn new_scratch(&self, n_ctx: usize, max_batch: usize) -> Scratch {
        Scratch::new(&self.config, n_ctx, max_batch, self.pool.threads())
    }
}
