//! A request body, read whole within the server's size and time limits
//! and parsed within its memory budget: what every handler that takes a
//! body starts with.

use crate::budget::check_json;
use crate::error::ApiError;
use crate::{AppState, Limits};
use axum::body::Body;
use axum::http::{header, HeaderMap};
use futures_util::StreamExt;

/// Read the whole body within the server's size limit and time limit.
pub(crate) async fn read_body(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<u8>, ApiError> {
    read_body_within(&st.config.limits, headers, body).await
}

/// Read the whole body within `limits.body_bytes` (413 naming
/// `--body-limit`, refused from its `Content-Length` before a byte is read)
/// and `limits.body_time` (408).
pub async fn read_body_within(
    limits: &Limits,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<u8>, ApiError> {
    let limit = limits.body_bytes;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(ApiError::too_large(limit));
        }
    }
    let read = async {
        let mut out = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("Cannot read the body: {e}")))?;
            if out.len() + chunk.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    };
    match tokio::time::timeout(limits.body_time, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::request_timeout(format!(
            "The request body did not arrive within {} s.",
            limits.body_time.as_secs_f64()
        ))),
    }
}

/// Bodies up to this size are parsed on the runtime's own thread: they
/// take well under a millisecond.
const INLINE_PARSE_BYTES: usize = 64 << 10;

/// Read the whole body (as [`read_body`]) and parse it with `parse`, once
/// what its JSON takes in memory is checked against the request's budget.
/// A body past [`INLINE_PARSE_BYTES`] is checked and parsed on the prep
/// pool: reading 32 MiB of JSON takes a runtime thread for a tenth of a
/// second.
pub(crate) async fn read_json<T, F>(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
    parse: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&[u8]) -> Result<T, ApiError> + Send + 'static,
{
    let bytes = read_body(st, headers, body).await?;
    let budget = st.config.limits.request_memory;
    let inline = bytes.len() <= INLINE_PARSE_BYTES;
    let step = move || {
        check_json(&bytes, budget)?;
        parse(&bytes)
    };
    if inline {
        return step();
    }
    st.work.run(step).await?
}
