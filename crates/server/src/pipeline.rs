//! What every generating endpoint shares once its body is parsed into a
//! [`Request`]: tokenize (templates, images, audio), compile the grammar,
//! check the context, and hand the job to the scheduler (or to the guard
//! pipeline). The endpoint then shapes the [`Reply`] in its own API.

use crate::api::{self, Input, Request};
use crate::error::ApiError;
use crate::models::Lease;
use crate::reply::Reply;
use crate::scheduler::{Fork, Job};
use crate::truncate::{self, Overflow};
use crate::{AppState, ServerConfig};
use engine::{Engine, EngineError, SamplingParams};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// A request in the scheduler's hands.
pub(crate) struct Submitted {
    /// The served model's id.
    pub model: String,
    /// The request as parsed.
    pub req: Request,
    /// Its reply.
    pub reply: Reply,
    /// The replies of the other choices (`n` > 1).
    pub more: Vec<Reply>,
    /// The prompt's length in tokens.
    pub prompt_tokens: usize,
    /// Turns dropped from the oldest to fit the context.
    pub dropped_turns: usize,
}

/// The response header that says how many turns were dropped to fit the
/// context (absent when none were).
pub(crate) const DROPPED_HEADER: &str = "x-hearth-dropped-turns";

/// `resp` with the dropped-turns header when turns were dropped.
pub(crate) fn mark_dropped(
    mut resp: axum::response::Response,
    dropped: usize,
) -> axum::response::Response {
    if dropped > 0 {
        resp.headers_mut().insert(DROPPED_HEADER, dropped.into());
    }
    resp
}

/// The server's sampling defaults (its `RunOptions`), which fill what a
/// request leaves out.
pub(crate) fn sampling_defaults(st: &AppState) -> SamplingParams {
    st.models.sampling().clone()
}

/// Tokenize `req`, check it against the context, and queue it.
pub(crate) async fn submit(
    st: &AppState,
    mut req: Request,
    received: Instant,
) -> Result<Submitted, ApiError> {
    if let (false, Some(seed)) = (req.seed_given, st.config.seed) {
        req.params.seed = seed;
    }
    let (model, backend) = generative_backend(st, req.model.as_deref()).await?;
    let engine = Arc::clone(&backend.engine);
    let n_ctx = engine.n_ctx();
    check_logit_bias(&req, engine.model().config().vocab)?;
    let Prepared {
        req,
        prompt,
        dropped,
        images,
        constraints,
        thinking,
    } = prepare_off_thread(st, Arc::clone(&engine), req, true).await?;
    if prompt.is_empty() {
        return Err(ApiError::bad_param("prompt", "The prompt is empty."));
    }
    let field = match req.input {
        Input::Chat(_) => "messages",
        _ => "prompt",
    };
    if prompt.len() >= n_ctx {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_param(
                field,
                format!(
                    "The prompt is {} tokens but the context is {} tokens (it must leave room for at least one generated token). Shorten the prompt or start the server with a larger --ctx.",
                    prompt.len(),
                    n_ctx
                ),
            )
        });
    }
    let prompt_tokens = prompt.len();
    let opts = req.generate_options(n_ctx - prompt.len(), st.config.speculation.as_ref());
    let deadline = st
        .config
        .max_request_time
        .and_then(|limit| received.checked_add(limit));
    let engine = &backend.engine;
    let (tx, rx) = mpsc::unbounded_channel();
    let reply = Reply::new(rx, req.tools.clone(), Arc::clone(engine));
    let guards = guards_for(st, &req)?;
    let mut more = Vec::new();
    if let (false, Input::Chat(messages)) = (guards.is_empty(), &req.input) {
        let cfg = guard::GuardConfig {
            guards,
            max_tokens: opts.max_tokens,
            ..guard::GuardConfig::default()
        };
        let call = GuardedCall {
            messages: messages.clone(),
            params: req.params.clone(),
            cfg,
            deadline,
        };
        run_guarded(st, backend.clone(), call, tx);
    } else {
        let mut constraints = constraints.into_iter();
        // Choices after the first: their own seed, grammar and channel.
        let forks = (1..req.n)
            .map(|i| {
                let (tx, rx) = mpsc::unbounded_channel();
                more.push(Reply::new(rx, req.tools.clone(), Arc::clone(engine)));
                let mut params = req.params.clone();
                params.seed = params.seed.wrapping_add(i as u64);
                Fork {
                    params,
                    constraint: constraints.next_back(),
                    events: tx,
                }
            })
            .collect();
        let job = Job {
            prompt,
            images,
            params: req.params.clone(),
            opts,
            constraint: constraints.next(),
            thinking,
            events: tx,
            deadline,
            logprobs: req.logprobs,
            forks,
            hold: Some(Arc::new(backend.clone())),
        };
        backend.scheduler.submit(job)?;
    }
    Ok(Submitted {
        model,
        req,
        reply,
        more,
        prompt_tokens,
        dropped_turns: dropped,
    })
}

