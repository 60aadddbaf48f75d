//! Webhook mode: Telegram posts each update to our URL with the secret
//! token in a header; a post without the right one is refused before it is
//! read. `/health` answers 200 for the platform's probes.

use crate::store::StoreError;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::watch;

/// The header Telegram puts the secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Largest update body accepted (Telegram's are a few KiB).
const MAX_BODY: usize = 4 << 20;

/// Takes a received update into the bot.
pub trait Ingest: Send + Sync + 'static {
    /// Check, store and queue one update.
    fn ingest(&self, raw: &Value) -> Result<(), StoreError>;
}

struct Hook {
    ingest: Arc<dyn Ingest>,
    secret: String,
}

/// Serve the webhook at the path of `url` on `listener` until `stop`.
pub(crate) async fn serve(
    ingest: Arc<dyn Ingest>,
    listener: tokio::net::TcpListener,
    url: String,
    secret: String,
    mut stop: watch::Receiver<bool>,
) -> Result<(), crate::BotError> {
    let path = reqwest::Url::parse(&url)
        .map(|u| u.path().to_owned())
        .map_err(|e| crate::BotError::Config(format!("bad webhook URL {url:?}: {e}")))?;
    let path = if path.is_empty() {
        "/".to_owned()
    } else {
        path
    };
    let hook = Arc::new(Hook { ingest, secret });
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(&path, post(receive))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(hook);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(|e| crate::BotError::Config(format!("the webhook server failed: {e}")))
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let given = headers
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if !same(given, hook.secret.as_bytes()) {
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(raw) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let ingest = Arc::clone(&hook.ingest);
    match tokio::task::spawn_blocking(move || ingest.ingest(&raw)).await {
        Ok(Ok(())) => StatusCode::OK,
        // Telegram delivers it again later.
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Compare secrets in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A random secret (Telegram allows 1–256 of `A-Za-z0-9_-`), for a bot
/// started without one.
pub fn random_secret() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for i in 0..4u64 {
        // RandomState is seeded from the OS's randomness per process.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        let (a, b) = (random_secret(), random_secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
