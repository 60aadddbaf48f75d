//! The embedding endpoints: OpenAI's `/v1/embeddings`, Ollama's
//! `/api/embed` and its older `/api/embeddings`, and reranking by
//! embeddings ([`rerank`]). Each translates its body
//! into one [`EmbedRequest`]; [`embed`] checks and tokenizes it and queues
//! it on the [`batcher`], which packs concurrent requests together.

pub(crate) mod batcher;
mod rerank;

pub(crate) use rerank::rerank;

use crate::body::read_json;
use crate::error::{ApiError, Dialect};
use crate::{api, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use batcher::EmbedJob;
use engine::{EmbedInput, EmbedOptions, EmbedTask};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// Inputs one request may carry, as OpenAI's API allows.
pub const MAX_INPUTS: usize = 2048;
/// Tokens one request may carry in all, as OpenAI's API allows.
pub const MAX_REQUEST_TOKENS: usize = 300_000;

/// One input as a request gives it.
enum Input {
    Text(String),
    Tokens(Vec<u32>),
}

/// An embedding request in any API's terms.
struct EmbedRequest {
    model: Option<String>,
    inputs: Vec<Input>,
    opts: EmbedOptions,
}

/// What [`embed`] gives back.
struct Embedded {
    model: String,
    vectors: Vec<Vec<f32>>,
    tokens: usize,
    truncated: Vec<usize>,
}

/// Check, tokenize and embed `req` through the batcher.
async fn embed(st: &AppState, req: EmbedRequest) -> Result<Embedded, ApiError> {
    let backend = st.models.lease(req.model.as_deref()).await?;
    let model = backend.0.id.clone();
    let Some(batcher) = &backend.embedder else {
        return Err(ApiError::bad_param(
            "model",
            format!("The model `{model}` is a generative model and does not embed text; serve an embedding model (such as EmbeddingGemma) for embeddings."),
        ));
    };
    if req.inputs.is_empty() {
        return Err(ApiError::bad_param("input", "The input is an empty list."));
    }
    if req.inputs.len() > MAX_INPUTS {
        return Err(ApiError::bad_param(
            "input",
            format!(
                "{} inputs in one request; at most {MAX_INPUTS} are allowed.",
                req.inputs.len()
            ),
        ));
    }
    let engine = Arc::clone(&backend.engine);
    let dim = engine
        .embedding_width(req.opts.dim)
        .map_err(|e| ApiError::bad_param("dimensions", short(&e)))?;
    let (texts, truncated) = tokenize(st, engine, req.inputs, req.opts).await?;
    let tokens: usize = texts.iter().map(Vec::len).sum();
    if tokens > MAX_REQUEST_TOKENS {
        return Err(ApiError::bad_param(
            "input",
            format!("{tokens} tokens in one request; at most {MAX_REQUEST_TOKENS} are allowed."),
        ));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    batcher
        .submit(EmbedJob { texts, reply: tx })
        .map_err(ApiError::from)?;
    let vectors = tokio::time::timeout(st.config.request_timeout, rx)
        .await
        .map_err(|_| ApiError::timed_out("The embeddings took too long."))?
        .map_err(|_| ApiError::internal("the embedding worker stopped"))?
        .map_err(ApiError::internal)?;
    Ok(Embedded {
        model,
        vectors: vectors
            .into_iter()
            .map(|v| engine::matryoshka(v, dim))
            .collect(),
        tokens,
        truncated,
    })
}

/// Each input's ids as the model embeds it (its task prompt put before a
/// text), on the prep pool within the request memory budget, and the
/// indices of those cut to fit.
async fn tokenize(
    st: &AppState,
    engine: Arc<engine::Engine>,
    inputs: Vec<Input>,
    opts: EmbedOptions,
) -> Result<(Vec<Vec<u32>>, Vec<usize>), ApiError> {
    let text_bytes = inputs
        .iter()
        .map(|i| match i {
            Input::Text(t) => t.len(),
            Input::Tokens(_) => 0,
        })
        .sum();
    crate::budget::check_tokenize(text_bytes, st.config.limits.request_memory)?;
    let memory = text_bytes as u64 * crate::budget::TOKENIZE_BYTES_PER_BYTE;
    st.work
        .run(memory, move || {
            let mut texts = Vec::with_capacity(inputs.len());
            let mut truncated = Vec::new();
            for (i, input) in inputs.iter().enumerate() {
                let input = match input {
                    Input::Text(t) => EmbedInput::Text(t),
                    Input::Tokens(t) => EmbedInput::Tokens(t),
                };
                let (ids, cut) = engine.embedding_input(i, &input, &opts)?;
                if cut {
                    truncated.push(i);
                }
                texts.push(ids);
            }
            Ok::<_, engine::EngineError>((texts, truncated))
        })
        .await?
        .map_err(|e| ApiError::bad_param("input", short(&e)))
}

/// An engine error's message without the "invalid request: " lead.
fn short(e: &engine::EngineError) -> String {
    let msg = e.to_string();
    match msg.strip_prefix("invalid request: ") {
        Some(rest) => rest.to_string(),
        None => msg,
    }
}

/// The task a request names, by our name (`task`) or by its
/// sentence-transformers prompt name (`prompt_name`).
fn task_of(task: Option<&str>, prompt_name: Option<&str>) -> Result<Option<EmbedTask>, ApiError> {
    match (task, prompt_name) {
        (Some(t), _) => t
            .parse()
            .map(Some)
            .map_err(|e| ApiError::bad_param("task", e)),
        (None, Some(p)) => p
            .parse()
            .map(Some)
            .map_err(|e| ApiError::bad_param("prompt_name", e)),
        (None, None) => Ok(None),
    }
}

/// OpenAI's body, with our `task` / `prompt_name` and `truncate`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenAiBody {
    input: Value,
    model: Option<String>,
    dimensions: Option<usize>,
    encoding_format: Option<String>,
    #[allow(dead_code)]
    user: Option<String>,
    task: Option<String>,
    prompt_name: Option<String>,
    #[serde(default)]
    truncate: bool,
}

/// OpenAI's `input`: a string, strings, token ids, or lists of token ids.
fn openai_inputs(v: Value) -> Result<Vec<Input>, ApiError> {
    let bad = || {
        ApiError::bad_param(
            "input",
            "`input` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids.",
        )
    };
    let ids = |a: &[Value]| -> Option<Vec<u32>> {
        a.iter()
            .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    };
    match v {
        Value::String(s) => Ok(vec![Input::Text(s)]),
        Value::Array(a) if a.iter().all(Value::is_string) => Ok(a
            .into_iter()
            .filter_map(|s| s.as_str().map(|s| Input::Text(s.to_string())))
            .collect()),
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_number) => {
            Ok(vec![Input::Tokens(ids(&a).ok_or_else(bad)?)])
        }
        Value::Array(a) if a.iter().all(Value::is_array) => a
            .iter()
            .map(|x| {
                x.as_array()
                    .and_then(|x| ids(x))
                    .map(Input::Tokens)
                    .ok_or_else(bad)
            })
            .collect(),
        _ => Err(bad()),
    }
}

