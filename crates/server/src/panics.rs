//! A panic while answering a request (a bug) ends that request with a 500
//! in its API's error shape and is counted; the server goes on.

use crate::error::{ApiError, Dialect};
use crate::metrics::Metrics;
use axum::extract::Request as HttpRequest;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Run the rest of the stack, turning a panic into a 500. The panic's own
/// message goes to stderr through the panic hook, not to the client.
pub(crate) async fn catch_panics(metrics: Arc<Metrics>, req: HttpRequest, next: Next) -> Response {
    let dialect = Dialect::of_path(req.uri().path());
    // Unwind safety: a handler shares only atomics, locks that survive a
    // holder's panic, and channels; nothing is left half-updated for others.
    match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(response) => response,
        Err(_) => {
            metrics.panics.fetch_add(1, Ordering::Relaxed);
            ApiError::internal(
                "The server hit a bug while answering this request (logged on its side); \
                 the server is still running.",
            )
            .respond(dialect)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    async fn answer(app: &Router, path: &str) -> (u16, serde_json::Value) {
        let req = HttpRequest::builder()
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_panicking_handler_gets_a_500_in_its_dialect() {
        async fn boom() -> &'static str {
            panic!("a bug in a handler")
        }
        let metrics = Arc::new(Metrics::default());
        let counted = Arc::clone(&metrics);
        let app = Router::new()
            .route("/v1/boom", get(boom))
            .route("/api/boom", get(boom))
            .route("/v1/messages/boom", get(boom))
            .route("/ok", get(|| async { "{}" }))
            .layer(axum::middleware::from_fn(move |req, next| {
                catch_panics(Arc::clone(&counted), req, next)
            }));
        let (status, body) = answer(&app, "/v1/boom").await;
        assert_eq!(status, 500);
        assert_eq!(body["error"]["type"], "server_error", "{body}");
        let (status, body) = answer(&app, "/api/boom").await;
        assert_eq!(status, 500);
        assert!(body["error"].as_str().unwrap().contains("bug"), "{body}");
        let (status, body) = answer(&app, "/v1/messages/boom").await;
        assert_eq!(status, 500);
        assert_eq!(body["error"]["type"], "api_error", "{body}");
        // The service goes on answering.
        assert_eq!(answer(&app, "/ok").await.0, 200);
        assert_eq!(metrics.panics.load(Ordering::Relaxed), 3);
    }
}
