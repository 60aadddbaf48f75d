//! The one loader: a path (GGUF file or Hugging Face checkpoint directory)
//! and [`RunOptions`] in, an [`Engine`] out. Every front end loads through
//! here, so a load option means the same thing in `complete`, `chat`, `serve`
//! and `bench`.

use crate::sampling::{Dry, SequenceBreakers, DEFAULT_SEQUENCE_BREAKERS};
use crate::session::Session;
use crate::{Constraint, Grammar, Grammars};
use crate::{EngineError, RunOptions};
use gguf::GgufFile;
use model::{KvCache, LoadOptions, Model};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokenizer::{ChatMessage, ChatOptions, ChatTemplate, Tokenizer};

/// A model with its tokenizer, chat template and resolved run options,
/// shared by sessions.
pub struct Engine {
    pub(crate) model: Arc<Model>,
    pub(crate) tokenizer: Arc<Tokenizer>,
    pub(crate) template: Arc<ChatTemplate>,
    options: RunOptions,
    load_time: Duration,
    /// The token trie for constrained decoding, built on first use (it
    /// indexes the whole vocabulary; unconstrained runs never pay for it).
    grammars: OnceLock<Result<Arc<Grammars>, String>>,
    /// The vision tower, when the engine reads images.
    pub(crate) vision: Option<Arc<crate::images::Vision>>,
    /// The audio tower, when the engine hears.
    pub(crate) audio: Option<Arc<crate::audio::Hearing>>,
    /// llama.cpp's default DRY sequence breakers as this vocabulary's
    /// tokens, made on first use.
    default_breakers: OnceLock<Arc<SequenceBreakers>>,
    /// The LoRA adapters loaded and their current scales.
    pub(crate) lora: Arc<crate::lora::LoraSet>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.model)
            .field("options", &self.options)
            .finish()
    }
}

/// The GGUF at `path`, or the in-memory GGUF the `hf` crate converts the
/// checkpoint directory at `path` into.
pub fn open_model_file(path: &Path) -> Result<GgufFile, EngineError> {
    if path.is_dir() {
        let writer = hf::convert_dir(path)?;
        Ok(GgufFile::from_bytes(writer.to_bytes())?)
    } else {
        Ok(GgufFile::open(path)?)
    }
}

impl Engine {
    /// Load a GGUF model (or a Hugging Face checkpoint directory), requantize
    /// it when `opts.quant` asks, and build its tokenizer.
    pub fn load(path: impl AsRef<Path>, opts: &RunOptions) -> Result<Self, EngineError> {
        let start = Instant::now();
        opts.validate()?;
        let file = open_model_file(path.as_ref())?;
        let file = match &opts.quant {
            Some(name) => requantize(&file, name)?,
            None => file,
        };
        let mut engine = Self::from_file(Arc::new(file), opts)?;
        // A projector file may hold a vision tower, an audio tower (Gemma 4's
        // `gemma4a`) or both; a multimodal checkpoint brings its own.
        let (mmproj_vision, mmproj_audio) = match &opts.mmproj {
            Some(p) => {
                let file = Arc::new(gguf::GgufFile::open(p)?);
                let vision = file.get_bool("clip.has_vision_encoder") != Some(false);
                let audio = media::AudioTower::in_mmproj(&file).then_some(file);
                if !vision && audio.is_none() {
                    return Err(EngineError::InvalidOptions(format!(
                        "{} holds neither a vision nor an audio encoder",
                        p.display()
                    )));
                }
                (vision.then_some(p.as_path()), audio)
            }
            None => (None, None),
        };
        let vision = match mmproj_vision {
            Some(p) => Some(p),
            None if opts.mmproj.is_none() && hf::has_vision_tower(path.as_ref()) => {
                Some(path.as_ref())
            }
            None => None,
        };
        if let Some(p) = vision {
            let mut vision = crate::images::Vision::open(p)?;
            if let Some(n) = opts.image_tokens {
                vision.tower.set_max_tokens(n)?;
            }
            engine.attach_vision(vision, Some(path.as_ref()))?;
        } else if opts.image_tokens.is_some() {
            return Err(EngineError::InvalidOptions(
                "--image-tokens needs a vision projector (--mmproj)".into(),
            ));
        }
        if let Some(file) = mmproj_audio {
            engine.attach_audio(media::AudioTower::from_gguf(file)?)?;
        } else if hf::has_audio_tower(path.as_ref()) {
            // A Gemma 3n or Gemma 4 checkpoint brings its audio tower.
            engine.attach_audio(crate::audio::convert_audio_dir(path.as_ref())?)?;
        }
        engine.load_adapters(&opts.lora)?;
        engine.load_time = start.elapsed();
        Ok(engine)
    }

