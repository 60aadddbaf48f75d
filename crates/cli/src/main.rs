//! `hearth`: run Gemma models locally on the CPU.

mod bench;
mod bench_embed;
mod bench_spec;
mod cache;
mod chat;
mod chat_session;
mod commands;
mod convert;
mod embed;
mod eval_cmd;
mod health;
mod rerank;
mod serve;
mod telegram;
mod transcribe;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

/// Hearth: a CPU-first local LLM runtime.
#[derive(Parser, Debug)]
#[command(name = "hearth", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every command that runs the model takes.
#[derive(Args, Debug, Clone)]
struct ModelArgs {
    /// Model: a GGUF path, a known alias (gemma3-270m) or hf:OWNER/REPO/FILE.gguf.
    #[arg(short, long, default_value = "gemma3-270m")]
    model: String,
    /// Worker threads (default: physical cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Keep activations in f32 in matrix products (slower; no 8-bit activation rounding).
    #[arg(long)]
    precise: bool,
    /// How the KV cache stores keys and values: f16 (half the memory, as
    /// llama.cpp), q8_0 (about a quarter, as llama.cpp's `-ctk q8_0 -ctv
    /// q8_0`) or f32 (default: f16, or f32 with --precise).
    #[arg(long, value_name = "TYPE")]
    kv_cache: Option<engine::KvType>,
    /// Requantize the weights at load (q8_0, q4_k_m, ...): for Hugging Face
    /// checkpoint directories, which otherwise run in their stored F32/BF16.
    #[arg(long, value_name = "TYPE")]
    quant: Option<String>,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(short = 'c', long = "ctx")]
    ctx: Option<usize>,
    /// Most prompt tokens per forward pass (default: 512).
    #[arg(long)]
    batch: Option<usize>,
    /// Projector (llama.cpp's mmproj GGUF) for --image, and on Gemma 4 for
    /// --audio when it holds the audio encoder: a path, or an
    /// `hf:OWNER/REPO/FILE` spec fetched with `hearth pull`; a checkpoint
    /// directory with its towers needs none.
    #[arg(long, value_name = "FILE")]
    mmproj: Option<std::path::PathBuf>,
    /// Gemma 4: the most soft tokens one image may take, 70 to 1120
    /// (default: the checkpoint processor's budget, else 280). More tokens
    /// keep more detail and cost more time.
    #[arg(long, value_name = "N")]
    image_tokens: Option<usize>,
    /// A LoRA adapter to run beside the weights (not merged): a GGUF
    /// adapter (llama.cpp's convert_lora_to_gguf.py) or a PEFT adapter
    /// directory, with an optional scale (default 1; 0 loads it off);
    /// repeat for several (ids 0, 1, ... in order).
    #[arg(long, value_name = "FILE[:SCALE]")]
    lora: Vec<engine::LoraSpec>,
}

/// Images and audio clips for the prompt, each placed where it says its
/// marker (`<start_of_image>`, `<__media__>` or on Gemma 4 `<|image|>`; the
/// audio markers for clips; one marker per item, in order), else before the
/// prompt text.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct MediaArgs {
    /// An image file (PNG, JPEG, WebP); repeat for several.
    #[arg(long = "image", value_name = "FILE")]
    pub(crate) images: Vec<std::path::PathBuf>,
    /// An audio clip (WAV, MP3, Ogg Vorbis; the first 30 s) for a model
    /// that hears (a Gemma 3n checkpoint directory), placed where the
    /// prompt says `<audio_soft_token>`, else before it; repeat for several.
    #[arg(long = "audio", value_name = "FILE")]
    pub(crate) audio: Vec<std::path::PathBuf>,
}

