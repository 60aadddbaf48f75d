//! `/v1/chat/completions` and `/v1/completions`: parse, submit through the
//! [`pipeline`](crate::pipeline), and answer as one JSON object
//! ([`shape`]) or as a stream of chunks ([`stream`]) in OpenAI's shapes,
//! with one choice per `n`.

mod shape;
mod stream;

use crate::api;
use crate::body::read_json;
use crate::error::ApiError;
use crate::pipeline::{self, Submitted};
use crate::reply::{self, Reply};
use crate::{new_id, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use shape::{Kind, Meta};
use std::time::Instant;

pub(crate) async fn chat_completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    generate(st, headers, body, Kind::Chat)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(crate) async fn completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    generate(st, headers, body, Kind::Completion)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn generate(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    kind: Kind,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let defaults = pipeline::sampling_defaults(&st);
    let req = read_json(&st, &headers, body, move |bytes| match kind {
        Kind::Chat => api::parse_chat(bytes, &defaults),
        Kind::Completion => api::parse_completion(bytes, &defaults),
    })
    .await?;
    let Submitted {
        model,
        req,
        reply,
        more,
        dropped_turns,
        ..
    } = pipeline::submit(&st, req, received).await?;
    let meta = Meta {
        id: new_id(match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        }),
        created: api::now_secs(),
        model,
        kind,
        dropped_turns,
        logprobs: req.logprobs.is_some(),
    };
    let replies: Vec<Reply> = std::iter::once(reply).chain(more).collect();
    if req.stream {
        let replies = replies.into_iter().map(Reply::streaming_calls).collect();
        let resp = stream::respond(meta, req.include_usage, replies);
        return Ok(pipeline::mark_dropped(resp, dropped_turns));
    }
    let all = futures_util::future::try_join_all(replies.into_iter().map(reply::collect));
    let all = reply::within(st.config.request_timeout, all).await?;
    let resp = Json(meta.whole(all)).into_response();
    Ok(pipeline::mark_dropped(resp, dropped_turns))
}