    /// Read images with `vision`, whose projection must land in this
    /// model's width. `model_path` (the text model's file or checkpoint
    /// directory) says, on Gemma 4, whether an image's tokens see each other
    /// both ways.
    pub(crate) fn attach_vision(
        &mut self,
        mut vision: crate::images::Vision,
        model_path: Option<&Path>,
    ) -> Result<(), EngineError> {
        let (width, hidden) = (
            vision.tower.config().text_hidden,
            self.model.config().hidden,
        );
        let arch = self.model.config().arch;
        let family_fits = match vision.tower.config().projector {
            media::Projector::Gemma3 => arch == model::Arch::Gemma3,
            media::Projector::Gemma4 => arch == model::Arch::Gemma4,
        };
        if !family_fits {
            return Err(EngineError::InvalidOptions(format!(
                "the vision projector is {:?}'s, but the model is {}: it belongs to another model",
                vision.tower.config().projector,
                arch.name()
            )));
        }
        vision.bidirectional = match arch {
            // transformers: `use_bidirectional_attention == "vision"` in the
            // checkpoint's config; a GGUF carries no such key, so llama.cpp's
            // rule stands in: E2B and E4B (widths 1536 and 2560) stay causal.
            model::Arch::Gemma4 => match model_path.and_then(hf::image_attention_bidirectional) {
                Some(b) => b,
                None => hidden != 1536 && hidden != 2560,
            },
            _ => true,
        };
        if width != hidden {
            return Err(EngineError::InvalidOptions(format!(
                "the vision projector maps images into width {width}, but the model's is {hidden}: \
                 it belongs to another model"
            )));
        }
        self.vision = Some(Arc::new(vision));
        Ok(())
    }

    /// Build an engine on an already opened (or in-memory) GGUF, as it is
    /// (`opts.quant` is for [`Engine::load`]).
    pub fn from_file(file: Arc<GgufFile>, opts: &RunOptions) -> Result<Self, EngineError> {
        let start = Instant::now();
        opts.validate()?;
        let load = LoadOptions {
            threads: opts.threads_or_default(),
            precision: opts.precision,
            kv_cache: opts.kv_cache,
        };
        // The tokenizer's index (a quarter of a million pieces on Gemma 3)
        // is built beside the weights' binding: a model loaded for a
        // waiting request answers sooner.
        let (model, tokenizer) = std::thread::scope(|scope| {
            let tokenizer = scope.spawn(|| Tokenizer::from_gguf(&file));
            let model = Model::from_gguf_timed(Arc::clone(&file), &load, opts.layout);
            let tokenizer = tokenizer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (model, tokenizer)
        });
        let (mut model, mut tokenizer) = (model?, tokenizer?);
        let options = RunOptions {
            kv_cache: Some(model.kv_type()),
            ..opts.resolved(model.config().context_length)
        };
        if let Some(n) = opts.draft_vocab {
            model.limit_head(&crate::speculate::draft_vocab(&tokenizer, n))?;
        }
        let mut template = tokenizer.chat_template();
        template.set_step_limit(options.limits.template_steps);
        // What the template closes an assistant turn with ends generations too.
        tokenizer.add_template_eog(&template);
        let mut engine = Self {
            model: Arc::new(model),
            tokenizer: Arc::new(tokenizer),
            template: Arc::new(template),
            options,
            load_time: start.elapsed(),
            grammars: OnceLock::new(),
            vision: None,
            audio: None,
            default_breakers: OnceLock::new(),
            lora: Arc::default(),
        };
        let mut dry = engine.options.sampling.dry.clone();
        engine.bind_dry(&mut dry);
        engine.options.sampling.dry = dry;
        Ok(engine)
    }