/// Sampling flags shared by `complete`, `chat` and `serve` (for `serve`, the
/// defaults of requests that set none). Unset flags take the engine's
/// defaults ([`engine::SamplingParams::default`]).
#[derive(Args, Debug, Clone)]
struct SampleArgs {
    /// Temperature; 0 is greedy [default: 0.8].
    #[arg(long)]
    temp: Option<f32>,
    /// Top-k truncation, 0 = off [default: 40].
    #[arg(long)]
    top_k: Option<usize>,
    /// Top-p (nucleus) truncation, 1 = off [default: 0.95].
    #[arg(long)]
    top_p: Option<f32>,
    /// Min-p truncation, 0 = off [default: 0.05].
    #[arg(long)]
    min_p: Option<f32>,
    /// Repetition penalty, 1 = off [default: 1].
    #[arg(long)]
    repeat_penalty: Option<f32>,
    /// Tokens the repetition penalty looks back over [default: 64].
    #[arg(long)]
    repeat_last_n: Option<usize>,
    /// DRY: penalize a token that would extend a sequence already repeated
    /// in the recent context, 0 = off [default: 0].
    #[arg(long, value_name = "N")]
    dry_multiplier: Option<f32>,
    /// DRY's growth per token of repeat past the allowed length [default: 1.75].
    #[arg(long, value_name = "N")]
    dry_base: Option<f32>,
    /// Repeats up to this many tokens go unpenalized by DRY [default: 2].
    #[arg(long, value_name = "N")]
    dry_allowed_length: Option<usize>,
    /// Tokens DRY scans back over; -1 = the whole context, 0 = off [default: 64].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    dry_penalty_last_n: Option<i64>,
    /// A string that ends a repeat for DRY (repeatable; replaces the
    /// defaults: newline, colon, quote, asterisk; `none` for no breakers).
    #[arg(long, value_name = "STRING")]
    dry_sequence_breaker: Vec<String>,
    /// XTC: the chance per token of removing the likeliest choices, 0 = off [default: 0].
    #[arg(long, value_name = "N")]
    xtc_probability: Option<f32>,
    /// XTC: tokens at least this likely are its top choices [default: 0.1].
    #[arg(long, value_name = "N")]
    xtc_threshold: Option<f32>,
    /// Top-nσ: keep tokens within N standard deviations of the best logit,
    /// 0 or below = off [default: -1].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    top_nsigma: Option<f32>,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Speculative decoding: `ngram` guesses the next tokens from where the
    /// text's last few tokens appeared before (in the prompt or the output)
    /// and checks the guess in one batch. The output is the same; text that
    /// repeats its input comes faster. Off under a constraint or --think.
    #[arg(long, value_enum, value_name = "HOW")]
    spec: Option<SpecKind>,
    /// Speculative decoding with a smaller model of the same vocabulary
    /// guessing ahead (a GGUF path or alias). In `serve`, it drafts for
    /// the models that share its vocabulary.
    #[arg(long, value_name = "MODEL", conflicts_with = "spec")]
    draft: Option<String>,
    /// Most tokens guessed at a time, with --spec or --draft [default: 8].
    #[arg(long, value_name = "N")]
    draft_max: Option<usize>,
    /// With --draft: the least probability of a guess that is drafted; a
    /// round's draft ends at the first guess below it (0: every guess)
    /// [default: 0.5].
    #[arg(long, value_name = "P", value_parser = probability)]
    draft_p_min: Option<f32>,
}

/// A probability, 0 to 1.
pub(crate) fn probability(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("a probability between 0 and 1, got `{s}`")),
    }
}

/// The speculation `--spec HOW` and `--draft-max` ask for.
pub(crate) fn speculation(how: SpecKind, draft_max: Option<usize>) -> engine::Speculation {
    let d = engine::NgramOptions::default();
    match how {
        SpecKind::Ngram => engine::Speculation::Ngram(engine::NgramOptions {
            max_draft: draft_max.unwrap_or(d.max_draft),
            ..d
        }),
    }
}

/// `draft` (a path or alias) loaded as `target`'s draft model.
pub(crate) fn draft_speculation(
    draft: &str,
    target: &engine::Engine,
    draft_max: Option<usize>,
    p_min: Option<f32>,
) -> Result<engine::Speculation> {
    let threads = Some(target.model().threads());
    let unpaired = unpaired_draft(draft, threads, Some(target.n_ctx()), draft_max, p_min)?;
    Ok(unpaired.for_target(target)?)
}