/// A chat for the guard pipeline.
struct GuardedCall {
    messages: Vec<engine::ChatMessage>,
    params: SamplingParams,
    cfg: guard::GuardConfig,
    deadline: Option<Instant>,
}

/// Run the guard pipeline for a chat on a blocking thread, holding its
/// model; its reply comes on `tx` as ordinary scheduler events.
fn run_guarded(
    st: &AppState,
    backend: Lease,
    call: GuardedCall,
    tx: mpsc::UnboundedSender<crate::scheduler::Event>,
) {
    let metrics = Arc::clone(&st.metrics);
    tokio::task::spawn_blocking(move || {
        let mut chat = crate::guarded::SchedulerChat {
            engine: &backend.engine,
            scheduler: &backend.scheduler,
            params: call.params,
            deadline: call.deadline,
            client: &tx,
        };
        crate::guarded::run(&mut chat, &call.messages, &call.cfg, &metrics);
    });
}

/// A request made ready for the scheduler.
struct Prepared {
    req: Request,
    prompt: Vec<u32>,
    /// Turns dropped to fit the context.
    dropped: usize,
    images: Vec<engine::PromptImage>,
    /// One compiled grammar per choice, when there is a grammar.
    constraints: Vec<engine::Constraint>,
    thinking: Option<engine::Thinking>,
}

