//! Ollama's API on the same port (`/api/*`), for the apps that speak it
//! (Open WebUI, Continue, the `ollama` clients): the model listings here,
//! chat and generate in [`chat`]. Errors are Ollama's `{"error": "..."}`.

mod chat;
mod pull;
mod request;

pub(crate) use chat::{chat, generate};
pub(crate) use pull::pull;

use crate::error::{ApiError, Dialect};
use crate::routes::{read_body, resolve_model};
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

/// The file's size and modification time, and a digest that names this
/// file at this size and time (not a hash of its bytes, which would read
/// the whole file on every listing).
fn file_facts(st: &AppState) -> (u64, String, String) {
    use sha2::{Digest, Sha256};
    let meta = st
        .config
        .model_path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok());
    let size = meta.as_ref().map_or(0, |m| m.len());
    let modified = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .map(chrono::DateTime::<chrono::Utc>::from)
        .unwrap_or_else(chrono::Utc::now);
    let mut h = Sha256::new();
    h.update(format!("{:?}|{size}|{modified}", st.config.model_path).as_bytes());
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    (
        size,
        modified.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        digest,
    )
}

/// Ollama's `details` of the served model.
fn details(st: &AppState) -> Value {
    let (family, quant) = match st.backend.get() {
        Some(b) => (
            b.engine.model().config().arch.name().to_string(),
            b.engine.weight_type().unwrap_or("").to_string(),
        ),
        None => (String::new(), String::new()),
    };
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": "",
        "quantization_level": quant,
    })
}

/// The served model as a listing entry.
fn entry(st: &AppState) -> Value {
    let id = st.config.model_ids.first().cloned().unwrap_or_default();
    let (size, modified, digest) = file_facts(st);
    json!({
        "name": model_name(&id),
        "model": model_name(&id),
        "modified_at": modified,
        "size": size,
        "digest": digest,
        "details": details(st),
    })
}

/// `GET /api/tags`: the models this server serves.
pub(crate) async fn tags(State(st): State<AppState>) -> Json<Value> {
    Json(json!({ "models": [entry(&st)] }))
}

/// `GET /api/ps`: the models in memory, with what they take.
pub(crate) async fn ps(State(st): State<AppState>) -> Json<Value> {
    let Some(b) = st.backend.get() else {
        return Json(json!({ "models": [] }));
    };
    let mut e = entry(&st);
    let kv = b.engine.kv_bytes() * st.config.parallel.max(1);
    e["size"] = json!(e["size"].as_u64().unwrap_or(0) + kv as u64);
    e["size_vram"] = json!(0);
    e["context_length"] = json!(b.engine.n_ctx());
    // The model stays loaded for the server's life (or until --idle-exit).
    let until = match st.config.idle_exit {
        Some(d) => chrono::Utc::now() + d,
        // "Never", as a date every client's parser reads.
        None => chrono::Utc::now() + chrono::TimeDelta::days(100 * 365),
    };
    e["expires_at"] = json!(until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    Json(json!({ "models": [e] }))
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
    let b: ShowBody = api::parse_json(&read_body(st, headers, body).await?)?;
    let Some(asked) = b.model.or(b.name) else {
        return Err(ApiError::bad_param("model", "`model` is required."));
    };
    resolve_model(st, Some(&asked))?;
    let Some(backend) = st.backend.get() else {
        return Err(ApiError::unavailable("The model is loading.", 1));
    };
    let e = &backend.engine;
    let cfg = e.model().config();
    let arch = cfg.arch.name();
    let s = &e.options().sampling;
    let parameters = format!(
        "temperature {}\ntop_k {}\ntop_p {}\nmin_p {}\nrepeat_penalty {}\nrepeat_last_n {}",
        s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.repeat_last_n
    );
    let mut capabilities = vec!["completion", "tools"];
    if e.has_vision() {
        capabilities.push("vision");
    }
    if e.has_audio() {
        capabilities.push("audio");
    }
    if e.thinking(None).is_some() {
        capabilities.push("thinking");
    }
    let (_, modified, _) = file_facts(st);
    Ok(Json(json!({
        "license": "",
        "modelfile": "",
        "parameters": parameters,
        "template": "",
        "details": details(st),
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