/// `draft` (a path or alias) loaded with `threads` and a context of `ctx`,
/// as the drafter of targets that [`engine::Speculation::for_target`] pairs.
fn unpaired_draft(
    draft: &str,
    threads: Option<usize>,
    ctx: Option<usize>,
    draft_max: Option<usize>,
    p_min: Option<f32>,
) -> Result<engine::Speculation> {
    let path = store::resolve(draft)?;
    let opts = engine::RunOptions {
        threads,
        ctx,
        draft_vocab: Some(engine::DRAFT_HEAD_ROWS),
        ..engine::RunOptions::default()
    };
    let engine = engine::Engine::load(&path, &opts)
        .with_context(|| format!("cannot load the draft model {}", path.display()))?;
    let max_draft = draft_max.unwrap_or(engine::DEFAULT_DRAFT);
    let model = engine::DraftModel::unpaired(std::sync::Arc::new(engine), max_draft);
    let p_min = p_min.unwrap_or(engine::DEFAULT_DRAFT_P_MIN);
    Ok(engine::Speculation::Draft(model).with_p_min(p_min))
}

/// How `--spec` drafts.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpecKind {
    /// Prompt lookup: no second model.
    Ngram,
}

impl SampleArgs {
    /// The speculation `--spec` or `--draft` asks for, if any, for `target`
    /// (a draft model is loaded with its threads and context).
    fn speculation(&self, target: &engine::Engine) -> Result<Option<engine::Speculation>> {
        let threads = Some(target.model().threads());
        let unpaired = self.unpaired_speculation(threads, Some(target.n_ctx()))?;
        Ok(unpaired.map(|s| s.for_target(target)).transpose()?)
    }

    /// The speculation `--spec` or `--draft` asks for, if any, before it
    /// knows its target: a draft model is loaded with `threads` and a
    /// context of `ctx`, and paired with each model it drafts for by
    /// [`engine::Speculation::for_target`].
    fn unpaired_speculation(
        &self,
        threads: Option<usize>,
        ctx: Option<usize>,
    ) -> Result<Option<engine::Speculation>> {
        if let Some(draft) = &self.draft {
            let (max, p_min) = (self.draft_max, self.draft_p_min);
            return Ok(Some(unpaired_draft(draft, threads, ctx, max, p_min)?));
        }
        if self.spec.is_none() && self.draft_max.is_some() {
            bail!("--draft-max needs --spec or --draft");
        }
        if self.draft_p_min.is_some() {
            bail!("--draft-p-min needs --draft");
        }
        Ok(self.spec.map(|how| speculation(how, self.draft_max)))
    }

    /// The sampling these flags ask for, over the engine's defaults.
    fn params(&self) -> engine::SamplingParams {
        let d = engine::SamplingParams::default();
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        engine::SamplingParams {
            temperature: self.temp.unwrap_or(d.temperature),
            top_k: self.top_k.unwrap_or(d.top_k),
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
            repeat_last_n: self.repeat_last_n.unwrap_or(d.repeat_last_n),
            dry: self.dry(d.dry.clone()),
            xtc_probability: self.xtc_probability.unwrap_or(d.xtc_probability),
            xtc_threshold: self.xtc_threshold.unwrap_or(d.xtc_threshold),
            top_n_sigma: self.top_nsigma.unwrap_or(d.top_n_sigma),
            seed,
            ..d
        }
    }