    /// Make `dry`'s sequence breakers this model's tokens, when DRY is on
    /// (llama.cpp's default four are made once and shared).
    pub fn bind_dry(&self, dry: &mut Dry) {
        if !dry.enabled() {
            return;
        }
        dry.breakers = if dry.sequence_breakers == DEFAULT_SEQUENCE_BREAKERS {
            let made = self
                .default_breakers
                .get_or_init(|| Arc::new(self.resolve_breakers(&dry.sequence_breakers)));
            Arc::clone(made)
        } else {
            Arc::new(self.resolve_breakers(&dry.sequence_breakers))
        };
    }

    fn resolve_breakers(&self, texts: &[String]) -> SequenceBreakers {
        let t = &self.tokenizer;
        SequenceBreakers::resolve(
            texts,
            t.vocab_size(),
            |id| t.token_bytes(id, true).into_owned(),
            |text| t.encode(text, false, false),
        )
    }

    /// The trie and parser factory for constrained decoding over this
    /// model's tokenizer (built on the first call, then shared).
    pub fn grammars(&self) -> Result<Arc<Grammars>, EngineError> {
        self.grammars
            .get_or_init(|| {
                Grammars::new(Arc::clone(&self.tokenizer), self.model.config().vocab)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(EngineError::InvalidGrammar)
    }

    /// Compile `grammar` for a generation on this engine.
    pub fn constraint(&self, grammar: &Grammar) -> Result<Constraint, EngineError> {
        self.grammars()?
            .compile(grammar, self.options.limits.grammar_bytes)
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The chat template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Whether the model's decode layout is still being made after its
    /// load (see [`RunOptions::layout`]).
    pub fn layout_pending(&self) -> bool {
        self.model.layout_pending()
    }

    /// The run options with every default resolved.
    pub fn options(&self) -> &RunOptions {
        &self.options
    }

    /// The options that change the numbers a prompt gives (precision, the
    /// cache's element type, requantization, image tokens), as text: a
    /// stored prompt state serves only an engine with the same ones.
    pub fn numbers_fingerprint(&self) -> String {
        let o = &self.options;
        format!(
            "precision {:?}, cache {:?}, quant {:?}, image tokens {:?}",
            o.precision, o.kv_cache, o.quant, o.image_tokens
        )
    }

    /// How long `load` took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// The context size of a session.
    pub fn n_ctx(&self) -> usize {
        self.options.ctx.unwrap_or(1)
    }

    /// The prefill batch size.
    pub(crate) fn batch_for(&self, n_ctx: usize) -> usize {
        self.options.batch.unwrap_or(1).min(n_ctx).max(1)
    }

    /// The model's `general.name`, if it has one.
    pub fn model_name(&self) -> Option<&str> {
        self.model.gguf().get_str("general.name")
    }

    /// The weights' llama-quantize type (`Q4_K_M`, `Q8_0`, ...), from the
    /// file's `general.file_type` (set by a requantization at load too).
    pub fn weight_type(&self) -> Option<&'static str> {
        let id = self.model.gguf().get("general.file_type")?.as_u64()?;
        convert::FileType::from_llama_ftype(u32::try_from(id).ok()?).map(|t| t.name())
    }

    /// A new session with the engine's context.
    pub fn session(&self) -> Session {
        self.session_with_ctx(self.n_ctx())
    }

    /// A new session with a context of `n_ctx` tokens (scoring a given
    /// sequence, a perplexity chunk, a benchmark).
    pub fn session_with_ctx(&self, n_ctx: usize) -> Session {
        let n_ctx = n_ctx.max(1);
        self.session_of(n_ctx, self.batch_for(n_ctx))
    }

    /// A session of the engine's context for a server's slot: its own
    /// buffers hold a decode step or a speculating generation's verifying
    /// batch, and its prompts go in through buffers the slots share
    /// ([`Engine::prefill_scratch`], [`Session::prefill_in`]), so that
    /// many slots do not each keep a prefill's worth of buffers.
    pub fn slot_session(&self) -> Session {
        let n_ctx = self.n_ctx();
        self.session_of(n_ctx, self.slot_rows(n_ctx))
    }

    /// Buffers for prompts of the engine's context in batches of its
    /// size, lent in turn to [`Engine::slot_session`]s.
    pub fn prefill_scratch(&self) -> model::Scratch {
        let n_ctx = self.n_ctx();
        self.model.new_scratch(n_ctx, self.batch_for(n_ctx))
    }

    /// A session of `n_ctx` tokens whose buffers hold `max_batch` rows.
    pub(crate) fn session_of(&self, n_ctx: usize, max_batch: usize) -> Session {
        let mut cache = self.model.new_cache(n_ctx);
        if let Ok(adapters) = self.adapters_for(None) {
            cache.use_adapters(&adapters);
        }
        Session {
            model: Arc::clone(&self.model),
            tokenizer: Arc::clone(&self.tokenizer),
            cache,
            scratch: self.model.new_scratch(n_ctx, max_batch),
            tokens: Vec::with_capacity(n_ctx),
            images: Vec::new(),
            drafter: None,
        }
    }

    /// Rows a slot session's own buffers take: a draft and the token
    /// before it, or the engine's batch where that is smaller.
    fn slot_rows(&self, n_ctx: usize) -> usize {
        self.batch_for(n_ctx).min(crate::speculate::MAX_DRAFT + 1)
    }

    /// Bytes a session of the engine's context takes (KV cache and buffers).
    pub fn session_bytes(&self) -> usize {
        let n_ctx = self.n_ctx();
        self.model.session_bytes(n_ctx, self.batch_for(n_ctx))
    }

    /// Bytes `slots` [`Engine::slot_session`]s and the prefill buffers
    /// they share take.
    pub fn serving_bytes(&self, slots: usize) -> usize {
        let n_ctx = self.n_ctx();
        let full = self.model.session_bytes(n_ctx, self.batch_for(n_ctx));
        let kv = self.kv_bytes();
        slots * self.model.session_bytes(n_ctx, self.slot_rows(n_ctx)) + full.saturating_sub(kv)
    }

    /// Bytes the KV cache of a session takes.
    pub fn kv_bytes(&self) -> usize {
        KvCache::bytes_for(self.model.config(), self.n_ctx(), self.model.kv_type())
    }

    /// A conversation as the prompt text the chat template makes of it, as
    /// llama.cpp's `/apply-template` gives it: without a BOS the template
    /// wrote in front when the tokenizer adds one itself.
    pub fn chat_prompt(
        &self,
        messages: &[ChatMessage],
        options: &ChatOptions<'_>,
    ) -> Result<String, EngineError> {
        let text = self.template.render_with(messages, options)?;
        let bos = self
            .tokenizer
            .bos_id()
            .and_then(|id| self.tokenizer.token_text(id));
        match bos {
            Some(b) if self.tokenizer.add_bos() && !b.is_empty() && text.starts_with(b) => {
                Ok(text[b.len()..].to_string())
            }
            _ => Ok(text),
        }
    }

    /// The thought channel's markers when this model thinks: its template
    /// has a thinking switch and its vocabulary the channel tokens
    /// (`<|channel>`, `<channel|>`). `None` for models that do not think.
    pub fn thinking(&self, budget: Option<usize>) -> Option<crate::Thinking> {
        if !self.template.supports_thinking() {
            return None;
        }
        let open = self.tokenizer.token_id("<|channel>")?;
        let close = self.tokenizer.token_id("<channel|>")?;
        Some(crate::Thinking {
            open,
            close,
            budget,
        })
    }
}

/// `file` requantized to the llama-quantize type `name`, in memory.
fn requantize(file: &GgufFile, name: &str) -> Result<GgufFile, EngineError> {
    let ftype = crate::options::quant_type(name)?;
    let quantized = convert::quantize_gguf(file, ftype)
        .map_err(|e| EngineError::InvalidOptions(format!("cannot quantize to {name}: {e}")))?;
    Ok(GgufFile::from_bytes(quantized.to_bytes())?)
}
