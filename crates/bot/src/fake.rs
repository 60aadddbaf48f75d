//! A local stand-in for the Telegram Bot API, for tests: it queues updates
//! for `getUpdates` (long polling included), records what the bot sends,
//! and fails on request (429 with `retry_after`, any status, a hang), so the
//! bot's behaviour is testable without Telegram. It checks what Telegram
//! checks that matters here: the token, the 4,096-character limit and empty
//! texts. Files added with [`FakeBotApi::add_file`] are served as Telegram
//! serves them: `getFile` gives a path, `GET /file/bot<token>/<path>` the
//! bytes.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A failure the fake answers a call with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// This HTTP status, with a non-JSON body (as a proxy in front would).
    Status(u16),
    /// 429 with `retry_after` seconds.
    RetryAfter(u64),
    /// Answer only after this long, and then with 504 (a hang: the call
    /// is not carried out).
    Hang(Duration),
}

/// A message the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The chat.
    pub chat_id: i64,
    /// The text.
    pub text: String,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    updates: Vec<(u64, Value)>,
    sent: Vec<Sent>,
    actions: Vec<(i64, String)>,
    send_faults: VecDeque<Fault>,
    poll_faults: VecDeque<Fault>,
    calls: HashMap<String, usize>,
    webhook: Option<(String, String)>,
    /// Files by `file_id`.
    files: HashMap<String, Vec<u8>>,
}

struct Shared {
    token: String,
    inner: Mutex<Inner>,
    news: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake; it stops when dropped.
pub struct FakeBotApi {
    url: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeBotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeBotApi({})", self.url)
    }
}