    /// The DRY flags over `d`; like llama.cpp, a negative
    /// `--dry-penalty-last-n` means the whole context.
    fn dry(&self, d: engine::Dry) -> engine::Dry {
        let breakers = match self.dry_sequence_breaker.as_slice() {
            [] => d.sequence_breakers.clone(),
            [none] if none == "none" => Vec::new(),
            given => given.to_vec(),
        };
        engine::Dry {
            multiplier: self.dry_multiplier.unwrap_or(d.multiplier),
            base: self.dry_base.unwrap_or(d.base),
            allowed_length: self.dry_allowed_length.unwrap_or(d.allowed_length),
            penalty_last_n: self.dry_penalty_last_n.map_or(d.penalty_last_n, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            sequence_breakers: breakers,
            ..d
        }
    }
}

/// Output constraints shared by `complete`, `chat` and `bench`: at most one.
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub(crate) struct ConstraintArgs {
    /// Hold the output to the JSON Schema in FILE.
    #[arg(long, value_name = "FILE")]
    json_schema: Option<std::path::PathBuf>,
    /// Hold the output to the grammar in FILE: llguidance's Lark syntax when
    /// the name ends in `.lark`, else llama.cpp's GBNF.
    #[arg(long, value_name = "FILE")]
    grammar: Option<std::path::PathBuf>,
    /// Hold the output to a regular expression (the whole output matches).
    #[arg(long, value_name = "RE")]
    regex: Option<String>,
    /// The output is one JSON object.
    #[arg(long)]
    json_object: bool,
}

impl ConstraintArgs {
    /// The grammar asked for, read from its file; `None` when unconstrained.
    pub(crate) fn grammar(&self) -> anyhow::Result<Option<engine::Grammar>> {
        use anyhow::Context;
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
        };
        Ok(if let Some(p) = &self.json_schema {
            let schema = serde_json::from_str(&read(p)?)
                .with_context(|| format!("{} is not valid JSON", p.display()))?;
            Some(engine::Grammar::JsonSchema(schema))
        } else if let Some(p) = &self.grammar {
            let src = read(p)?;
            Some(if p.extension().is_some_and(|e| e == "lark") {
                engine::Grammar::Lark(src)
            } else {
                engine::Grammar::Gbnf(src)
            })
        } else if let Some(r) = &self.regex {
            Some(engine::Grammar::Regex(r.clone()))
        } else if self.json_object {
            Some(engine::Grammar::JsonObject)
        } else {
            None
        })
    }
}

impl ModelArgs {
    /// [`Self::run_options`] with the projector found as the model is: a
    /// path, or a pulled `hf:` spec.
    pub(crate) fn resolved_options(
        &self,
        sampling: engine::SamplingParams,
    ) -> anyhow::Result<engine::RunOptions> {
        let mut opts = self.run_options(sampling);
        if let Some(m) = &self.mmproj {
            opts.mmproj = Some(store::resolve(&m.to_string_lossy())?);
        }
        Ok(opts)
    }

