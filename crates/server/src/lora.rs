//! llama.cpp's `/lora-adapters`: `GET` lists the LoRA adapters a model
//! was started with (`--lora`) and the scales requests run them at;
//! `POST` sets those scales (`[{"id": 0, "scale": 0.5}]`, adapters not
//! listed off), which a model unloaded and loaded again keeps. A
//! request's own `lora` field overrides them for itself.

use crate::api::{lora_pairs, LoraEntry};
use crate::error::ApiError;
use crate::{body::read_json, AppState};
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// The query of a `/lora-adapters` request.
#[derive(Debug, Deserialize)]
pub(crate) struct LoraQuery {
    /// The model whose adapters are meant (default: the first served).
    model: Option<String>,
}

/// `GET /lora-adapters`: `[{"id", "path", "scale"}]`.
pub(crate) async fn list(
    State(st): State<AppState>,
    Query(q): Query<LoraQuery>,
) -> Result<Json<Value>, ApiError> {
    let lease = st.models.lease(q.model.as_deref()).await?;
    Ok(Json(listing(&lease.engine)))
}

/// `POST /lora-adapters`: sets every adapter's scale; answers
/// `{"success": true}` as llama.cpp does.
pub(crate) async fn set(
    State(st): State<AppState>,
    Query(q): Query<LoraQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let entries = read_json(&st, &headers, body, parse_scales).await?;
    let lease = st.models.lease(q.model.as_deref()).await?;
    st.models
        .set_lora_scales(&lease, entries)
        .map_err(|e| ApiError::bad_request(format!("{e}.")))?;
    Ok(Json(json!({ "success": true })))
}

/// The adapters of `engine` as llama.cpp lists them.
fn listing(engine: &engine::Engine) -> Value {
    let adapters = engine.lora_adapters();
    Value::Array(
        adapters
            .iter()
            .map(|a| json!({ "id": a.id, "path": a.path.display().to_string(), "scale": a.scale }))
            .collect(),
    )
}

/// A `POST /lora-adapters` body: a JSON array of `{"id", "scale"}`.
fn parse_scales(body: &[u8]) -> Result<Vec<(usize, f32)>, ApiError> {
    let entries: Vec<LoraEntry> = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "The body must be a JSON array of {{\"id\": <adapter id>, \"scale\": <number>}}: {e}"
        ))
    })?;
    lora_pairs(&entries, "body")
}