impl FakeBotApi {
    /// Start a fake for bot `token` on a free port of 127.0.0.1.
    pub fn start(token: &str) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            token: token.to_owned(),
            inner: Mutex::new(Inner {
                next_id: 1,
                ..Inner::default()
            }),
            news: tokio::sync::Notify::new(),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .route("/{bot}/{method}", post(call))
            .route("/file/{bot}/{*path}", get(download))
            .with_state(Arc::clone(&shared));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("fake-bot-api".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                });
                runtime.shutdown_background();
            })?;
        Ok(Self {
            url,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The base URL to give the bot (`--api-url`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queue an update (its `update_id` is set here); returns the id.
    pub fn push_update(&self, mut update: Value) -> u64 {
        let id = {
            let mut g = self.shared.lock();
            let id = g.next_id;
            g.next_id += 1;
            if let Some(o) = update.as_object_mut() {
                o.insert("update_id".into(), json!(id));
            }
            g.updates.push((id, update));
            id
        };
        self.shared.news.notify_waiters();
        id
    }

    /// Make `bytes` downloadable as the file `file_id`.
    pub fn add_file(&self, file_id: &str, bytes: Vec<u8>) {
        self.shared.lock().files.insert(file_id.to_owned(), bytes);
    }

    /// Queue a photo (`file_id`, with a smaller preview size first, as
    /// Telegram sends them) with an optional caption from `chat_id`.
    pub fn push_photo(&self, chat_id: i64, file_id: &str, caption: Option<&str>) -> u64 {
        let size = |id: &str, side: u32| json!({"file_id": id, "file_unique_id": format!("u-{id}"), "width": side, "height": side});
        let mut extra =
            json!({"photo": [size(&format!("{file_id}-thumb"), 90), size(file_id, 800)]});
        if let Some(c) = caption {
            extra["caption"] = json!(c);
        }
        self.push_update(json!({"message": message(chat_id, extra)}))
    }

    /// Queue a voice note (`file_id`, Ogg Opus as Telegram records them)
    /// from `chat_id`.
    pub fn push_voice(&self, chat_id: i64, file_id: &str) -> u64 {
        let voice = json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                           "duration": 3, "mime_type": "audio/ogg"});
        self.push_update(json!({"message": message(chat_id, json!({"voice": voice}))}))
    }

    /// Queue a text message from the private chat `chat_id`.
    pub fn push_text(&self, chat_id: i64, text: &str) -> u64 {
        self.push_update(json!({"message": message(chat_id, json!({"text": text}))}))
    }

    /// Updates queued and not yet acknowledged by an offset past them.
    pub fn unacknowledged(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// Answer the next `sendMessage` calls with these faults, in order.
    pub fn fail_sends(&self, faults: &[Fault]) {
        self.shared.lock().send_faults.extend(faults);
    }

    /// Answer the next `getUpdates` calls with these faults, in order.
    pub fn fail_polls(&self, faults: &[Fault]) {
        self.shared.lock().poll_faults.extend(faults);
    }

    /// Everything sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// Messages sent to `chat_id` so far.
    pub fn sent_to(&self, chat_id: i64) -> Vec<String> {
        self.sent()
            .into_iter()
            .filter(|s| s.chat_id == chat_id)
            .map(|s| s.text)
            .collect()
    }

    /// Wait until `chat_id` has been sent at least `n` messages (or
    /// `timeout` passes); returns its messages.
    pub fn wait_for(&self, chat_id: i64, n: usize, timeout: Duration) -> Vec<String> {
        let end = Instant::now() + timeout;
        loop {
            let got = self.sent_to(chat_id);
            if got.len() >= n || Instant::now() >= end {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Chat actions ("typing") sent so far.
    pub fn actions(&self) -> Vec<(i64, String)> {
        self.shared.lock().actions.clone()
    }

    /// How many times `method` was called (any outcome).
    pub fn calls(&self, method: &str) -> usize {
        self.shared.lock().calls.get(method).copied().unwrap_or(0)
    }

    /// The webhook set with `setWebhook`: its URL and secret.
    pub fn webhook(&self) -> Option<(String, String)> {
        self.shared.lock().webhook.clone()
    }
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A private-chat message object with `extra` fields (text, photo…).
pub fn message(chat_id: i64, extra: Value) -> Value {
    let mut m = json!({
        "message_id": 1,
        "date": 1_700_000_000,
        "chat": {"id": chat_id, "type": "private", "first_name": "Tester"},
        "from": {"id": chat_id, "is_bot": false, "first_name": "Tester"},
    });
    if let (Some(o), Some(e)) = (m.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    m
}

fn reply(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn ok(result: Value) -> Response {
    reply(StatusCode::OK, json!({"ok": true, "result": result}))
}

fn refuse(code: u16, description: &str) -> Response {
    reply(
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
        json!({"ok": false, "error_code": code, "description": description}),
    )
}

/// Apply a fault: the response it makes instead of the call's.
async fn fault(f: Option<Fault>) -> Option<Response> {
    match f? {
        Fault::Status(code) => Some(
            (
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                "<html><body>upstream error</body></html>",
            )
                .into_response(),
        ),
        Fault::RetryAfter(s) => Some(reply(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"ok": false, "error_code": 429,
                   "description": format!("Too Many Requests: retry after {s}"),
                   "parameters": {"retry_after": s}}),
        )),
        Fault::Hang(d) => {
            tokio::time::sleep(d).await;
            Some(StatusCode::GATEWAY_TIMEOUT.into_response())
        }
    }
}

/// `GET /file/bot<token>/photos/<file_id>.jpg`: a file's bytes (every
/// file, voice notes too, lives under that path here).
async fn download(
    State(sh): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    *sh.lock().calls.entry("download".into()).or_default() += 1;
    if bot.strip_prefix("bot") != Some(sh.token.as_str()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let id = path
        .strip_prefix("photos/")
        .and_then(|p| p.strip_suffix(".jpg"))
        .unwrap_or("");
    match sh.lock().files.get(id) {
        Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `POST /bot<token>/<method>`: one Bot API call, as Telegram answers it
/// (or with the fault queued for it).
async fn call(
    State(sh): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    *sh.lock().calls.entry(method.clone()).or_default() += 1;
    if bot.strip_prefix("bot") != Some(sh.token.as_str()) {
        return refuse(401, "Unauthorized");
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match method.as_str() {
        "getUpdates" => get_updates(&sh, &body).await,
        "sendMessage" => send_message(&sh, &body).await,
        "sendChatAction" => {
            let chat = body.get("chat_id").and_then(Value::as_i64).unwrap_or(0);
            let action = body.get("action").and_then(Value::as_str).unwrap_or("");
            sh.lock().actions.push((chat, action.to_owned()));
            ok(json!(true))
        }
        "setWebhook" => {
            let url = body.get("url").and_then(Value::as_str).unwrap_or("");
            let secret = body
                .get("secret_token")
                .and_then(Value::as_str)
                .unwrap_or("");
            sh.lock().webhook = Some((url.to_owned(), secret.to_owned()));
            ok(json!(true))
        }
        "deleteWebhook" => {
            sh.lock().webhook = None;
            ok(json!(true))
        }
        "getFile" => get_file(&sh, &body),
        "getMe" => {
            ok(json!({"id": 1, "is_bot": true, "first_name": "Hearth", "username": "hearth_bot"}))
        }
        _ => refuse(404, "Not Found: method not found"),
    }
}

/// `getUpdates`: the updates from `offset` on (those before it are
/// confirmed and dropped), waiting up to `timeout` seconds (at most 5) for
/// one to arrive.
async fn get_updates(sh: &Shared, body: &Value) -> Response {
    let f = sh.lock().poll_faults.pop_front();
    if let Some(r) = fault(f).await {
        return r;
    }
    let offset = body.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let wait = body
        .get("timeout")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(5);
    let end = tokio::time::Instant::now() + Duration::from_secs(wait);
    loop {
        let news = sh.news.notified();
        let ready: Vec<Value> = {
            let mut g = sh.lock();
            g.updates.retain(|(id, _)| *id >= offset);
            g.updates.iter().map(|(_, u)| u.clone()).collect()
        };
        if !ready.is_empty() || tokio::time::Instant::now() >= end {
            return ok(Value::Array(ready));
        }
        let _ = tokio::time::timeout_at(end, news).await;
    }
}

/// `sendMessage`: records the text, refused as Telegram refuses it without
/// a chat, empty or over 4,096 UTF-16 units.
async fn send_message(sh: &Shared, body: &Value) -> Response {
    let f = sh.lock().send_faults.pop_front();
    if let Some(r) = fault(f).await {
        return r;
    }
    let chat_id = body.get("chat_id").and_then(Value::as_i64);
    let text = body.get("text").and_then(Value::as_str).unwrap_or("");
    let Some(chat_id) = chat_id else {
        return refuse(400, "Bad Request: chat not found");
    };
    if text.trim().is_empty() {
        return refuse(400, "Bad Request: message text is empty");
    }
    if text.encode_utf16().count() > 4096 {
        return refuse(400, "Bad Request: message is too long");
    }
    sh.lock().sent.push(Sent {
        chat_id,
        text: text.to_owned(),
    });
    ok(json!({"message_id": 2, "date": 1_700_000_000,
              "chat": {"id": chat_id, "type": "private"}, "text": text}))
}

/// `getFile`: the path [`download`] serves a known file under.
fn get_file(sh: &Shared, body: &Value) -> Response {
    let id = body.get("file_id").and_then(Value::as_str).unwrap_or("");
    let size = sh.lock().files.get(id).map(Vec::len);
    match size {
        Some(n) => ok(json!({"file_id": id, "file_unique_id": format!("u-{id}"),
                             "file_size": n, "file_path": format!("photos/{id}.jpg")})),
        None => refuse(400, "Bad Request: invalid file_id"),
    }
}
