//! The chat page at `/`: an HTML file with its script and styles beside it
//! (`/ui/chat.js`, `/ui/chat.css`; nothing fetched from elsewhere), all
//! compiled into the binary. The page runs no inline script, so its CSP can
//! allow only this server's files. `--no-ui` leaves these unrouted.

use crate::{AppState, ServerConfig};
use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

/// The page, as served.
const PAGE: &str = include_str!("chat.html");
/// Its script.
const SCRIPT: &str = include_str!("chat.js");
/// Its styles.
const STYLES: &str = include_str!("chat.css");

/// What the page may load and run: only this server's script and styles,
/// no inline script or style, no frame around it; model output can never
/// load or run anything.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src data: blob:; media-src data: blob:; connect-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `/` (and `/ui`, as mistral.rs names it) and the page's files when the
/// page is on.
pub(crate) fn router(config: &ServerConfig) -> Router<AppState> {
    if !config.ui {
        return Router::new();
    }
    Router::new()
        .route("/", get(page))
        .route("/ui", get(page))
        .route("/ui/chat.js", get(script))
        .route("/ui/chat.css", get(styles))
}

async fn page() -> impl IntoResponse {
    served("text/html; charset=utf-8", PAGE)
}

async fn script() -> impl IntoResponse {
    served("text/javascript; charset=utf-8", SCRIPT)
}

async fn styles() -> impl IntoResponse {
    served("text/css; charset=utf-8", STYLES)
}

/// One of the page's files, with the CSP and no sniffing; revalidated on
/// each load so a new binary's page is never mixed with an old script.
fn served(content_type: &'static str, text: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        text,
    )
}