/// Template and tokenize `req` (its images and clips encoded), and, with
/// `compile`, compile its grammar.
fn prepare(
    engine: &Engine,
    req: Request,
    config: &ServerConfig,
    compile: bool,
) -> Result<Prepared, ApiError> {
    // A model that does not think ignores the switch.
    let thinking = match (&req.input, req.thinking) {
        (Input::Chat(_), true) => engine.thinking(req.thinking_budget),
        _ => None,
    };
    let media = !req.images.is_empty() || !req.audio.is_empty();
    let mut dropped = 0;
    let (prompt, images) = match &req.input {
        // Turns with images or clips are not dropped: their media would
        // have to go too.
        Input::Chat(messages) if !media && config.context_overflow == Overflow::Truncate => {
            let n_ctx = engine.n_ctx();
            let room = req.max_tokens.unwrap_or(n_ctx / 8).min(n_ctx / 4).max(1);
            let fitted = truncate::fit(messages, n_ctx, room, |m| {
                tokenize_chat(engine, m, thinking.is_some())
            })?;
            dropped = fitted.dropped;
            (fitted.ids, Vec::new())
        }
        _ if !media => (
            tokenize(engine, &req.input, thinking.is_some())?,
            Vec::new(),
        ),
        _ => media_prompt(engine, &req, config.allow_file_images, thinking.is_some())?,
    };
    let constraints = match &req.grammar {
        Some((grammar, field)) if compile => (0..req.n)
            .map(|_| {
                engine
                    .constraint(grammar)
                    .map_err(|e| grammar_error(field, e))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    Ok(Prepared {
        req,
        prompt,
        dropped,
        images,
        constraints,
        thinking,
    })
}

/// [`prepare`] on a blocking thread: templating, tokenizing, encoding
/// images and compiling a grammar can take a while.
async fn prepare_off_thread(
    st: &AppState,
    engine: Arc<Engine>,
    req: Request,
    compile: bool,
) -> Result<Prepared, ApiError> {
    check_media_counts(&st.config.limits, &req)?;
    let config = Arc::clone(&st.config);
    tokio::task::spawn_blocking(move || prepare(&engine, req, &config, compile))
        .await
        .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))?
}

/// More images or clips than `--max-images` / `--max-clips` is a 400 that
/// names the limit.
fn check_media_counts(limits: &crate::Limits, req: &Request) -> Result<(), ApiError> {
    for (n, max, what, flag) in [
        (req.images.len(), limits.images, "images", "--max-images"),
        (req.audio.len(), limits.clips, "audio clips", "--max-clips"),
    ] {
        if n > max {
            return Err(ApiError::bad_param(
                "messages",
                format!(
                    "The request carries {n} {what}; this server takes at most {max} ({flag})."
                ),
            ));
        }
    }
    Ok(())
}

/// The prompt's length in tokens, as [`submit`] would queue it.
pub(crate) async fn count_tokens(st: &AppState, req: Request) -> Result<usize, ApiError> {
    let (_, backend) = generative_backend(st, req.model.as_deref()).await?;
    let prepared = prepare_off_thread(st, Arc::clone(&backend.engine), req, false).await?;
    Ok(prepared.prompt.len())
}

/// The model `asked` names (loaded first if need be) and its id, when it
/// generates: an embedding model asked to chat or complete is a 400 that
/// says so.
async fn generative_backend(
    st: &AppState,
    asked: Option<&str>,
) -> Result<(String, Lease), ApiError> {
    let backend = st.models.lease(asked).await?;
    let model = backend.0.id.clone();
    if backend.embedder.is_some() {
        return Err(ApiError::bad_param(
            "model",
            format!("The model `{model}` is an embedding model and does not generate text; use /v1/embeddings (or Ollama's /api/embed)."),
        ));
    }
    Ok((model, backend))
}

fn check_logit_bias(req: &Request, vocab: usize) -> Result<(), ApiError> {
    match req
        .params
        .logit_bias
        .iter()
        .find(|(id, _)| *id as usize >= vocab)
    {
        Some((id, _)) => Err(ApiError::bad_param(
            "logit_bias",
            format!("Token id {id} in `logit_bias` is out of the vocabulary of {vocab}."),
        )),
        None => Ok(()),
    }
}

/// The guards a request runs: its own `guard` field, else the server's
/// default for chats. A request that asks for guards and also for a
/// grammar, tools or thinking is refused (the guards rewrite text those
/// would hold); the server's default simply does not apply to such a
/// request.
fn guards_for(st: &AppState, req: &Request) -> Result<guard::GuardSet, ApiError> {
    let special = req.n > 1
        || req.grammar.is_some()
        || req.tools.is_some()
        || req.thinking
        || !req.images.is_empty()
        || !req.audio.is_empty();
    let chat = matches!(req.input, Input::Chat(_));
    match req.guard {
        Some(g) if !g.is_empty() && special => Err(ApiError::bad_param(
            "guard",
            "`guard` cannot be combined with `n` > 1, a grammar, a response format, tools, thinking, images or audio.",
        )),
        Some(g) => Ok(g),
        None if special || !chat => Ok(guard::GuardSet::none()),
        None => Ok(st.config.guard),
    }
}

/// A grammar that does not compile is the client's fault: 400, naming the
/// field it came from and the problem.
fn grammar_error(field: &str, e: EngineError) -> ApiError {
    match e {
        EngineError::InvalidGrammar(msg) => ApiError {
            code: Some("invalid_grammar"),
            ..ApiError::bad_param(field, format!("`{field}` cannot be used: invalid {msg}"))
        },
        other => ApiError::internal(other.to_string()),
    }
}

/// The ids of a chat with images and audio clips, each decoded and encoded
/// (or taken from the cache): a bad image or clip, or media for a model
/// without the tower for it, is the client's error.
fn media_prompt(
    engine: &Engine,
    req: &Request,
    allow_files: bool,
    thinking: bool,
) -> Result<(Vec<u32>, Vec<engine::PromptImage>), ApiError> {
    let Input::Chat(messages) = &req.input else {
        return Err(ApiError::bad_param(
            "prompt",
            "Images and audio are read in chats only.",
        ));
    };
    let mut images = Vec::with_capacity(req.images.len());
    for (i, source) in req.images.iter().enumerate() {
        let field = format!("image {}", i + 1);
        let bytes = match source {
            api::ImageSource::Data(b) => std::borrow::Cow::Borrowed(b.as_slice()),
            api::ImageSource::File(_) if !allow_files => {
                return Err(ApiError::bad_param(
                    "messages",
                    "File URLs are off on this server (start it with --allow-file-images); send the image as a data URL.",
                ))
            }
            // The error names the image, not its path: a message never
            // echoes a file path.
            api::ImageSource::File(path) => std::borrow::Cow::Owned(std::fs::read(path).map_err(
                |e| ApiError::bad_param("messages", format!("Cannot read the file of {field}: {}.", e.kind())),
            )?),
        };
        let e = engine
            .encode_image(&bytes)
            .map_err(|e| ApiError::bad_param("messages", format!("{field}: {e}.")))?;
        images.push(e);
    }
    let clips = req
        .audio
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            engine
                .encode_audio(bytes)
                .map_err(|e| ApiError::bad_param("messages", format!("audio clip {}: {e}.", i + 1)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    engine
        .encode_chat_media(messages, &images, &clips, thinking)
        .map_err(|e| ApiError::bad_param("messages", format!("{e}.")))
}

fn tokenize_chat(
    engine: &Engine,
    messages: &[engine::ChatMessage],
    thinking: bool,
) -> Result<Vec<u32>, ApiError> {
    engine
        .encode_chat_thinking(messages, thinking)
        .map_err(|e| {
            ApiError::bad_param("messages", format!("Cannot apply the chat template: {e}"))
        })
}

fn tokenize(engine: &Engine, input: &Input, thinking: bool) -> Result<Vec<u32>, ApiError> {
    match input {
        Input::Chat(messages) => tokenize_chat(engine, messages, thinking),
        Input::Text(text) => {
            let tok = engine.tokenizer();
            Ok(tok.encode(text, tok.add_bos(), true))
        }
        Input::Ids(ids) => {
            let vocab = engine.model().config().vocab;
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ApiError::bad_param(
                    "prompt",
                    format!("Token id {bad} is out of the vocabulary of {vocab}."),
                ));
            }
            Ok(ids.clone())
        }
    }
}
