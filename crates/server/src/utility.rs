//! llama.cpp's utility endpoints, which its own tools and many front ends
//! call beside the OpenAI ones: `/tokenize` (with pieces), `/detokenize`,
//! `/apply-template` and `/props`, with the request and response shapes of
//! llama.cpp's server.

use crate::body::read_body;
use crate::error::ApiError;
use crate::{api, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use engine::{Engine, SamplingParams};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// The engine of the default model (the one most recently used, loaded
/// if need be): llama.cpp's utility bodies name no model.
async fn engine(st: &AppState) -> Result<Arc<Engine>, ApiError> {
    Ok(Arc::clone(&st.models.lease(None).await?.engine))
}

/// The request body as `T`, within the server's size and time limits.
async fn body_json<T: serde::de::DeserializeOwned>(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    api::parse_json(&read_body(st, headers, body).await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeBody {
    content: String,
    /// Add the BOS token where the model adds one (llama.cpp: false).
    #[serde(default)]
    add_special: bool,
    /// Read control tokens written in the text (llama.cpp: true).
    #[serde(default = "yes")]
    parse_special: bool,
    /// Return `{id, piece}` pairs instead of bare ids.
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

/// `POST /tokenize`: `{"tokens": [ids]}`, or with `with_pieces` each token
/// as `{"id", "piece"}`, the piece a string when its bytes are UTF-8 and
/// the list of bytes when not (as llama.cpp answers).
pub(crate) async fn tokenize(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let b: TokenizeBody = body_json(&st, &headers, body).await?;
    let engine = engine(&st).await?;
    let tok = engine.tokenizer();
    let ids = tok.encode(&b.content, b.add_special && tok.add_bos(), b.parse_special);
    if !b.with_pieces {
        return Ok(Json(json!({ "tokens": ids })));
    }
    let pieces: Vec<Value> = ids
        .iter()
        .map(|&id| {
            let bytes = tok.token_bytes(id, true);
            let piece = match std::str::from_utf8(&bytes) {
                Ok(text) => json!(text),
                Err(_) => json!(bytes.to_vec()),
            };
            json!({"id": id, "piece": piece})
        })
        .collect();
    Ok(Json(json!({ "tokens": pieces })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeBody {
    tokens: Vec<u64>,
}

/// `POST /detokenize`: `{"content": text}`; an id outside the vocabulary
/// is a 400 naming it.
pub(crate) async fn detokenize(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let b: DetokenizeBody = body_json(&st, &headers, body).await?;
    let engine = engine(&st).await?;
    let vocab = engine.model().config().vocab;
    let mut ids = Vec::with_capacity(b.tokens.len());
    for &id in &b.tokens {
        match u32::try_from(id) {
            Ok(i) if (i as usize) < vocab => ids.push(i),
            _ => {
                return Err(ApiError::bad_param(
                    "tokens",
                    format!("Token id {id} is out of the vocabulary of {vocab}."),
                ))
            }
        }
    }
    Ok(Json(
        json!({ "content": engine.tokenizer().decode(&ids, false) }),
    ))
}

/// `POST /apply-template`: the chat request's messages (parsed as
/// `/v1/chat/completions` parses them) as the prompt text the model's
/// template makes, `{"prompt": text}`.
pub(crate) async fn apply_template(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let bytes = read_body(&st, &headers, body).await?;
    let req = api::parse_chat(&bytes, &SamplingParams::default())?;
    let api::Input::Chat(messages) = &req.input else {
        return Err(ApiError::bad_param("messages", "`messages` is required."));
    };
    let engine = engine(&st).await?;
    let prompt = engine.chat_prompt(messages).map_err(|e| {
        ApiError::bad_param("messages", format!("Cannot apply the chat template: {e}"))
    })?;
    Ok(Json(json!({ "prompt": prompt })))
}

/// `GET /props`: the server's settings as llama.cpp's server reports them
/// (the sampling defaults, the context, the slots, what the model reads).
pub(crate) async fn props(State(st): State<AppState>) -> Result<Json<Value>, ApiError> {
    let engine = engine(&st).await?;
    let s = &engine.options().sampling;
    // f32 settings shown as the decimals they were given as.
    let f = |x: f32| (f64::from(x) * 1e6).round() / 1e6;
    let tok = engine.tokenizer();
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("");
    Ok(Json(json!({
        "default_generation_settings": {
            "n_ctx": engine.n_ctx(),
            "params": {
                "temperature": f(s.temperature),
                "top_k": s.top_k,
                "top_p": f(s.top_p),
                "min_p": f(s.min_p),
                "repeat_penalty": f(s.repeat_penalty),
                "repeat_last_n": s.repeat_last_n,
                // A fresh seed per request unless the server fixes one.
                "seed": st.config.seed,
            },
        },
        "total_slots": st.config.parallel,
        "model_alias": st.models.resolve(None).await.ok(),
        "bos_token": text(tok.bos_id()),
        "eos_token": text(tok.eos_id()),
        "modalities": {"vision": engine.has_vision(), "audio": engine.has_audio()},
        "build_info": format!("hearth {}", env!("CARGO_PKG_VERSION")),
    })))
}
