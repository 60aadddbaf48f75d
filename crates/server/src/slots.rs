//! llama.cpp's `/slots`, for clients that manage prompt states by hand:
//! `GET /slots` shows each slot, and `POST /slots/{id}?action=save|restore`
//! writes a slot's state to a file in `--slot-save-path` or puts one back
//! (`{"filename": NAME}`), `action=erase` empties a slot. A file serves
//! only the model, options and API key that saved it.

use crate::error::ApiError;
use crate::models::Lease;
use crate::scheduler::{Rejected, SlotAction, SlotAnswer, SlotChange, SlotRequest};
use crate::{api, body::read_json, AppState};
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use prompt_cache::{NamedFileError, Namespace};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

/// The query of a `/slots` request.
#[derive(Debug, Deserialize)]
pub(crate) struct SlotsQuery {
    /// `save`, `restore` or `erase`.
    action: Option<String>,
    /// The model whose slots are meant (default: the first served).
    model: Option<String>,
    /// `GET /slots?fail_on_no_slot=1`: 503 when every slot is busy.
    fail_on_no_slot: Option<String>,
}

/// The body of a save or restore.
#[derive(Debug, Deserialize)]
struct FileBody {
    filename: String,
}

/// `GET /slots`: each slot of the model, busy or idle.
pub(crate) async fn list(
    State(st): State<AppState>,
    Query(q): Query<SlotsQuery>,
) -> Result<Json<Value>, ApiError> {
    let lease = st.models.lease(q.model.as_deref()).await?;
    let SlotAnswer::Slots(views) = ask(&lease, SlotAction::List).await? else {
        return Err(another_answer());
    };
    let fail = q.fail_on_no_slot.as_deref().is_some_and(|v| v != "0");
    if fail && views.iter().all(|v| v.is_processing) {
        return Err(ApiError::unavailable("No slot is available.", 1));
    }
    let n_ctx = lease.engine.n_ctx();
    let speculative = lease.speculation.is_some();
    Ok(Json(Value::Array(
        views
            .iter()
            .map(|v| {
                json!({
                    "id": v.id,
                    "id_task": -1,
                    "n_ctx": n_ctx,
                    "speculative": speculative,
                    "is_processing": v.is_processing,
                })
            })
            .collect(),
    )))
}

/// `POST /slots/{id}?action=save|restore|erase`.
pub(crate) async fn act(
    State(st): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<SlotsQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let slot: usize = id
        .parse()
        .map_err(|_| ApiError::bad_param("id_slot", format!("`{id}` is not a slot number.")))?;
    let action = q.action.as_deref().unwrap_or("");
    if action == "erase" {
        let lease = slot_lease(&st, q.model.as_deref()).await?;
        let SlotAnswer::Erased(n) = ask(&lease, SlotAction::On(slot, SlotChange::Erase)).await?
        else {
            return Err(another_answer());
        };
        return Ok(Json(json!({ "id_slot": slot, "n_erased": n })));
    }
    if !matches!(action, "save" | "restore") {
        return Err(ApiError::bad_param(
            "action",
            "`action` must be `save`, `restore` or `erase`.",
        ));
    }
    let Some(dir) = st.config.slot_save_path.clone() else {
        return Err(ApiError::not_implemented(
            "Slot files are off: start the server with `--slot-save-path DIR`.",
        ));
    };
    let FileBody { filename } = read_json(&st, &headers, body, api::parse_json).await?;
    check_name(&filename)?;
    let lease = slot_lease(&st, q.model.as_deref()).await?;
    let ns = lease
        .namespace
        .ok_or_else(|| {
            ApiError::unavailable(
                "The model's files could not be identified to save states.",
                5,
            )
        })?
        .for_caller(crate::routes::caller().as_ref());
    let path = dir.join(&filename);
    let mut answer = match action {
        "save" => save(&st, &lease, slot, ns, path).await?,
        _ => restore(&st, &lease, slot, ns, path).await?,
    };
    answer["id_slot"] = json!(slot);
    answer["filename"] = json!(filename);
    Ok(Json(answer))
}

