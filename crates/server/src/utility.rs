//! llama.cpp's utility endpoints, which its own tools and many front ends
//! call beside the OpenAI ones: `/tokenize` (with pieces), `/detokenize`,
//! `/apply-template` and `/props`, with the request and response shapes of
//! llama.cpp's server.

use crate::body::read_json;
use crate::budget::{bounded_json, check, check_tokenize, TOKENIZE_BYTES_PER_BYTE};
use crate::error::ApiError;
use crate::{api, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::{Engine, SamplingParams, Tokenizer};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::Arc;

/// The engine of the default model (the one most recently used, loaded
/// if need be): llama.cpp's utility bodies name no model.
async fn engine(st: &AppState) -> Result<Arc<Engine>, ApiError> {
    Ok(Arc::clone(&st.models.lease(None).await?.engine))
}

/// The request body as `T`, within the server's size, time and memory
/// limits.
async fn body_json<T: serde::de::DeserializeOwned + Send + 'static>(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    read_json(st, headers, body, api::parse_json).await
}

/// `bytes` as a JSON response.
fn json_response(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
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
/// the list of bytes when not (as llama.cpp answers). Tokenized and written
/// on the prep pool, each within the request's memory budget.
pub(crate) async fn tokenize(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let b: TokenizeBody = body_json(&st, &headers, body).await?;
    let engine = engine(&st).await?;
    let budget = st.config.limits.request_memory;
    check_tokenize(b.content.len(), budget)?;
    // The ids, then the answer written from them (bounded by the budget).
    let memory = (b.content.len() as u64 * TOKENIZE_BYTES_PER_BYTE).min(budget as u64);
    let answer = st
        .work
        .run(memory, move || {
            let tok = engine.tokenizer();
            let ids = tok.encode(&b.content, b.add_special && tok.add_bos(), b.parse_special);
            drop(b.content);
            if b.with_pieces {
                bounded_json("The token list with its pieces", budget, |w| {
                    write_pieces(tok, &ids, w)
                })
            } else {
                bounded_json("The token list", budget, |w| {
                    serde_json::to_writer(w, &TokenIds { tokens: &ids })
                        .map_err(std::io::Error::other)
                })
            }
        })
        .await??;
    Ok(json_response(answer))
}

/// `{"tokens": [ids]}`, serialized from the ids themselves.
#[derive(serde::Serialize)]
struct TokenIds<'a> {
    tokens: &'a [u32],
}

/// `{"tokens": [{"id", "piece"}, ...]}` written straight out: a `Value`
/// per token would take a hundred times the answer's size.
fn write_pieces(tok: &Tokenizer, ids: &[u32], w: &mut dyn Write) -> std::io::Result<()> {
    w.write_all(br#"{"tokens":["#)?;
    for (i, &id) in ids.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write!(w, r#"{{"id":{id},"piece":"#)?;
        let bytes = tok.token_bytes(id, true);
        match std::str::from_utf8(&bytes) {
            Ok(text) => serde_json::to_writer(&mut *w, text),
            Err(_) => serde_json::to_writer(&mut *w, &*bytes),
        }
        .map_err(std::io::Error::other)?;
        w.write_all(b"}")?;
    }
    w.write_all(b"]}")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeBody {
    tokens: Vec<u64>,
}

/// `POST /detokenize`: `{"content": text}`; an id outside the vocabulary
/// is a 400 naming it. The text's length is summed from its pieces and
/// checked against the memory budget before it is decoded.
pub(crate) async fn detokenize(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let b: DetokenizeBody = body_json(&st, &headers, body).await?;
    let engine = engine(&st).await?;
    let budget = st.config.limits.request_memory;
    // The text (a token's piece is a few bytes), its JSON, the ids.
    let memory = (b.tokens.len() as u64 * 64).min(budget as u64);
    let answer = st
        .work
        .run(memory, move || {
            let ids = vocabulary_ids(&b.tokens, engine.model().config().vocab)?;
            let tok = engine.tokenizer();
            let len: usize = ids.iter().map(|&id| tok.token_bytes(id, false).len()).sum();
            // The decoder's buffer grows to twice the text at most.
            check("The decoded text", 2 * len as u64, budget)?;
            let content = tok.decode(&ids, false);
            bounded_json("The decoded text as JSON", budget, |w| {
                serde_json::to_writer(w, &json!({ "content": &content }))
                    .map_err(std::io::Error::other)
            })
        })
        .await??;
    Ok(json_response(answer))
}

/// `tokens` as ids of a vocabulary of `vocab`; one outside it is a 400
/// naming it.
fn vocabulary_ids(tokens: &[u64], vocab: usize) -> Result<Vec<u32>, ApiError> {
    tokens
        .iter()
        .map(|&id| match u32::try_from(id) {
            Ok(i) if (i as usize) < vocab => Ok(i),
            _ => Err(ApiError::bad_param(
                "tokens",
                format!("Token id {id} is out of the vocabulary of {vocab}."),
            )),
        })
        .collect()
}

/// `POST /apply-template`: the chat request's messages (parsed as
/// `/v1/chat/completions` parses them) as the prompt text the model's
/// template makes, `{"prompt": text}`, rendered and written on the prep
/// pool.
pub(crate) async fn apply_template(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let req = read_json(&st, &headers, body, |b| {
        api::parse_chat(b, &SamplingParams::default())
    })
    .await?;
    let engine = engine(&st).await?;
    let budget = st.config.limits.request_memory;
    let api::Input::Chat(messages) = &req.input else {
        return Err(ApiError::bad_param("messages", "`messages` is required."));
    };
    // Templating is tokenizing's first half: counted alike.
    let text: usize = messages.iter().map(crate::pipeline::message_bytes).sum();
    let memory = (text as u64 * TOKENIZE_BYTES_PER_BYTE).min(budget as u64);
    let answer = st
        .work
        .run(memory, move || {
            let (req, tools) = crate::pipeline::for_this_model(&engine, req)?;
            let api::Input::Chat(messages) = &req.input else {
                return Err(ApiError::bad_param("messages", "`messages` is required."));
            };
            let thinking = req.thinking && engine.thinking(None).is_some();
            let options = engine::ChatOptions {
                tools: &tools,
                ..engine::ChatOptions::reply(thinking)
            };
            let prompt = engine.chat_prompt(messages, &options).map_err(|e| {
                ApiError::bad_param("messages", format!("Cannot apply the chat template: {e}"))
            })?;
            bounded_json("The prompt as JSON", budget, |w| {
                serde_json::to_writer(w, &json!({ "prompt": &prompt }))
                    .map_err(std::io::Error::other)
            })
        })
        .await??;
    Ok(json_response(answer))
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
                "dry_multiplier": f(s.dry.multiplier),
                "dry_base": f(s.dry.base),
                "dry_allowed_length": s.dry.allowed_length,
                "dry_penalty_last_n": s.dry.penalty_last_n,
                "dry_sequence_breakers": s.dry.sequence_breakers,
                "xtc_probability": f(s.xtc_probability),
                "xtc_threshold": f(s.xtc_threshold),
                "top_n_sigma": f(s.top_n_sigma),
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