    /// The one [`engine::RunOptions`] these flags (and `sampling`) make.
    fn run_options(&self, sampling: engine::SamplingParams) -> engine::RunOptions {
        engine::RunOptions {
            threads: self.threads,
            ctx: self.ctx,
            batch: self.batch,
            precision: if self.precise {
                engine::Precision::Exact
            } else {
                engine::Precision::Quantized
            },
            kv_cache: self.kv_cache,
            quant: self.quant.clone(),
            sampling,
            mmproj: self.mmproj.clone(),
            image_tokens: self.image_tokens,
            limits: engine::InputLimits::default(),
            draft_vocab: None,
            layout: engine::LayoutTiming::AtLoad,
            lora: self.lora.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Continue a prompt (raw completion, no chat template), streamed to stdout.
    Complete(CompleteArgs),
    /// Chat with the model using its chat template (interactive, or once with -p).
    Chat(ChatArgs),
    /// Solve a logic puzzle written in z3's Python API (a declarative
    /// subset, parsed, never run): prints {"status", "model", "unique"}.
    Solve {
        /// The program file (`-` for stdin).
        file: std::path::PathBuf,
        /// Give up (status "unknown") after this many milliseconds.
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
    },
    /// MT-Bench: answer, judge (and, with the eval crate's other tools,
    /// report and grade).
    Eval {
        #[command(subcommand)]
        what: eval_cmd::EvalCommand,
    },
    /// Check responses against stated instructions.
    Check {
        #[command(subcommand)]
        what: CheckCommand,
    },
    /// Evaluate calculator expressions exactly (big rationals): each EXPR,
    /// or one expression a line from stdin; a bad one prints `error: ...`.
    Calc {
        /// Expressions (`20*4`, `x = 15%; 200*x`, `round(10/3, 2)`).
        exprs: Vec<String>,
    },
    /// Embed texts with an embedding model (EmbeddingGemma): one vector per
    /// text, as JSON lines or a NumPy array.
    Embed(embed::EmbedArgs),
    /// Rank documents against a query with an embedding model
    /// (EmbeddingGemma): JSON lines, best first.
    Rerank(rerank::RerankArgs),
    /// Transcribe (or translate into English) an audio file with a model
    /// that hears, a window of at most 30 s at a time.
    Transcribe(transcribe::TranscribeArgs),
    /// Print the token ids of TEXT as a JSON array.
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
        /// Do not add the BOS token.
        #[arg(long)]
        no_bos: bool,
        /// Treat control-token text like `<start_of_turn>` as plain text.
        #[arg(long)]
        no_special: bool,
        /// The text.
        text: String,
    },
    /// Print per-position logits for a token sequence (or a prompt, with
    /// images) as JSON lines.
    Logits {
        #[command(flatten)]
        model: ModelArgs,
        /// Comma-separated token ids.
        #[arg(long, value_delimiter = ',', required_unless_present_any = ["prompt", "embeddings"], conflicts_with = "prompt")]
        ids: Vec<u32>,
        /// A prompt to tokenize (special tokens parsed, BOS added); images
        /// go where it says `<start_of_image>`, audio clips where it says
        /// `<audio_soft_token>`.
        #[arg(short, long)]
        prompt: Option<String>,
        #[command(flatten)]
        images: MediaArgs,
        /// Print each image's (or clip's) projected embeddings (one JSON
        /// line per file: rows of the text model's width) instead of logits.
        #[arg(long)]
        embeddings: bool,
        /// How many of the largest logits to print per position.
        #[arg(long, default_value_t = 10, conflicts_with = "full")]
        top: usize,
        /// Print every logit.
        #[arg(long)]
        full: bool,
    },
    /// Perplexity of a text file, computed as llama-perplexity does.
    Perplexity {
        #[command(flatten)]
        model: ModelArgs,
        /// The text file.
        #[arg(short, long)]
        file: std::path::PathBuf,
        /// Tokens per scored chunk (each chunk is one context, as in
        /// llama-perplexity's -c).
        #[arg(long, default_value_t = 512)]
        chunk: usize,
    },
    /// Show a GGUF file's metadata and tensors.
    Inspect {
        /// Model path or alias.
        model: String,
        /// Print every element of long arrays.
        #[arg(long)]
        full: bool,
    },
    /// Serve the model over an OpenAI-compatible HTTP API until SIGTERM/SIGINT.
    Serve(Box<serve::ServeArgs>),
    /// Run the model as a Telegram bot (long polling, or a webhook) until
    /// SIGTERM/SIGINT; each chat's memory survives restarts.
    Telegram(telegram::TelegramArgs),
    /// Probe a server's /health (for container health checks: exit 0 on 200).
    Health(health::HealthArgs),
    /// Measure prompt-processing and generation throughput (like llama-bench).
    Bench(bench::BenchArgs),
    /// Requantize a GGUF file with llama-quantize's per-tensor type choices.
    Quantize(convert::QuantizeArgs),
    /// Write a random-weight Gemma 3 model of a real size (for speed and memory tests).
    Synth(convert::SynthArgs),
    /// List or clear the prompt states `serve --cache-dir` keeps.
    Cache {
        #[command(subcommand)]
        what: cache::CacheCommand,
    },
    /// Fetch a model into the local cache (alias or hf:OWNER/REPO/FILE.gguf).
    Pull {
        /// What to fetch.
        spec: String,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
}

/// `hearth complete`'s flags.
#[derive(clap::Args, Debug)]
struct CompleteArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// The prompt; read from stdin when omitted.
    #[arg(short, long)]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short, long, conflicts_with = "prompt")]
    file: Option<std::path::PathBuf>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    n_predict: usize,
    /// Print one JSON object at the end instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    #[command(flatten)]
    images: MediaArgs,
}

impl CompleteArgs {
    /// Runs `hearth complete` with these flags.
    fn run(self) -> Result<ExitCode> {
        commands::complete(
            &self.model,
            &self.sample,
            &self.constraint,
            commands::PromptSource::new(self.prompt, self.file),
            &self.images,
            commands::CompleteOptions {
                n_predict: self.n_predict,
                json: self.json,
                ignore_eos: self.ignore_eos,
            },
        )
    }
}

/// `hearth chat`'s flags.
#[derive(clap::Args, Debug)]
struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Answer this message once and exit.
    #[arg(short, long)]
    prompt: Option<String>,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 1024)]
    n_predict: usize,
    /// Let a model that thinks (Gemma 4) think before it answers; the
    /// thought shows dimmed (on stderr when stdout is not a terminal).
    #[arg(long)]
    think: bool,
    /// Most thought tokens per reply (with --think).
    #[arg(long, value_name = "N", requires = "think")]
    thinking_budget: Option<usize>,
    /// Guardrails: `all`, `none`, or a list of calc, logic, verify,
    /// persona, clean, qualifiers. Guarded replies are checked (and
    /// repaired) before they are shown, so they do not stream.
    #[arg(long, value_name = "GUARDS", default_value = "none", conflicts_with_all = ["think", "json_schema", "grammar", "regex", "json_object"])]
    guard: guard::GuardSet,
    /// Print what the guards did (on stderr) after each reply.
    #[arg(long, requires = "guard")]
    guard_trace: bool,
    /// Images for the first message (see `complete --image`).
    #[command(flatten)]
    images: MediaArgs,
    /// Keep the conversation in FILE (its pictures and clips as the
    /// paths of their files, read again on resume), and its prompt
    /// state in FILE.states/, resuming both when FILE exists: the next
    /// reply does not compute the conversation again.
    #[arg(long, value_name = "FILE")]
    session: Option<std::path::PathBuf>,
}

