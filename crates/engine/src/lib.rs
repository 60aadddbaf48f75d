//! Sessions over a loaded model: the one loader and its [`RunOptions`],
//! prompt processing with a prefix cache, sampling, stop conditions and
//! streaming; plus the scoring tools built on them (per-position logits,
//! perplexity) and throughput benchmarks.
//!
//! Front ends talk to this crate only; it hides kernels, tensors and file
//! formats.

mod audio;
mod batch;
pub mod bench;
mod chat_model;
mod constraint;
mod decoding;
mod embed;
mod gbnf;
mod generate;
mod images;
mod infill;
mod inspect;
mod load;
mod lora;
mod options;
mod prompt;
mod request;
mod sampling;
mod saved;
mod score;
mod session;
mod shared_chat;
mod speculate;
mod thinking;
pub mod tools;
pub mod transcribe;

pub use audio::{place_audio, AUDIO_MARKER, GEMMA4_AUDIO_MARKER};
pub use batch::{BatchDecoder, BatchItem};
pub use chat_model::{ChatModel, LocalChat, ModelCall, ModelReply};
pub use constraint::{
    Constraint, ConstraintStats, Grammar, Grammars, OrInstead, MAX_GRAMMAR_BYTES, MAX_GRAMMAR_DEPTH,
};
pub use decoding::{Decoding, Generation};
pub use embed::{matryoshka, rank, EmbedInput, EmbedOptions, EmbedTask, Embeddings, Ranked};
pub use gbnf::to_lark as gbnf_to_lark;
pub use generate::{FinishReason, GenerateOptions, Step, TokenEvent};
pub use images::{
    media_message, place_images, MediaEmbedding, PromptMedia, GEMMA4_IMAGE_MARKER, IMAGE_MARKER,
    MEDIA_MARKER,
};
pub use infill::{Infill, InfillFile, InfillLayout};
pub use inspect::{inspect, load_tokenizer, towers, FileSummary, MetaEntry, TensorEntry, Towers};
pub use load::{open_model_file, Engine};
pub use lora::{merge_adapters, LoraInfo, LoraSpec};
pub use model::{
    ring_slack, saved_rows, KvType, LayoutTiming, Precision, SavedKv, SavedLayerRows, Scratch,
};
pub use nn::Adapters;
pub use options::{InputLimits, RunOptions, DEFAULT_BATCH, MAX_DEFAULT_CTX};
pub use prompt::{Prompt, PromptInput, PromptRequest};
pub use request::GenerationRequest;
pub use sampling::{
    argmax, Dry, Rng, Sampler, SamplingParams, SequenceBreakers, DEFAULT_SEQUENCE_BREAKERS,
    MAX_BREAKERS, MAX_BREAKER_BYTES,
};
pub use saved::{usable_prefix, MediaSpan, PromptStore, SavedPrompt};
pub use score::{logsumexp, token_logprob, top_k, PerplexityReport, TokenLogprob};
pub use session::Session;
pub use shared_chat::SharedChat;
pub use speculate::{
    ngram_draft, DraftModel, NgramOptions, SpecStats, Speculation, DEFAULT_DRAFT,
    DEFAULT_DRAFT_P_MIN, DRAFT_HEAD_ROWS, MAX_DRAFT,
};
pub use thinking::Thinking;
pub use tokenizer::{ChatMessage, ChatOptions, ChatTemplate, StreamDecoder, Tokenizer};

/// Why loading a model or serving a request failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model file is unreadable or malformed.
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    /// A Hugging Face checkpoint directory could not be converted.
    #[error(transparent)]
    Checkpoint(#[from] hf::HfError),
    /// Loading or running the model failed.
    #[error(transparent)]
    Model(#[from] model::ModelError),
    /// The tokenizer could not be built or a template failed.
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokenizerError),
    /// A run option is invalid (a zero size, an unknown quantization type).
    #[error("invalid option: {0}")]
    InvalidOptions(String),
    /// The prompt does not fit the context.
    #[error("prompt of {prompt} tokens does not fit the context of {n_ctx} tokens (leave room for at least one generated token)")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Context size.
        n_ctx: usize,
    },
    /// The request itself is invalid (bad sampling parameter, empty prompt…).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A schema or grammar is invalid, unsupported, too large or matches
    /// nothing; the message names the problem.
    #[error("invalid {0}")]
    InvalidGrammar(String),
    /// A schema or grammar, or what rewriting a schema makes of it, is
    /// larger than [`InputLimits::grammar_bytes`]; the message names both.
    #[error("too large a {0}")]
    GrammarTooLarge(String),
    /// Constrained decoding failed during a generation (a dead end in the
    /// grammar that should not happen).
    #[error("constrained decoding failed: {0}")]
    Constraint(String),
    /// The request's grammar passed one of the parser's limits while it
    /// decoded (its branching, or the work of one token's mask): the
    /// grammar's fault, not the server's.
    #[error(
        "the grammar passed the parser's limits while decoding ({0}); a schema with fewer \
         optional properties or alternatives stays within them"
    )]
    GrammarLimit(String),
    /// An image could not be read, or the vision projector not loaded.
    #[error(transparent)]
    Media(#[from] media::MediaError),
}
