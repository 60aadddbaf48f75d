//! What every generating endpoint shares once its body is parsed into a
//! [`Request`]: tokenize (templates, images, audio), compile the grammar,
//! check the context, and hand the job to the scheduler (or to the guard
//! pipeline). The endpoint then shapes the [`Reply`] in its own API.

mod prepare;

use crate::api::{Input, Request};
use crate::error::ApiError;
use crate::models::Lease;
use crate::reply::Reply;
use crate::scheduler::{Fork, Job};
use crate::AppState;
use engine::SamplingParams;
pub(crate) use prepare::{for_this_model, message_bytes};
use prepare::{prepare_off_thread, Prepared};
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

/// Prepares `req` (see [`prepare`]), checks it against the context, and
/// queues it (or hands a guarded chat to the guard pipeline).
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
    let prepared = prepare_off_thread(st, Arc::clone(&engine), req, true).await?;
    check_fits(&prepared, n_ctx)?;
    let (prompt_tokens, dropped_turns) = (prepared.prompt.len(), prepared.dropped);
    let opts = prepared
        .req
        .generate_options(n_ctx - prompt_tokens, backend.speculation.as_ref());
    crate::budget::check_reply(
        prepared.req.n,
        opts.max_tokens,
        prepared.req.logprobs,
        st.config.limits.request_memory,
    )?;
    let deadline = st
        .config
        .max_request_time
        .and_then(|limit| received.checked_add(limit));
    let (tx, rx) = mpsc::unbounded_channel();
    let reply = Reply::new(rx, prepared.req.tools.clone(), Arc::clone(&engine));
    let guards = guards_for(st, &prepared.req)?;
    let (req, more) = match (guards.is_empty(), &prepared.req.input) {
        (false, Input::Chat(messages)) => {
            let call = GuardedCall {
                messages: messages.clone(),
                params: prepared.req.params.clone(),
                cfg: guard::GuardConfig {
                    guards,
                    max_tokens: opts.max_tokens,
                    ..guard::GuardConfig::default()
                },
                deadline,
                cache_scope: crate::routes::caller(),
                adapters: adapters_for(&engine, &prepared.req)?,
            };
            run_guarded(st, backend, call, tx);
            (prepared.req, Vec::new())
        }
        _ => queue_job(&backend, prepared, opts, tx, deadline)?,
    };
    Ok(Submitted {
        model,
        req,
        reply,
        more,
        prompt_tokens,
        dropped_turns,
    })
}

/// An empty prompt, or one that leaves no room in the context for a
/// generated token, is a 400 that names the field.
fn check_fits(prepared: &Prepared, n_ctx: usize) -> Result<(), ApiError> {
    let n = prepared.prompt.len();
    if n == 0 {
        return Err(ApiError::bad_param("prompt", "The prompt is empty."));
    }
    let field = match prepared.req.input {
        Input::Chat(_) => "messages",
        _ => "prompt",
    };
    if n >= n_ctx {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_param(
                field,
                format!(
                    "The prompt is {n} tokens but the context is {n_ctx} tokens (it must leave room for at least one generated token). Shorten the prompt or start the server with a larger --ctx."
                ),
            )
        });
    }
    Ok(())
}

/// Queues `prepared` as a job on the model's scheduler, its output on
/// `events`, with one fork per choice after the first (its own seed,
/// grammar and channel); returns the request and those choices' replies.
fn queue_job(
    backend: &Lease,
    prepared: Prepared,
    opts: engine::GenerateOptions,
    events: mpsc::UnboundedSender<crate::scheduler::Event>,
    deadline: Option<Instant>,
) -> Result<(Request, Vec<Reply>), ApiError> {
    let Prepared {
        req,
        prompt,
        images,
        constraints,
        thinking,
        ..
    } = prepared;
    let engine = &backend.engine;
    let adapters = adapters_for(engine, &req)?;
    let mut constraints = constraints.into_iter();
    let mut more = Vec::new();
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
        events,
        deadline,
        logprobs: req.logprobs,
        forks,
        hold: Some(Arc::new(backend.clone())),
        cache_scope: crate::routes::caller(),
        adapters,
    };
    backend.scheduler.submit(job)?;
    Ok((req, more))
}

/// A chat for the guard pipeline.
struct GuardedCall {
    messages: Vec<engine::ChatMessage>,
    params: SamplingParams,
    cfg: guard::GuardConfig,
    deadline: Option<Instant>,
    cache_scope: Option<[u8; 32]>,
    adapters: engine::Adapters,
}

/// The adapters `req` runs with on `engine`: an unknown id or a bad
/// scale in its `lora` is a 400.
fn adapters_for(engine: &engine::Engine, req: &Request) -> Result<engine::Adapters, ApiError> {
    engine
        .adapters_for(req.lora.as_deref())
        .map_err(|e| ApiError::bad_param("lora", format!("{e}.")))
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
            cache_scope: call.cache_scope,
            adapters: call.adapters,
        };
        crate::guarded::run(&mut chat, &call.messages, &call.cfg, &metrics);
    });
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