impl ChatArgs {
    /// Runs `hearth chat` with these flags.
    fn run(self) -> Result<ExitCode> {
        chat::run(
            &self.model,
            &self.sample,
            &self.constraint,
            chat::Turns {
                system: self.system,
                prompt: self.prompt,
                n_predict: self.n_predict,
                think: self.think.then_some(self.thinking_budget),
                guard: self.guard,
                guard_trace: self.guard_trace,
                images: self.images.images,
                audio: self.images.audio,
                session_file: self.session,
            },
        )
    }
}

/// What `hearth check` checks.
#[derive(Subcommand, Debug)]
enum CheckCommand {
    /// IFEval: write eval_results_strict.jsonl and eval_results_loose.jsonl
    /// in the official checker's shape.
    Ifeval(commands::IfevalArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Complete(args) => args.run(),
        Command::Chat(args) => args.run(),
        Command::Tokenize {
            model,
            no_bos,
            no_special,
            text,
        } => commands::tokenize(&model, !no_bos, !no_special, &text),
        Command::Logits {
            model,
            ids,
            prompt,
            images,
            embeddings,
            top,
            full,
        } => commands::logits(
            &model,
            commands::LogitsInput {
                ids,
                prompt,
                images: images.images,
                audio: images.audio,
                embeddings,
            },
            top,
            full,
        ),
        Command::Perplexity { model, file, chunk } => commands::perplexity(&model, &file, chunk),
        Command::Inspect { model, full } => commands::inspect(&model, full),
        Command::Pull { spec, quiet } => commands::pull(&spec, quiet),
        Command::Cache { what } => cache::run(&what),
        Command::Calc { exprs } => commands::calc(&exprs),
        Command::Solve { file, timeout_ms } => commands::solve(&file, timeout_ms),
        Command::Eval { what } => eval_cmd::run(&what),
        Command::Check {
            what: CheckCommand::Ifeval(args),
        } => commands::check_ifeval(&args),
        Command::Quantize(args) => convert::quantize(&args),
        Command::Synth(args) => convert::synth(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Embed(args) => embed::run(&args),
        Command::Rerank(args) => rerank::run(&args),
        Command::Transcribe(args) => transcribe::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Telegram(args) => telegram::run(&args),
        Command::Health(args) => health::run(&args),
    }
}
