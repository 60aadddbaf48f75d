//! The chat page at `/`: one self-contained HTML file (its script and styles
//! inline, nothing fetched from elsewhere), compiled into the binary.
//! `--no-ui` leaves `/` unrouted.

use crate::{AppState, ServerConfig};
use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

/// The page, as served.
const PAGE: &str = include_str!("chat.html");

/// `/` (and `/ui`, as mistral.rs names it) when the page is on.
pub(crate) fn router(config: &ServerConfig) -> Router<AppState> {
    if !config.ui {
        return Router::new();
    }
    Router::new().route("/", get(page)).route("/ui", get(page))
}

async fn page() -> impl IntoResponse {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            // The page runs only its own inline script and talks only to
            // this server; model output can never load or run anything.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                     img-src data: blob:; media-src data: blob:; connect-src 'self'; \
                     base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
                ),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        PAGE,
    )
}