/// Writes the slot's state to `path`.
async fn save(
    st: &AppState,
    lease: &Lease,
    slot: usize,
    ns: Namespace,
    path: PathBuf,
) -> Result<Value, ApiError> {
    let started = Instant::now();
    let SlotAnswer::Saved(saved, adapters) =
        ask(lease, SlotAction::On(slot, SlotChange::Save)).await?
    else {
        return Err(another_answer());
    };
    let ns = ns.with_adapters(&adapters);
    let tokens = saved.tokens.len();
    let held = saved.kv.len() as u64;
    let limit = st.config.slot_save_bytes;
    let written = st
        .work
        .run(held, move || {
            prompt_cache::save_named(&path, &ns, &saved, limit)
        })
        .await?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::StorageFull => ApiError::insufficient_storage(format!(
                "Not saved: {}. Erase files there or raise --slot-save-disk.",
                e.into_inner().map_or_else(String::new, |e| e.to_string())
            )),
            kind => ApiError::internal(format!("Cannot write the file: {kind}")),
        })?;
    Ok(json!({
        "n_saved": tokens,
        "n_written": written,
        "timings": { "save_ms": started.elapsed().as_secs_f64() * 1e3 },
    }))
}

/// Puts the state at `path` in the slot.
async fn restore(
    st: &AppState,
    lease: &Lease,
    slot: usize,
    ns: Namespace,
    path: PathBuf,
) -> Result<Value, ApiError> {
    let started = Instant::now();
    let engine = &lease.engine;
    // Restored to run with the adapters requests run with by default.
    let adapters = engine
        .adapters_for(None)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let ns = ns.with_adapters(&adapters.key());
    // A whole context's cache, its tokens and a header: no state is longer.
    let limit = (engine.kv_bytes() + 48 * engine.n_ctx() + (1 << 20)) as u64;
    let (saved, read) = st
        .work
        .run(limit, move || prompt_cache::load_named(&path, &ns, limit))
        .await?
        .map_err(|e| match e {
            NamedFileError::Missing => ApiError::not_found(format!("Cannot restore it: {e}.")),
            NamedFileError::Io(e) => {
                ApiError::internal(format!("Cannot read the file: {}", e.kind()))
            }
            e => ApiError::bad_param("filename", format!("Cannot restore it: {e}.")),
        })?;
    let SlotAnswer::Restored(n) = ask(
        lease,
        SlotAction::On(slot, SlotChange::Restore(saved, adapters)),
    )
    .await?
    else {
        return Err(another_answer());
    };
    Ok(json!({
        "n_restored": n,
        "n_read": read,
        "timings": { "restore_ms": started.elapsed().as_secs_f64() * 1e3 },
    }))
}

/// The model whose slots are meant; an embedding model has none.
async fn slot_lease(st: &AppState, model: Option<&str>) -> Result<Lease, ApiError> {
    let lease = st.models.lease(model).await?;
    if lease.embedder.is_some() {
        return Err(ApiError::bad_param(
            "model",
            "An embedding model has no slots.",
        ));
    }
    Ok(lease)
}

/// A file name a client may give: letters, digits, `.`, `_` and `-`, not
/// starting with a dot (no folders, no hidden or temporary names).
fn check_name(name: &str) -> Result<(), ApiError> {
    let fine = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    match fine {
        true => Ok(()),
        false => Err(ApiError::bad_param(
            "filename",
            "`filename` must be a plain name of up to 200 letters, digits, `.`, `_` and `-`, not starting with `.`.",
        )),
    }
}

/// The scheduler answered something other than what was asked (a bug).
fn another_answer() -> ApiError {
    ApiError::internal("the scheduler answered another question")
}

/// Asks the model's scheduler `action` and waits for its answer.
async fn ask(lease: &Lease, action: SlotAction) -> Result<SlotAnswer, ApiError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let request = SlotRequest {
        action,
        caller: crate::routes::caller(),
        reply,
    };
    lease.scheduler.ask(request).map_err(|r| match r {
        Rejected::QueueFull => ApiError::queue_full(1),
        Rejected::ShuttingDown => ApiError::unavailable("The server is shutting down.", 5),
    })?;
    answer
        .await
        .map_err(|_| ApiError::unavailable("The model stopped before answering.", 1))?
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn only_plain_names_are_taken() {
        for fine in ["slot.bin", "a-b_c.2", "X"] {
            assert!(check_name(fine).is_ok(), "{fine}");
        }
        let long = "a".repeat(201);
        for bad in [
            "", ".hidden", "..", "../x", "a/b", "a\\b", "a b", "ü", "a\0", &long,
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