/// `POST /v1/embeddings`.
pub(crate) async fn openai(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    openai_inner(&st, &headers, body)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::OpenAi))
}

async fn openai_inner(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let b: OpenAiBody = read_json(st, headers, body, api::parse_json).await?;
    let base64 = match b.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                format!("`encoding_format` is `{other}`; it must be `float` or `base64`."),
            ))
        }
    };
    let req = EmbedRequest {
        model: b.model,
        inputs: openai_inputs(b.input)?,
        opts: EmbedOptions {
            task: task_of(b.task.as_deref(), b.prompt_name.as_deref())?,
            dim: b.dimensions,
            truncate: b.truncate,
        },
    };
    let out = embed(st, req).await?;
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match base64 {
                true => json!(base64::engine::general_purpose::STANDARD
                    .encode(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())),
                false => json!(v),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let mut body = json!({
        "object": "list",
        "data": data,
        "model": out.model,
        "usage": {"prompt_tokens": out.tokens, "total_tokens": out.tokens},
    });
    if !out.truncated.is_empty() {
        body["truncated"] = json!(out.truncated);
    }
    Ok(Json(body).into_response())
}

/// Ollama's `/api/embed` body (`truncate` is on unless turned off, as
/// Ollama has it).
#[derive(Deserialize)]
struct OllamaBody {
    model: Option<String>,
    input: Option<Value>,
    /// `/api/embeddings`' single text.
    prompt: Option<String>,
    truncate: Option<bool>,
    dimensions: Option<usize>,
    task: Option<String>,
}

/// `POST /api/embed`.
pub(crate) async fn ollama_embed(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    ollama_inner(&st, &headers, body, false)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::Ollama))
}

/// `POST /api/embeddings` (Ollama's older endpoint: one `prompt`, one
/// `embedding`).
pub(crate) async fn ollama_embeddings(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    ollama_inner(&st, &headers, body, true)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::Ollama))
}

async fn ollama_inner(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
    legacy: bool,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let b: OllamaBody = read_json(st, headers, body, api::parse_json).await?;
    let inputs = match (legacy, b.input, b.prompt) {
        (true, _, Some(p)) => vec![Input::Text(p)],
        (true, _, None) => return Err(ApiError::bad_param("prompt", "`prompt` is required.")),
        (false, Some(Value::String(s)), _) => vec![Input::Text(s)],
        (false, Some(Value::Array(a)), _) if a.iter().all(Value::is_string) => a
            .into_iter()
            .filter_map(|s| s.as_str().map(|s| Input::Text(s.to_string())))
            .collect(),
        (false, Some(_), _) => {
            return Err(ApiError::bad_param(
                "input",
                "`input` must be a string or an array of strings.",
            ))
        }
        (false, None, _) => return Err(ApiError::bad_param("input", "`input` is required.")),
    };
    let req = EmbedRequest {
        model: b.model,
        inputs,
        opts: EmbedOptions {
            task: task_of(b.task.as_deref(), None)?,
            dim: b.dimensions,
            truncate: b.truncate.unwrap_or(true),
        },
    };
    let out = embed(st, req).await?;
    if legacy {
        let first = out.vectors.into_iter().next().unwrap_or_default();
        return Ok(Json(json!({ "embedding": first })).into_response());
    }
    Ok(Json(json!({
        "model": crate::ollama::model_name(&out.model),
        "embeddings": out.vectors,
        "total_duration": received.elapsed().as_nanos() as u64,
        "load_duration": 0,
        "prompt_eval_count": out.tokens,
    }))
    .into_response())
}
