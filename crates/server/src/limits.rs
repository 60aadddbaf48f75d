//! What one client may ask of the server: body size and time, connections,
//! requests per minute, media per request. The engine's own bounds (grammar
//! size, template steps, pixels, clip length) are [`engine::InputLimits`].
//! Every refusal names the limit and the flag that raises it.

use crate::error::ApiError;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The default largest request body: 32 MiB. The largest PNG of a
/// 2048x2048 picture (RGBA, incompressible: 16.8 MB, 22.4 MB as base64)
/// fits with a 30 s clip (48 kHz 16-bit stereo WAV: 5.8 MB, 7.7 MB as
/// base64) beside it; a phone's 12-megapixel JPEG is 3 to 7 MB.
pub const DEFAULT_BODY_LIMIT: usize = 32 << 20;

/// The bounds on one client's requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Largest request body in bytes (`--body-limit`).
    pub body_bytes: usize,
    /// Time a client has to send its request line and headers
    /// (`--read-timeout`).
    pub header_time: Duration,
    /// Time a client has to send its whole body (`--read-timeout`).
    pub body_time: Duration,
    /// Connections open at once (`--max-connections`); past it a new one is
    /// answered 503 and closed.
    pub connections: usize,
    /// Requests per minute from one client address (`--rate-limit`), or
    /// none.
    pub per_minute: Option<u32>,
    /// Images one request may carry (`--max-images`).
    pub images: usize,
    /// Audio clips one request may carry (`--max-clips`).
    pub clips: usize,
    /// Memory one request's parsing, tokenizing, answer and media may take
    /// (`--request-memory`), checked by each stage before it allocates.
    pub request_memory: usize,
    /// Threads that parse, tokenize, compile grammars and decode media
    /// (`--prep-threads`).
    pub prep_threads: usize,
    /// Requests' steps that may wait for those threads (`--prep-queue`);
    /// past it a request gets 503 with Retry-After.
    pub prep_queue: usize,
}

/// The default prep threads: one per core, at least two.
pub fn default_prep_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes: DEFAULT_BODY_LIMIT,
            header_time: Duration::from_secs(30),
            body_time: Duration::from_secs(30),
            connections: 512,
            per_minute: None,
            images: 8,
            clips: 4,
            request_memory: crate::DEFAULT_REQUEST_MEMORY,
            prep_threads: default_prep_threads(),
            prep_queue: 4 * default_prep_threads(),
        }
    }
}

/// Clients seen at once before the table drops those whose bucket is full
/// again (they have nothing to remember).
const MAX_CLIENTS: usize = 65_536;

/// A token bucket per client address: `per_minute` tokens, refilled
/// continuously, one per request.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter of `per_minute` requests per client.
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute: per_minute.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one request from `client`'s bucket at `now`: `Ok`, or the
    /// seconds until one is free.
    pub fn take(&self, client: IpAddr, now: Instant) -> Result<(), u64> {
        let cap = f64::from(self.per_minute);
        let rate = cap / 60.0;
        let refill = |(tokens, at): (f64, Instant)| {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(cap)
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(&client) {
            buckets.retain(|_, b| refill(*b) < cap);
        }
        let bucket = buckets.entry(client).or_insert((cap, now));
        let tokens = refill(*bucket);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            Ok(())
        } else {
            *bucket = (tokens, now);
            Err(((1.0 - tokens) / rate).ceil().max(1.0) as u64)
        }
    }

    /// The limit, requests per minute.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }
}

/// Middleware: a request over its client's rate gets 429 with Retry-After.
pub(crate) async fn rate_limit(
    State(st): State<crate::AppState>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(limiter) = &st.rate {
        let client = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        if let Some(client) = client {
            if let Err(secs) = limiter.take(client, Instant::now()) {
                let dialect = crate::error::Dialect::of_path(req.uri().path());
                return ApiError::rate_limited(limiter.per_minute(), secs).respond(dialect);
            }
        }
    }
    next.run(req).await
}

/// The answer to a connection past `--max-connections`, written raw before
/// it is closed (the connection never reaches the HTTP server).
pub(crate) fn too_many_connections(limit: usize) -> Vec<u8> {
    let body = ApiError::unavailable(
        format!(
            "The server has {limit} connections open, its limit; retry shortly \
             (start it with --max-connections N to raise it)."
        ),
        1,
    )
    .body()
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The request's client address, for the rate limit.
pub(crate) fn with_client<B>(
    mut req: axum::http::Request<B>,
    addr: SocketAddr,
) -> axum::http::Request<B> {
    req.extensions_mut().insert(ConnectInfo(addr));
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_rate_and_refills() {
        let limiter = RateLimiter::new(3);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take(ip, t0), Ok(()));
        }
        // The fourth waits for a token: 20 s at 3 a minute.
        assert_eq!(limiter.take(ip, t0), Err(20));
        // Another client has its own bucket.
        assert_eq!(limiter.take(other, t0), Ok(()));
        assert_eq!(limiter.take(ip, t0 + Duration::from_secs(21)), Ok(()));
        assert!(limiter.take(ip, t0 + Duration::from_secs(21)).is_err());
    }

    #[test]
    fn the_connection_refusal_is_a_whole_http_response_naming_the_flag() {
        let raw = String::from_utf8(too_many_connections(7)).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-connections"));
    }
}
