//! Webhook mode: Telegram posts each update to our URL with the secret
//! token in a header. The listener is `hearth serve`'s own accept loop
//! ([`server::accept_loop`]): a header-read timeout, a connection cap (503
//! past it), and a body read within a size and a time limit; a post without
//! the right secret is refused before a byte of its body is read. `/health`
//! answers 200 for the platform's probes.

use crate::store::StoreError;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::watch;

/// The header Telegram puts the secret in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The default largest update body (`--body-limit`): Telegram's are a few KiB.
pub const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// The default connections open at once (`--max-connections`): Telegram
/// opens at most 100 to one webhook.
pub const DEFAULT_CONNECTIONS: usize = 100;

/// Takes a received update into the bot.
pub trait Ingest: Send + Sync + 'static {
    /// Check, store and queue one update.
    fn ingest(&self, raw: &Value) -> Result<(), StoreError>;
}

struct Hook {
    ingest: Arc<dyn Ingest>,
    secret: String,
    limits: server::Limits,
}

/// Serve the webhook at the path of `url` on `listener` within `limits`
/// until `stop`.
pub(crate) async fn serve(
    ingest: Arc<dyn Ingest>,
    listener: tokio::net::TcpListener,
    url: String,
    secret: String,
    limits: server::Limits,
    stop: watch::Receiver<bool>,
) -> Result<(), crate::BotError> {
    let path = reqwest::Url::parse(&url)
        .map(|u| u.path().to_owned())
        .map_err(|e| crate::BotError::Config(format!("bad webhook URL {url:?}: {e}")))?;
    let path = if path.is_empty() {
        "/".to_owned()
    } else {
        path
    };
    let hook = Arc::new(Hook {
        ingest,
        secret,
        limits,
    });
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(&path, post(receive))
        .with_state(hook);
    server::accept_loop(listener, app, stop, limits, None).await;
    Ok(())
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: Body) -> Response {
    // The secret first: a stranger's post is answered without its body read.
    let given = headers
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if !same(given, hook.secret.as_bytes()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let body = match server::read_body_within(&hook.limits, &headers, body).await {
        Ok(b) => b,
        Err(e) => return e.respond(server::error::Dialect::OpenAi),
    };
    let Ok(raw) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let ingest = Arc::clone(&hook.ingest);
    match tokio::task::spawn_blocking(move || ingest.ingest(&raw)).await {
        Ok(Ok(())) => StatusCode::OK.into_response(),
        // Telegram delivers it again later.
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
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
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    const SECRET: &str = "the-Secret_1";

    /// Counts what reaches the bot.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Ingest for Counted {
        fn ingest(&self, _: &Value) -> Result<(), StoreError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// A webhook served on a free loopback port within `limits`, on its own
    /// runtime; stopped when dropped.
    struct Hooked {
        addr: std::net::SocketAddr,
        ingested: Arc<Counted>,
        stop: watch::Sender<bool>,
        runtime: Option<tokio::runtime::Runtime>,
    }

    impl Hooked {
        fn start(limits: server::Limits) -> Self {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let listener = runtime
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let ingested = Arc::new(Counted::default());
            let (stop, stop_rx) = watch::channel(false);
            runtime.spawn(serve(
                Arc::clone(&ingested) as Arc<dyn Ingest>,
                listener,
                format!("http://{addr}/hook"),
                SECRET.into(),
                limits,
                stop_rx,
            ));
            Self {
                addr,
                ingested,
                stop,
                runtime: Some(runtime),
            }
        }

        /// A connection whose reads give up after `wait`.
        fn connect(&self, wait: Duration) -> TcpStream {
            let s = TcpStream::connect(self.addr).unwrap();
            s.set_read_timeout(Some(wait)).unwrap();
            s
        }
    }

    impl Drop for Hooked {
        fn drop(&mut self) {
            let _ = self.stop.send(true);
            if let Some(r) = self.runtime.take() {
                r.shutdown_timeout(Duration::from_secs(2));
            }
        }
    }

    /// Everything the server sends until it closes (or `wait` passes).
    fn answer(s: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn head(secret: &str, length: u64) -> String {
        format!(
            "POST /hook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: {secret}\r\nContent-Length: {length}\r\n\r\n"
        )
    }

    fn small_limits() -> server::Limits {
        server::Limits {
            body_bytes: 1024,
            header_time: Duration::from_secs(1),
            body_time: Duration::from_secs(1),
            connections: 2,
            ..server::Limits::default()
        }
    }

    /// A post with a wrong secret is answered 401 at once, whatever body it
    /// announces and whether or not the body ever comes: it is never read.
    #[test]
    fn a_wrong_secret_is_refused_before_the_body_is_read() {
        let hook = Hooked::start(server::Limits {
            body_time: Duration::from_secs(60),
            ..small_limits()
        });
        for (secret, length) in [("wrong", 1u64 << 30), ("wrong", 100), ("", 100)] {
            let mut s = hook.connect(Duration::from_secs(20));
            s.write_all(head(secret, length).as_bytes()).unwrap();
            s.write_all(b"{\"update_id\":").unwrap();
            let t0 = Instant::now();
            let out = answer(&mut s);
            assert!(
                out.starts_with("HTTP/1.1 401"),
                "{secret:?} {length}: {out}"
            );
            // Not after the body time (60 s): the server did not wait for the body.
            assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        }
        // The right secret: the body is read, within its limit.
        let mut s = hook.connect(Duration::from_secs(20));
        s.write_all(head(SECRET, 1 << 30).as_bytes()).unwrap();
        let out = answer(&mut s);
        assert!(
            out.starts_with("HTTP/1.1 413") && out.contains("--body-limit"),
            "{out}"
        );
        let body = br#"{"update_id": 1}"#;
        let mut s = hook.connect(Duration::from_secs(20));
        s.write_all(head(SECRET, body.len() as u64).as_bytes())
            .unwrap();
        s.write_all(body).unwrap();
        let out = answer(&mut s);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert_eq!(hook.ingested.0.load(Ordering::SeqCst), 1);
    }

    /// A client that sends its headers, or its body, too slowly is cut off
    /// by the read timeout.
    #[test]
    fn slow_headers_and_slow_bodies_are_cut() {
        let hook = Hooked::start(small_limits());
        let mut s = hook.connect(Duration::from_secs(20));
        s.write_all(b"POST /hook HTTP/1.1\r\nHost: x\r\n").unwrap();
        let t0 = Instant::now();
        let out = answer(&mut s);
        // Closed (hyper may say 408 first) well before the reader gives up.
        assert!(
            t0.elapsed() < Duration::from_secs(15) && !out.contains("200 OK"),
            "{:?}: {out}",
            t0.elapsed()
        );
        let mut s = hook.connect(Duration::from_secs(20));
        s.write_all(head(SECRET, 100).as_bytes()).unwrap();
        s.write_all(b"{").unwrap();
        let out = answer(&mut s);
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        assert_eq!(hook.ingested.0.load(Ordering::SeqCst), 0);
    }

    /// Past the connection cap a new connection is answered 503 naming the
    /// flag, and closed; the open ones are unharmed.
    #[test]
    fn connections_past_the_cap_get_503() {
        let hook = Hooked::start(server::Limits {
            header_time: Duration::from_secs(30),
            ..small_limits()
        });
        let mut held: Vec<TcpStream> = (0..2)
            .map(|_| hook.connect(Duration::from_secs(20)))
            .collect();
        // The two are accepted (each holds its slot) before the third comes.
        std::thread::sleep(Duration::from_millis(300));
        let mut third = hook.connect(Duration::from_secs(20));
        let out = answer(&mut third);
        assert!(
            out.starts_with("HTTP/1.1 503") && out.contains("--max-connections"),
            "{out}"
        );
        let body = br#"{"update_id": 2}"#;
        let s = &mut held[0];
        s.write_all(head(SECRET, body.len() as u64).as_bytes())
            .unwrap();
        s.write_all(body).unwrap();
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
    }

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
