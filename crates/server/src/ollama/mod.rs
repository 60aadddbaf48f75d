//! Ollama's API on the same port (`/api/*`), for the apps that speak it
//! (Open WebUI, Continue, the `ollama` clients): the model listings here,
//! chat and generate in [`chat`]. Errors are Ollama's `{"error": "..."}`.

mod chat;
mod pull;
mod request;

pub(crate) use chat::{chat, generate};
pub(crate) use pull::pull;

use crate::body::read_json;
use crate::error::{ApiError, Dialect};
use crate::models::{Listed, ServedModel};
use crate::{api, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// The version of Ollama's API this server speaks, for clients that check
/// it before using newer fields (`think`, `tool_name`).
const API_VERSION: &str = "0.12.0";

/// Now, as Ollama writes times (RFC 3339 with nanoseconds, UTC).
pub(crate) fn created_at() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// A served id as Ollama names models (`NAME:TAG`).
pub(crate) fn model_name(id: &str) -> String {
    if id.contains(':') {
        id.to_string()
    } else {
        format!("{id}:latest")
    }
}

/// `GET /api/version`.
pub(crate) async fn version() -> Json<Value> {
    Json(json!({ "version": API_VERSION }))
}

/// The model's size on disk and modification time, and a digest that
/// names these files at this size and time (not a hash of their bytes,
/// which would read every file on every listing).
fn file_facts(model: &ServedModel) -> (u64, String, String) {
    use sha2::{Digest, Sha256};
    let size = model.disk_bytes();
    let modified = std::fs::metadata(&model.path)
        .and_then(|m| m.modified())
        .map(chrono::DateTime::<chrono::Utc>::from)
        .unwrap_or_else(|_| chrono::Utc::now());
    let mut h = Sha256::new();
    h.update(format!("{:?}|{size}|{modified}", model.path).as_bytes());
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    (
        size,
        modified.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        digest,
    )
}

/// Ollama's `details` of a model (family and quantization once loaded).
fn details(listed: &Listed) -> Value {
    let (family, quant) = match &listed.loaded {
        Some(l) => (
            l.backend.engine.model().config().arch.name().to_string(),
            l.backend.engine.weight_type().unwrap_or("").to_string(),
        ),
        None => (String::new(), String::new()),
    };
    let format = if listed.model.path.is_dir() {
        "safetensors"
    } else {
        "gguf"
    };
    json!({
        "parent_model": "",
        "format": format,
        "family": family,
        "families": [family],
        "parameter_size": "",
        "quantization_level": quant,
    })
}

/// A model as a listing entry.
fn entry(listed: &Listed) -> Value {
    let id = listed.model.id();
    let (size, modified, digest) = file_facts(&listed.model);
    json!({
        "name": model_name(id),
        "model": model_name(id),
        "modified_at": modified,
        "size": size,
        "digest": digest,
        "details": details(listed),
    })
}

/// `GET /api/tags`: every model this server serves, loaded or not.
pub(crate) async fn tags(State(st): State<AppState>) -> Json<Value> {
    st.models.refresh().await;
    let models: Vec<Value> = st.models.list().iter().map(entry).collect();
    Json(json!({ "models": models }))
}

/// `GET /api/ps`: the models in memory, with what they take and when they
/// will be unloaded if left idle.
pub(crate) async fn ps(State(st): State<AppState>) -> Json<Value> {
    let now = std::time::Instant::now();
    let list = st.models.list();
    let models: Vec<Value> = st
        .models
        .in_memory()
        .iter()
        .map(|l| {
            let mut e = entry(&list[l.index]);
            e["size"] = json!(l.bytes);
            e["size_vram"] = json!(0);
            e["context_length"] = json!(l.backend.engine.n_ctx());
            // "Never", for a pinned model or keep_alive -1, as a date every
            // client's parser reads.
            let left = match l.expires() {
                Some(t) => chrono::TimeDelta::from_std(t.saturating_duration_since(now))
                    .unwrap_or_default(),
                None => chrono::TimeDelta::days(100 * 365),
            };
            let until = chrono::Utc::now() + left;
            e["expires_at"] = json!(until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            e
        })
        .collect();
    Json(json!({ "models": models }))
}

#[derive(Deserialize)]
struct ShowBody {
    model: Option<String>,
    /// The older clients' name for `model`.
    name: Option<String>,
}

/// `POST /api/show`: the model's details, settings and capabilities.
pub(crate) async fn show(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    show_inner(&st, &headers, body)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::Ollama))
}

async fn show_inner(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let b: ShowBody = read_json(st, headers, body, api::parse_json).await?;
    let Some(asked) = b.model.or(b.name) else {
        return Err(ApiError::bad_param("model", "`model` is required."));
    };
    let backend = st.models.lease(Some(&asked)).await?;
    let listed = &st.models.list()[backend.0.index];
    let e = &backend.engine;
    let cfg = e.model().config();
    let arch = cfg.arch.name();
    let s = &e.options().sampling;
    let parameters = format!(
        "temperature {}\ntop_k {}\ntop_p {}\nmin_p {}\nrepeat_penalty {}\nrepeat_last_n {}",
        s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.repeat_last_n
    );
    let mut capabilities = vec!["completion", "tools"];
    if e.embedding_dim().is_some() {
        capabilities = vec!["embedding"];
    }
    if e.has_vision() {
        capabilities.push("vision");
    }
    if e.has_audio() {
        capabilities.push("audio");
    }
    if e.thinking(None).is_some() {
        capabilities.push("thinking");
    }
    let (_, modified, _) = file_facts(&listed.model);
    Ok(Json(json!({
        "license": "",
        "modelfile": "",
        "parameters": parameters,
        "template": "",
        "details": details(listed),
        "model_info": {
            "general.architecture": arch,
            format!("{arch}.context_length"): cfg.context_length,
            format!("{arch}.block_count"): cfg.n_layers,
            format!("{arch}.embedding_length"): cfg.hidden,
            "general.file_type": e.weight_type(),
            "tokenizer.ggml.vocab_size": cfg.vocab,
        },
        "capabilities": capabilities,
        "modified_at": modified,
    }))
    .into_response())
}

/// Parse and check an `/api/chat` body as the handler does before it
/// generates (`keep_alive` included): the request and whether to stream,
/// or `None` for a body with no messages (a load or unload). Public for
/// the fuzz targets.
pub fn parse_chat(
    body: &[u8],
    defaults: &engine::SamplingParams,
) -> Result<Option<(api::Request, bool)>, ApiError> {
    let b: request::ChatBody = api::parse_json(body)?;
    if let Some(k) = &b.common.keep_alive {
        request::keep_alive(k)?;
    }
    if b.messages.is_empty() {
        return Ok(None);
    }
    let stream = b.common.stream.unwrap_or(true);
    request::chat_request(b, defaults).map(|r| Some((r, stream)))
}

/// [`parse_chat`] for an `/api/generate` body (`None`: no prompt and no
/// images, a load or unload). Public for the fuzz targets.
pub fn parse_generate(
    body: &[u8],
    defaults: &engine::SamplingParams,
) -> Result<Option<(api::Request, bool)>, ApiError> {
    let b: request::GenerateBody = api::parse_json(body)?;
    if let Some(k) = &b.common.keep_alive {
        request::keep_alive(k)?;
    }
    if b.prompt.is_empty() && b.images.is_empty() {
        return Ok(None);
    }
    let stream = b.common.stream.unwrap_or(true);
    request::generate_request(b, defaults).map(|r| Some((r, stream)))
}
