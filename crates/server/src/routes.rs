//! The router and the small handlers: authentication, request counting,
//! activity tracking (for `--idle-exit`), health, metrics and the model list.

use crate::browser::{self, BrowserPolicy};
use crate::error::{ApiError, Dialect};
use crate::idle::TrackedBody;
use crate::{
    anthropic, audio, completions, embeddings, ollama, responses, slots, utility, AppState,
};
use axum::body::Body;
use axum::extract::{Path as UrlPath, Request as HttpRequest, State};
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

/// Every route: the APIs behind the key and the rate limit (OpenAI,
/// Anthropic, Ollama and llama.cpp's utilities), taking JSON bodies but for
/// the audio API's forms; `/health` and `/metrics` behind the key too unless `--public-health`; the
/// chat page open (it asks for the key itself); the browser checks of the
/// server bound at `bound`; request counting; panics caught.
pub(crate) fn router(state: AppState, bound: SocketAddr) -> Router {
    let v1 = json_apis(&state);
    let forms = form_apis(&state);
    let probes = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_text));
    let probes = if state.config.public_health {
        probes
    } else {
        probes.route_layer(middleware::from_fn_with_state(state.clone(), auth))
    };
    let cors = cors_layer(&state.config.cors);
    let policy = Arc::new(BrowserPolicy::new(
        bound,
        &state.config.cors,
        &state.config.allowed_hosts,
    ));
    let metrics = Arc::clone(&state.metrics);
    let router = Router::new()
        .merge(v1)
        .merge(forms)
        .merge(probes)
        .merge(crate::ui::router(&state.config))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Inside the counting, so refusals show in /metrics.
        .layer(middleware::from_fn(move |req, next| {
            browser::guard(Arc::clone(&policy), req, next)
        }))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            track_activity,
        ))
        .with_state(state);
    // Outside the rest, so a browser's preflight is answered before the key
    // check (a preflight from an origin not allowed gets no CORS headers,
    // and the request after it is refused).
    let router = match cors {
        Some(layer) => router.layer(layer),
        None => router,
    };
    // Outermost, so a panic anywhere in a request ends only that request.
    router.layer(middleware::from_fn(move |req, next| {
        crate::panics::catch_panics(Arc::clone(&metrics), req, next)
    }))
}

/// The APIs that take JSON bodies (OpenAI, Anthropic, Ollama and
/// llama.cpp's utilities), behind the key and the rate limit.
fn json_apis(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(completions::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/completion", post(crate::native::completion))
        .route("/completions", post(crate::native::completion))
        .route("/infill", post(crate::native::infill))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*id}", get(get_model))
        .route("/tokenize", post(utility::tokenize))
        .route("/detokenize", post(utility::detokenize))
        .route("/apply-template", post(utility::apply_template))
        .route("/props", get(utility::props))
        .route("/slots", get(slots::list))
        .route("/slots/{id}", post(slots::act))
        .route(
            "/lora-adapters",
            get(crate::lora::list).post(crate::lora::set),
        )
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/api/version", get(ollama::version))
        .route("/api/tags", get(ollama::tags))
        .route("/api/ps", get(ollama::ps))
        .route("/api/show", post(ollama::show))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/pull", post(ollama::pull))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/api/embed", post(embeddings::ollama_embed))
        .route("/api/embeddings", post(embeddings::ollama_embeddings))
        .route("/v1/rerank", post(embeddings::rerank))
        .route("/v2/rerank", post(embeddings::rerank))
        .route("/rerank", post(embeddings::rerank))
        .route("/reranking", post(embeddings::rerank))
        .route("/v1/reranking", post(embeddings::rerank))
        .route_layer(middleware::from_fn(browser::require_json))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth))
        // Outside the key check, so guessing keys counts against the rate.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::limits::rate_limit,
        ))
}

/// The audio API, which takes multipart forms: a type a page on another
/// site can send without a preflight, so `browser::guard` refuses such a
/// page by its `Origin` and `Sec-Fetch-Site`; behind the key and the rate
/// limit as the JSON APIs are.
fn form_apis(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/audio/transcriptions", post(audio::transcriptions))
        .route("/v1/audio/translations", post(audio::translations))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::limits::rate_limit,
        ))
}

/// `--cors ORIGIN...`: the origins a browser page may call from (`*` for
/// any); none by default, as a page on another origin should not reach a
/// local model unless its owner says so.
fn cors_layer(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods(Any)
            .allow_headers(Any)
            .max_age(std::time::Duration::from_secs(600)),
    )
}

async fn count_requests(State(st): State<AppState>, req: HttpRequest, next: Next) -> Response {
    let endpoint = match req.uri().path() {
        "/v1/chat/completions" => "chat_completions",
        "/v1/completions" => "completions",
        "/completion" | "/completions" => "completion",
        "/infill" => "infill",
        "/v1/models" => "models",
        p if p.starts_with("/v1/models/") => "models",
        "/health" => "health",
        "/metrics" => "metrics",
        "/tokenize" | "/detokenize" | "/apply-template" | "/props" => "utility",
        p if p == "/slots" || p.starts_with("/slots/") => "slots",
        "/v1/responses" => "responses",
        "/v1/embeddings" => "embeddings",
        "/v1/rerank" | "/v2/rerank" | "/rerank" | "/reranking" | "/v1/reranking" => "rerank",
        "/v1/messages" => "messages",
        "/v1/messages/count_tokens" => "count_tokens",
        "/api/chat" => "ollama_chat",
        "/api/generate" => "ollama_generate",
        p if p.starts_with("/api/") => "ollama",
        _ => "other",
    };
    let resp = next.run(req).await;
    st.metrics.record_request(endpoint, resp.status().as_u16());
    resp
}

