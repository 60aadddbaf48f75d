//! A request body, read whole within the server's size and time limits
//! and parsed within its memory budget: what every handler that takes a
//! body starts with.

use crate::budget::{check, json_memory};
use crate::error::ApiError;
use crate::{AppState, Limits};
use axum::body::Body;
use axum::http::{header, HeaderMap};
use futures_util::StreamExt;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest bodies the server holds at once, read and not yet parsed: a
/// body's bytes are counted as they arrive, and past this many times
/// `--body-limit` its next bytes wait (within `--read-timeout`) for other
/// bodies to be parsed. Bodies wait only for parsing, which never waits
/// for a body, so the wait always ends.
pub(crate) const BODIES_AT_ONCE: usize = 4;

/// Bodies up to this size are not counted: 512 connections of them are
/// 32 MiB, and an ordinary request never waits behind large bodies.
const UNCOUNTED_BODY_BYTES: usize = 64 << 10;

/// A body read whole, and its place in the bodies' memory.
pub(crate) struct ReadBody {
    pub(crate) bytes: Vec<u8>,
    held: Option<OwnedSemaphorePermit>,
}

/// Read the whole body within the server's size, time and memory limits.
pub(crate) async fn read_body(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<ReadBody, ApiError> {
    read_counted(&st.config.limits, headers, body, Some(&st.bodies)).await
}

/// Read the whole body within `limits.body_bytes` (413 naming
/// `--body-limit`, refused from its `Content-Length` before a byte is read)
/// and `limits.body_time` (408).
pub async fn read_body_within(
    limits: &Limits,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<u8>, ApiError> {
    Ok(read_counted(limits, headers, body, None).await?.bytes)
}

/// [`read_body_within`], each chunk's bytes taken from `bodies` (a permit
/// a byte) before it is kept, when given.
async fn read_counted(
    limits: &Limits,
    headers: &HeaderMap,
    body: Body,
    bodies: Option<&Arc<Semaphore>>,
) -> Result<ReadBody, ApiError> {
    let limit = limits.body_bytes;
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|len| len > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let read = async {
        let mut out = ReadBody {
            // Sized once from its length (within the limit, checked above):
            // a body grown by doubling takes half again its size for a time.
            bytes: Vec::with_capacity(announced.unwrap_or(0) as usize),
            held: None,
        };
        // A body of known length takes its whole place before its first
        // byte is read, so bodies never hold part of a place while waiting
        // for the rest (eight half-read bodies would wait on each other).
        if let (Some(bodies), Some(len)) = (bodies, announced) {
            if len > UNCOUNTED_BODY_BYTES as u64 {
                out.held = Some(take_place(bodies, len, true).await?);
            }
        }
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("Cannot read the body: {e}")))?;
            let total = out.bytes.len() + chunk.len();
            if total > limit {
                return Err(ApiError::too_large(limit));
            }
            // A body of unknown length is counted as it grows, and never
            // waits: past the room left it is a 503.
            if let Some(bodies) = bodies.filter(|_| announced.is_none()) {
                if total > UNCOUNTED_BODY_BYTES {
                    let new = if out.held.is_none() {
                        total
                    } else {
                        chunk.len()
                    };
                    let more = take_place(bodies, new as u64, false).await?;
                    match &mut out.held {
                        Some(held) => held.merge(more),
                        None => out.held = Some(more),
                    }
                }
            }
            out.bytes.extend_from_slice(&chunk);
        }
        Ok(out)
    };
    match tokio::time::timeout(limits.body_time, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::request_timeout(format!(
            "The request body did not arrive within {} s (or waited that long behind other \
             large bodies).",
            limits.body_time.as_secs_f64()
        ))),
    }
}

/// `bytes` of the bodies' memory: waited for when `wait`, else taken only
/// when free (503 when not).
async fn take_place(
    bodies: &Arc<Semaphore>,
    bytes: u64,
    wait: bool,
) -> Result<OwnedSemaphorePermit, ApiError> {
    let n = u32::try_from(bytes).unwrap_or(u32::MAX);
    let bodies = Arc::clone(bodies);
    let taken = if wait {
        bodies.acquire_many_owned(n).await.map_err(|_| None)
    } else {
        bodies.try_acquire_many_owned(n).map_err(|e| match e {
            tokio::sync::TryAcquireError::Closed => None,
            tokio::sync::TryAcquireError::NoPermits => Some(()),
        })
    };
    taken.map_err(|busy| match busy {
        Some(()) => ApiError::unavailable(
            "The server is reading other large bodies; send this one again shortly (or with \
             its Content-Length, to wait for room).",
            1,
        ),
        None => ApiError::unavailable("The server is shutting down.", 1),
    })
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
    let body = Arc::new(read_body(st, headers, body).await?);
    let budget = st.config.limits.request_memory;
    let inline = body.bytes.len() <= INLINE_PARSE_BYTES;
    // What parsing will take is worked out first (a scan, no allocation),
    // so the parse waits for that much of the pool's memory.
    let memory = if inline {
        json_memory(&body.bytes)
    } else {
        let body = Arc::clone(&body);
        st.work.run(0, move || json_memory(&body.bytes)).await?
    };
    check("Reading this body's JSON", memory, budget)?;
    let step = move || parse(&body.bytes);
    if inline {
        return step();
    }
    st.work.run(memory, step).await?
}
