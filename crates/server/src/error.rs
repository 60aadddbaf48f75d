//! Errors with the HTTP status that goes with each, answered in the shape
//! of the API the client speaks (OpenAI's, Ollama's or Anthropic's).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// `text` with every absolute path in it cut to its last component, so an
/// error passed on to a client never shows where files live on the server.
pub fn redact_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('/') {
        let starts_token = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "`'\"(:=[".contains(c));
        if !starts_token {
            out.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            continue;
        }
        out.push_str(&rest[..at]);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || "`'\"),]".contains(c))
            .map_or(rest.len(), |e| at + e);
        let path = &rest[at..end];
        let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        out.push_str(if last.is_empty() { "/" } else { last });
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// An error answered to the client as `{"error": {message, type, param, code}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A short machine-readable code, if one fits.
    pub code: Option<&'static str>,
    /// Seconds after which a retry may succeed (sets `Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or a parameter is out of range.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the parameter at fault.
    pub fn bad_param(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::bad_request(message)
        }
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            code: Some("invalid_api_key"),
            ..Self::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
        }
    }

    /// 403: a request a web page on another site could have sent (a
    /// foreign `Origin` or `Host`); the message names the flag that allows it.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "permission_error", message)
    }

    /// 404: no such route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    /// 404: no such model.
    pub fn model_not_found(model: &str, served: &[String]) -> Self {
        let listed: Vec<String> = served.iter().map(|id| format!("`{id}`")).collect();
        Self {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::not_found(format!(
                "The model `{model}` does not exist; this server serves {}.",
                if listed.is_empty() {
                    "no models".to_string()
                } else {
                    listed.join(", ")
                }
            ))
        }
    }

    /// 405: the route exists but not with this method.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "Method not allowed on this route.",
        )
    }

    /// 408: the client took too long to send its request.
    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            message,
        )
    }

    /// 413: the body is over the limit.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!(
                "The request body is larger than the limit of {limit} bytes ({:.1} MiB); \
                 start the server with --body-limit BYTES to raise it.",
                limit as f64 / (1024.0 * 1024.0)
            ),
        )
    }

    /// 415: the body is not declared as the JSON the route takes.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            message,
        )
    }

    /// 429: the queue is full; retry after `secs`.
    pub fn queue_full(secs: u64) -> Self {
        Self {
            code: Some("queue_full"),
            retry_after: Some(secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "The server is busy: every slot is in use and the queue is full. Retry later.",
            )
        }
    }

    /// 429: the client is over `--rate-limit`; retry after `secs`.
    pub fn rate_limited(per_minute: u32, secs: u64) -> Self {
        Self {
            code: Some("rate_limited"),
            retry_after: Some(secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!(
                    "Too many requests from this address: the limit is {per_minute} a minute \
                     (--rate-limit). Retry in {secs} s."
                ),
            )
        }
    }

    /// 501: a feature the server was started without.
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", message)
    }

    /// 507: no room left where the server keeps files.
    pub fn insufficient_storage(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INSUFFICIENT_STORAGE, "server_error", message)
    }

    /// 503: not ready (loading) or going away (shutting down).
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
        }
    }

    /// 504: the generation took longer than the request timeout.
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "server_error", message)
    }

    /// 500: our own bug.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// The API family a route belongs to, which shapes its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's `{"error": {message, type, param, code}}` (also llama.cpp's).
    OpenAi,
    /// Ollama's `{"error": message}`.
    Ollama,
    /// Anthropic's `{"type": "error", "error": {type, message}}`.
    Anthropic,
}

impl Dialect {
    /// The family of the route at `path`.
    pub fn of_path(path: &str) -> Self {
        if path.starts_with("/api/") {
            Self::Ollama
        } else if path.starts_with("/v1/messages") {
            Self::Anthropic
        } else {
            Self::OpenAi
        }
    }
}

impl ApiError {
    /// Anthropic's error type for this status.
    fn anthropic_type(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body in `dialect`'s shape.
    pub fn body_for(&self, dialect: Dialect) -> serde_json::Value {
        match dialect {
            Dialect::OpenAi => self.body(),
            Dialect::Ollama => json!({ "error": self.message }),
            Dialect::Anthropic => json!({
                "type": "error",
                "error": {"type": self.anthropic_type(), "message": self.message},
            }),
        }
    }

    /// The response in `dialect`'s shape.
    pub fn respond(self, dialect: Dialect) -> Response {
        let mut resp = (self.status, axum::Json(self.body_for(dialect))).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.respond(Dialect::OpenAi)
    }
}

impl From<crate::scheduler::Rejected> for ApiError {
    /// A job the scheduler (or the embedding batcher) would not queue: 429
    /// with a retry hint when the queue is full; 503 when its model is being
    /// unloaded (it was the least recently used, or idle past its
    /// keep-alive) or the server is stopping.
    fn from(r: crate::scheduler::Rejected) -> Self {
        match r {
            crate::scheduler::Rejected::QueueFull => Self::queue_full(2),
            crate::scheduler::Rejected::ShuttingDown => Self::unavailable(
                "The model is being unloaded or the server is shutting down; try again.",
                1,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redact_paths;

    #[test]
    fn paths_are_cut_to_their_file_name() {
        assert_eq!(
            redact_paths("cannot open /home/ann/.cache/hearth/models/x.gguf: No such file"),
            "cannot open x.gguf: No such file"
        );
        assert_eq!(
            redact_paths("tensor `a` in '/srv/m/model.safetensors' (and/or 1/2)"),
            "tensor `a` in 'model.safetensors' (and/or 1/2)"
        );
        assert_eq!(redact_paths("no path here"), "no path here");
        assert_eq!(redact_paths("root is / alone"), "root is / alone");
    }
}