/// Count the request as activity from its arrival until its response body
/// is sent in full (a stream included), except health and metrics probes
/// unless `idle_counts_probes`.
async fn track_activity(State(st): State<AppState>, req: HttpRequest, next: Next) -> Response {
    let probe = matches!(req.uri().path(), "/health" | "/metrics");
    if probe && !st.config.idle_counts_probes {
        return next.run(req).await;
    }
    let guard = st.activity.begin();
    let resp = next.run(req).await;
    resp.map(|body| Body::new(TrackedBody::new(body, guard)))
}

/// Compare in constant time: both sides are hashed to 32 bytes first, so
/// neither the key's bytes nor its length show in the time taken.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

tokio::task_local! {
    /// The caller of the request being handled: a digest of the API key it
    /// gave, where the server has keys and keeps each key's prompt states
    /// apart ([`ServerConfig::cache_shared`](crate::ServerConfig) off).
    static CALLER: Option<[u8; 32]>;
}

/// The caller of the request this task handles ([`CALLER`]); `None`
/// outside one, without keys, or with states shared.
pub(crate) fn caller() -> Option<[u8; 32]> {
    CALLER.try_with(|c| *c).ok().flatten()
}

/// The digest that stands for `key` in the prompt-state store.
fn caller_of(key: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut sha = Sha256::new();
    sha.update(b"hearth caller\0");
    sha.update(key);
    sha.finalize().into()
}

async fn auth(State(st): State<AppState>, req: HttpRequest, next: Next) -> Response {
    let keys = &st.config.api_keys;
    if keys.is_empty() {
        return CALLER.scope(None, next.run(req)).await;
    }
    // `Authorization: Bearer KEY` (OpenAI), or `x-api-key: KEY` as
    // Anthropic's clients send it.
    let headers = req.headers();
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim);
    let dialect = Dialect::of_path(req.uri().path());
    let Some(given) = given else {
        return ApiError::unauthorized(
            "Missing API key: send `Authorization: Bearer KEY` or `x-api-key: KEY`.",
        )
        .respond(dialect);
    };
    // Every key is compared, so the time taken does not tell which matched.
    let matched = keys.iter().fold(None, |found, k| {
        let same = same_key(given.as_bytes(), k.as_bytes());
        found.or(same.then_some(k))
    });
    let Some(key) = matched else {
        return ApiError::unauthorized("Incorrect API key provided.").respond(dialect);
    };
    let caller = (!st.config.cache_shared).then(|| caller_of(key.as_bytes()));
    CALLER.scope(caller, next.run(req)).await
}

async fn not_found(req: HttpRequest) -> Response {
    let path = req.uri().path();
    ApiError::not_found(format!("Unknown route: {} {path}", req.method()))
        .respond(Dialect::of_path(path))
}

async fn method_not_allowed(req: HttpRequest) -> Response {
    ApiError::method_not_allowed().respond(Dialect::of_path(req.uri().path()))
}

async fn health(State(st): State<AppState>) -> Response {
    if st.models.ready() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        ApiError::unavailable("The model is loading.", 1).into_response()
    }
}

async fn metrics_text(State(st): State<AppState>) -> Response {
    let mut text = st.metrics.render();
    text.push_str(&crate::models::render_metrics(&st.models));
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// A model object, with what it runs as when loaded (`meta`, as llama.cpp's
/// server reports it) and what it can take (`capabilities`, for the chat
/// page's picker).
fn model_json(st: &AppState, listed: &crate::models::Listed) -> Value {
    let mut v = json!({
        "id": listed.model.id(),
        "object": "model",
        "created": st.created,
        "owned_by": "hearth",
        "loaded": listed.loaded.is_some(),
        "capabilities": capabilities(listed),
    });
    if let Some(l) = &listed.loaded {
        let e = &l.backend.engine;
        let o = e.options();
        v["meta"] = json!({
            "architecture": e.model().config().arch.name(),
            "weights": e.weight_type(),
            "precision": match o.precision {
                engine::Precision::Quantized => "quantized",
                engine::Precision::Exact => "exact",
            },
            "kv_cache": e.model().kv_type().name(),
            "requantized_to": o.quant,
            "n_ctx": e.n_ctx(),
            "n_ctx_train": e.model().config().context_length,
            "n_vocab": e.model().config().vocab,
            "threads": o.threads,
            "parallel": st.config.parallel,
            "image": e.image_settings(),
            "audio_max_tokens": e.audio_tokens(),
        });
    }
    v
}

/// What a model takes besides text: from the loaded engine, or before its
/// first load from its files' metadata (an embedding model is known only
/// once loaded).
pub(crate) fn capabilities(listed: &crate::models::Listed) -> Vec<&'static str> {
    let mut caps = Vec::new();
    match &listed.loaded {
        Some(l) => {
            let e = &l.backend.engine;
            if e.embedding_dim().is_some() {
                return vec!["embedding"];
            }
            caps.push("completion");
            if e.has_vision() {
                caps.push("vision");
            }
            if e.has_audio() {
                caps.push("audio");
            }
        }
        None => {
            caps.push("completion");
            if listed.model.towers.vision {
                caps.push("vision");
            }
            if listed.model.towers.audio {
                caps.push("audio");
            }
        }
    }
    caps
}

async fn list_models(State(st): State<AppState>) -> Json<Value> {
    st.models.refresh().await;
    let data: Vec<Value> = st
        .models
        .list()
        .iter()
        .map(|l| model_json(&st, l))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn get_model(State(st): State<AppState>, UrlPath(id): UrlPath<String>) -> Response {
    match st.models.find(Some(&id)).await {
        Ok(index) => Json(model_json(&st, &st.models.list()[index])).into_response(),
        Err(e) => e.into_response(),
    }
}
