//! Images and sound in. Sound: clips decoded and resampled ([`Clip`]),
//! log-mel features ([`LogMel`]) and the audio towers of Gemma 3n and Gemma 4
//! ([`AudioTower`]). Images: decoding and the processor's preprocessing ([`Picture`]), the
//! vision towers that turn pixels into embeddings in a text model's width
//! ([`VisionTower`]), and a cache of embeddings by content
//! ([`EmbeddingCache`]), so a second question about the same picture costs
//! no encoder time.
//!
//! Each tower has its own module (`vision::{siglip, gemma4}`,
//! `audio::{gemma3n, gemma4}` over the shared `audio::conformer`); weights
//! are bound by name in `weights`, and every operation — products, norms,
//! softmax, attention, activations — comes from the ops layer the text
//! model uses too (`nn`, over `quant`'s kernels and the `threads` pool).
//! This crate knows nothing about chat or HTTP.

mod audio;
mod cache;
mod picture;
mod vision;
mod weights;

pub use audio::{
    AudioEmbedding, AudioTower, Clip, Gemma3nAudioConfig, Gemma3nAudioTower, Gemma4AudioConfig,
    Gemma4AudioTower, LogMel, MelFloor, MelSettings, AUDIO_KEY_PREFIX, DEFAULT_MAX_CLIP_SECONDS,
    GEMMA3N_AUDIO_ARCH, GEMMA4_AUDIO_ARCH, MAX_SECONDS, SAMPLE_RATE,
};
pub use cache::{content_key, EmbeddingCache};
pub use picture::{Picture, DEFAULT_MAX_DECODE_BYTES, DEFAULT_MAX_PIXELS, MAX_SIDE};
pub use vision::{
    Pixels, Projector, VisionConfig, VisionTower, GEMMA4_DEFAULT_TOKENS, GEMMA4_TOKEN_RANGE,
    MAX_TOKENS_KEY,
};

/// Why a picture or a clip cannot be read or encoded.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The bytes are not a picture we decode.
    #[error("cannot decode the image: {0}")]
    Decode(String),
    /// The bytes are not a clip we decode, or its features do not fit the
    /// encoder (the message says which).
    #[error("{0}")]
    Audio(String),
    /// The picture is larger than we accept.
    #[error("the image is {width}x{height}; the most accepted is {max} pixels on a side")]
    TooLarge {
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
        /// The limit per side.
        max: u32,
    },
    /// The picture has more pixels than the limit it was decoded under.
    #[error("the image is {width}x{height} ({} pixels); the most accepted is {max} pixels", u64::from(*.width) * u64::from(*.height))]
    TooManyPixels {
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
        /// The limit on width times height.
        max: u64,
    },
    /// Decoding the picture or clip would take more memory than the bound
    /// it was decoded under (worked out from its header, before decoding).
    #[error("decoding it would take about {} MiB of memory; the most allowed is {} MiB", .needed >> 20, .max >> 20)]
    TooMuchMemory {
        /// What it would take, in bytes.
        needed: u64,
        /// The bound, in bytes.
        max: u64,
    },
    /// The clip is longer than the limit it was decoded under.
    #[error("the audio clip is {seconds:.1} s long; the most accepted is {max} s")]
    TooLong {
        /// Its length.
        seconds: f64,
        /// The limit in seconds.
        max: u32,
    },
    /// The projector file's metadata is missing or inconsistent.
    #[error("bad projector metadata: {0}")]
    Metadata(String),
    /// Something the file asks for that is not implemented.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A required tensor is absent.
    #[error("projector tensor `{0}` is missing")]
    MissingTensor(String),
    /// A tensor's shape does not fit the configuration.
    #[error("projector tensor `{name}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor.
        name: String,
        /// Its dimensions.
        found: Vec<u64>,
        /// What the configuration implies.
        expected: Vec<u64>,
    },
    /// The container is unreadable.
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    /// A kernel refused its operands.
    #[error(transparent)]
    Quant(#[from] quant::QuantError),
}
