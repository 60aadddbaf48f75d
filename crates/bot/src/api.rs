//! The Bot API calls the bot makes, over HTTP with our own timeouts, and what
//! a failure means for a retry: wait as told (429), try again later
//! (network, timeouts, 5xx), or give up on this request (other 4xx).

use serde_json::{json, Value};
use std::time::Duration;

/// Telegram's production endpoint.
pub const TELEGRAM_API_URL: &str = "https://api.telegram.org";

/// Why a call failed, as far as retrying goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiFailure {
    /// Flood control: try again after this long.
    RetryAfter(Duration),
    /// The network, a timeout or the server: try again later.
    Transient(String),
    /// The request itself was refused (bad chat, blocked bot…): retrying
    /// cannot help.
    Refused {
        /// The HTTP status.
        status: u16,
        /// Telegram's description.
        description: String,
    },
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiFailure::RetryAfter(d) => write!(f, "flood control: retry after {} s", d.as_secs()),
            ApiFailure::Transient(e) => write!(f, "{e}"),
            ApiFailure::Refused {
                status,
                description,
            } => write!(f, "refused ({status}): {description}"),
        }
    }
}

/// A connection to the Bot API for one bot token.
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
    request_timeout: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        write!(f, "Api({})", self.base)
    }
}

impl Api {
    /// Calls to `base` (default: Telegram's) with `token`; a call that takes
    /// longer than `request_timeout` fails as transient.
    pub fn new(token: &str, base: Option<&str>, request_timeout: Duration) -> Result<Self, String> {
        let base = base
            .unwrap_or(TELEGRAM_API_URL)
            .trim_end_matches('/')
            .to_owned();
        match reqwest::Url::parse(&base) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => return Err(format!("the API URL {base:?} is not an http(s) URL")),
        }
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c == '/') {
            return Err("the bot token is empty or malformed (expected 123456:ABC-...)".into());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            client,
            base,
            token: token.to_owned(),
            request_timeout,
        })
    }

    /// Call `method` with `body`; `extra` is added to the request timeout
    /// (a long poll waits that long on purpose).
    async fn call(&self, method: &str, body: &Value, extra: Duration) -> Result<Value, ApiFailure> {
        let url = format!("{}/bot{}/{}", self.base, self.token, method);
        let resp = self
            .client
            .post(url)
            .timeout(self.request_timeout + extra)
            .json(body)
            .send()
            .await
            .map_err(|e| ApiFailure::Transient(format!("{method}: {}", without_url(&e))))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .map_err(|e| ApiFailure::Transient(format!("{method}: {}", without_url(&e))))?;
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        let ok = parsed
            .as_ref()
            .and_then(|v| v.get("ok"))
            .and_then(Value::as_bool);
        if (200..300).contains(&status) && ok == Some(true) {
            return Ok(parsed
                .and_then(|mut v| v.get_mut("result").map(Value::take))
                .unwrap_or(Value::Null));
        }
        let description = parsed
            .as_ref()
            .and_then(|v| v.get("description"))
            .and_then(Value::as_str)
            .map_or_else(|| format!("HTTP {status}"), str::to_owned);
        let retry_after = parsed
            .as_ref()
            .and_then(|v| v.pointer("/parameters/retry_after"))
            .and_then(Value::as_u64);
        Err(match (status, retry_after) {
            (429, s) => ApiFailure::RetryAfter(Duration::from_secs(s.unwrap_or(1).clamp(1, 3600))),
            (400..=499, _) => ApiFailure::Refused {
                status,
                description: format!("{method}: {description}"),
            },
            _ => ApiFailure::Transient(format!("{method}: {description}")),
        })
    }

    /// Updates from `offset` on, waiting up to `wait` for one to arrive.
    pub async fn get_updates(&self, offset: u64, wait: Duration) -> Result<Vec<Value>, ApiFailure> {
        let body = json!({
            "offset": offset,
            "timeout": wait.as_secs(),
            "allowed_updates": ["message"],
        });
        match self.call("getUpdates", &body, wait).await? {
            Value::Array(v) => Ok(v),
            other => Err(ApiFailure::Transient(format!(
                "getUpdates: expected a list of updates, got {}",
                short(&other)
            ))),
        }
    }

    /// Send `text` to `chat_id` as plain text (no parse mode, so nothing in
    /// a model's Markdown can make Telegram reject it).
    pub async fn send_message(&self, chat_id: i64, text: &str) -> Result<(), ApiFailure> {
        let body = json!({"chat_id": chat_id, "text": text, "link_preview_options": {"is_disabled": true}});
        self.call("sendMessage", &body, Duration::ZERO)
            .await
            .map(drop)
    }

    /// Download the file `file_id` (a photo), refusing one over
    /// `max_bytes`: `getFile` for its path, then the file itself.
    pub async fn download_file(
        &self,
        file_id: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>, ApiFailure> {
        let info = self
            .call("getFile", &json!({"file_id": file_id}), Duration::ZERO)
            .await?;
        let too_big = |n: u64| ApiFailure::Refused {
            status: 413,
            description: format!("the file is {n} bytes, over the {max_bytes}-byte limit"),
        };
        if let Some(n) = info.get("file_size").and_then(Value::as_u64) {
            if n > max_bytes as u64 {
                return Err(too_big(n));
            }
        }
        let Some(path) = info.get("file_path").and_then(Value::as_str) else {
            return Err(ApiFailure::Refused {
                status: 400,
                description: format!("getFile: no file_path in {}", short(&info)),
            });
        };
        let url = format!("{}/file/bot{}/{}", self.base, self.token, path);
        let fail =
            |e: reqwest::Error| ApiFailure::Transient(format!("download: {}", without_url(&e)));
        let mut resp = self
            .client
            .get(url)
            .timeout(self.request_timeout + Duration::from_secs(30))
            .send()
            .await
            .map_err(fail)?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(if (400..500).contains(&status) {
                ApiFailure::Refused {
                    status,
                    description: format!("download: HTTP {status}"),
                }
            } else {
                ApiFailure::Transient(format!("download: HTTP {status}"))
            });
        }
        // Read in chunks so a lying size cannot make us hold more than the
        // limit.
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(fail)? {
            if bytes.len() + chunk.len() > max_bytes {
                return Err(too_big((bytes.len() + chunk.len()) as u64));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Show "typing…" in `chat_id` (Telegram shows it for 5 s).
    pub async fn typing(&self, chat_id: i64) -> Result<(), ApiFailure> {
        let body = json!({"chat_id": chat_id, "action": "typing"});
        self.call("sendChatAction", &body, Duration::ZERO)
            .await
            .map(drop)
    }

    /// Have Telegram deliver updates to `url`, with `secret` in the
    /// `X-Telegram-Bot-Api-Secret-Token` header.
    pub async fn set_webhook(&self, url: &str, secret: &str) -> Result<(), ApiFailure> {
        let body = json!({"url": url, "secret_token": secret, "allowed_updates": ["message"]});
        self.call("setWebhook", &body, Duration::ZERO)
            .await
            .map(drop)
    }

    /// Stop webhook delivery (long polling gets 409 while one is set);
    /// pending updates are kept.
    pub async fn delete_webhook(&self) -> Result<(), ApiFailure> {
        self.call(
            "deleteWebhook",
            &json!({"drop_pending_updates": false}),
            Duration::ZERO,
        )
        .await
        .map(drop)
    }
}

/// A reqwest error without its URL, which holds the token.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let mut msg = kind.to_owned();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg = format!("{msg}: {s}");
        source = s.source();
    }
    msg
}

/// A value, cut short for a message.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}
