//! Ollama's `/api/pull`: fetch a model into the cache with `hearth pull`'s
//! store, streaming its progress as Ollama's NDJSON status lines. The
//! pulled model is in the cache for the next start; this server goes on
//! serving the model it loaded.
//!
//! A pull acts for the operator: it runs pip or reaches the Hub with the
//! operator's network and `HF_TOKEN`, and writes into the model cache (which
//! `--models` serves). So it is off unless the server was started with
//! `--allow-pull`, and even then a client names only a known alias or an
//! `hf:OWNER/REPO/FILE.gguf` spec, never a local path
//! ([`store::Store::pull_remote`]).

use crate::api;
use crate::body::read_json;
use crate::error::{ApiError, Dialect};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

#[derive(Deserialize)]
struct PullBody {
    model: Option<String>,
    /// The older clients' name for `model`.
    name: Option<String>,
    stream: Option<bool>,
}

/// The status line for one step of a pull.
fn status(p: &store::PullProgress) -> Value {
    match p.stage {
        "verifying" => json!({"status": "verifying sha256 digest"}),
        stage if p.total > 0 => json!({
            "status": format!("{stage} {}", p.file),
            "digest": p.file,
            "total": p.total,
            "completed": p.completed,
        }),
        stage => json!({"status": format!("{stage} {}", p.file)}),
    }
}

/// A failed pull as an HTTP error: a spec outside the grammar is the client's.
fn pull_error(e: &store::StoreError) -> ApiError {
    match e {
        store::StoreError::NotPullable { .. } | store::StoreError::BadHubSpec { .. } => {
            ApiError::bad_param("model", crate::error::redact_paths(&e.to_string()))
        }
        _ => ApiError {
            status: StatusCode::BAD_GATEWAY,
            ..ApiError::internal(format!(
                "The pull failed: {}",
                crate::error::redact_paths(&e.to_string())
            ))
        },
    }
}

/// 403 for a server started without `--allow-pull`.
fn pull_disabled() -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        code: Some("pull_disabled"),
        ..ApiError::bad_request(
            "Pulling models over HTTP is off on this server: a pull runs downloads with the \
             operator's network and credentials. The operator can start it with --allow-pull \
             to let clients pull known aliases and hf:OWNER/REPO/FILE.gguf files.",
        )
    }
}

/// Progress lines kept for a client that reads slowly; past them the newest
/// progress is dropped (the next one says more), never the last line.
const PROGRESS_LINES: usize = 64;

/// `POST /api/pull`.
pub(crate) async fn pull(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    // Refused before the body is read: nothing of the request is looked at.
    if !st.config.allow_pull {
        return pull_disabled().respond(Dialect::Ollama);
    }
    let parsed = async {
        let b: PullBody = read_json(&st, &headers, body, api::parse_json).await?;
        match b.model.or(b.name).filter(|m| !m.trim().is_empty()) {
            Some(m) => Ok((m, b.stream.unwrap_or(true))),
            None => Err(ApiError::bad_param("model", "`model` is required.")),
        }
    };
    let (spec, stream) = match parsed.await {
        Ok(p) => p,
        Err(e) => return e.respond(Dialect::Ollama),
    };
    let (tx, rx) = mpsc::channel::<Value>(PROGRESS_LINES);
    let lines = tx.clone();
    let observer = store::Observer(Arc::new(move |p: &store::PullProgress| {
        let _ = lines.try_send(status(p));
    }));
    let opts = store::PullOptions {
        observer: Some(observer),
        ..store::PullOptions::default()
    };
    let _ = tx.try_send(json!({"status": "pulling manifest"}));
    let job = tokio::task::spawn_blocking(move || store::pull_remote(spec.trim(), &opts));
    if !stream {
        return match job.await {
            Ok(Ok(_)) => Json(json!({"status": "success"})).into_response(),
            Ok(Err(e)) => pull_error(&e).respond(Dialect::Ollama),
            Err(e) => {
                ApiError::internal(format!("the pull task failed: {e}")).respond(Dialect::Ollama)
            }
        };
    }
    // The last line, once the pull is over: success or the error; it waits
    // for room rather than being dropped.
    let end = async move {
        let last = match job.await {
            Ok(Ok(_)) => json!({"status": "success"}),
            Ok(Err(e)) => pull_error(&e).body_for(Dialect::Ollama),
            Err(e) => json!({"error": format!("the pull task failed: {e}")}),
        };
        let _ = tx.send(last).await;
    };
    tokio::spawn(end);
    let lines = tokio_stream(rx).map(|v| Ok::<_, std::convert::Infallible>(format!("{v}\n")));
    let mut resp = Body::from_stream(lines).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

/// The receiver as a stream, ending when every sender is gone.
fn tokio_stream(mut rx: mpsc::Receiver<Value>) -> impl futures_util::Stream<Item = Value> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
