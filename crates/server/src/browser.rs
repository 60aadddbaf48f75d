//! Default-safe for browsers: what keeps a web page the user happens to
//! visit from using a server on their machine (the class of Ollama's
//! CVE-2024-28224, which llama.cpp's and Ollama's servers now guard against
//! the same way).
//!
//! A page can send "simple" cross-site POSTs (text/plain, forms, a typeless
//! Blob) without a preflight, and through DNS rebinding (its own name
//! re-pointed at 127.0.0.1) read every answer. Three checks close that:
//! - `Host` must name this server: on a loopback bind only `localhost`,
//!   `*.localhost`, IP literals and the names of `--allowed-hosts` (a
//!   rebinding page's requests carry the attacker's name); on any other
//!   bind every name, unless `--allowed-hosts` lists them.
//! - `Origin`, when sent, must be this server's own (its authority equal to
//!   the request's `Host`) or one of `--cors`; `Sec-Fetch-Site: cross-site`
//!   is refused likewise, except a top-level navigation to a page.
//! - A POST to an API must say `Content-Type: application/json` (or
//!   `…+json`); no `Content-Type` at all passes only without `Origin`, as
//!   curl and the SDKs send it but a browser never does cross-origin.

use crate::error::{ApiError, Dialect};
use axum::extract::Request as HttpRequest;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Which hosts and origins the server answers, from its flags and the
/// address it is bound to.
#[derive(Debug, Clone)]
pub(crate) struct BrowserPolicy {
    /// `--cors` origins, lower-cased, without a trailing slash.
    cors: Vec<String>,
    /// `--cors '*'`: every origin passes.
    any_origin: bool,
    /// `--allowed-hosts` names, lower-cased (`*.NAME` for its subdomains).
    allowed_hosts: Vec<String>,
    /// `--allowed-hosts '*'`, or a non-loopback bind without the flag.
    any_host: bool,
}

impl BrowserPolicy {
    /// The policy of a server bound to `bound` with these `--cors` and
    /// `--allowed-hosts` values.
    pub(crate) fn new(bound: SocketAddr, cors: &[String], allowed_hosts: &[String]) -> Self {
        let allowed_hosts: Vec<String> = allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        // A server on the network (a container, `--host 0.0.0.0`) is
        // reached by names the operator may not know in advance.
        let any_host = allowed_hosts.iter().any(|h| h == "*")
            || (allowed_hosts.is_empty() && !bound.ip().to_canonical().is_loopback());
        Self {
            cors: cors
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            any_origin: cors.iter().any(|o| o.trim() == "*"),
            allowed_hosts,
            any_host,
        }
    }

    /// Whether `host` (a `Host` header: name or IP, with or without port)
    /// names this server.
    fn host_allowed(&self, host: &str) -> bool {
        if self.any_host {
            return true;
        }
        let name = host_name(host);
        // An IP literal cannot be re-pointed by anyone's DNS.
        if name.parse::<IpAddr>().is_ok() || name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        self.allowed_hosts
            .iter()
            .any(|allowed| match allowed.strip_prefix("*.") {
                Some(parent) => name
                    .strip_suffix(parent)
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
                None => name == *allowed,
            })
    }

    /// Whether a request from the page at `origin` may be answered, the
    /// request naming `host`: this server's own origin, or one of `--cors`.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.any_origin || self.cors.contains(&origin) {
            return true;
        }
        // Same origin: the page was served by this server under this name.
        // The scheme is not compared, so the page still works behind a
        // proxy that ends TLS.
        let authority = origin.split_once("://").map(|(_, a)| a);
        matches!((authority, host), (Some(a), Some(h)) if a == h.to_ascii_lowercase())
    }
}

/// The host name (or IP, unbracketed) of a `Host` value, lower-cased.
fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = if let Ok(addr) = host.parse::<SocketAddr>() {
        return addr.ip().to_string();
    } else if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if host.parse::<IpAddr>().is_ok() {
        host
    } else {
        host.rsplit_once(':').map_or(host, |(name, _port)| name)
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The host a request names: its URI's authority (absolute form) or its
/// `Host` header.
fn request_host(req: &HttpRequest) -> Option<String> {
    if let Some(authority) = req.uri().authority() {
        return Some(authority.as_str().to_string());
    }
    req.headers()
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap_or("(not text)"))
}

/// Refuse what a foreign web page could send: a `Host` that is not this
/// server's, an `Origin` that is neither its own nor one of `--cors`, a
/// cross-site fetch (403, naming the flag that allows it).
pub(crate) async fn guard(policy: Arc<BrowserPolicy>, req: HttpRequest, next: Next) -> Response {
    match refusal(&policy, &req) {
        Some(error) => error.respond(Dialect::of_path(req.uri().path())),
        None => next.run(req).await,
    }
}

/// Why `req` is refused, if it is.
fn refusal(policy: &BrowserPolicy, req: &HttpRequest) -> Option<ApiError> {
    let host = request_host(req);
    if let Some(host) = host.as_deref() {
        if !policy.host_allowed(host) {
            let name = host_name(host);
            return Some(ApiError::forbidden(format!(
                "The Host `{host}` is not a name of this server, so the request is refused \
                 (a web page can reach a local server under a name it controls, by DNS \
                 rebinding). To serve it under this name, start it with --allowed-hosts {name}."
            )));
        }
    }
    let headers = req.headers();
    let origin = header_text(headers, header::ORIGIN.as_str());
    if let Some(origin) = origin {
        if !policy.origin_allowed(origin, host.as_deref()) {
            return Some(ApiError::forbidden(format!(
                "Requests from the web page at `{origin}` are refused: a page on another origin \
                 may not use this server. To let it, start the server with --cors {origin}."
            )));
        }
        return None;
    }
    let cross_site = header_text(headers, "sec-fetch-site") == Some("cross-site");
    let navigation = header_text(headers, "sec-fetch-mode") == Some("navigate")
        && matches!(*req.method(), Method::GET | Method::HEAD);
    if cross_site && !navigation && !policy.any_origin {
        return Some(ApiError::forbidden(
            "A cross-site request (Sec-Fetch-Site: cross-site) is refused: a page on another \
             site may not use this server. To let one, start the server with --cors ORIGIN.",
        ));
    }
    None
}

/// Refuse a POST whose body is not declared JSON (415 naming the header):
/// a browser can send text/plain, form and multipart bodies to any site
/// without asking first, but not `application/json`.
pub(crate) async fn require_json(req: HttpRequest, next: Next) -> Response {
    if req.method() == Method::POST {
        let headers = req.headers();
        let declared = header_text(headers, header::CONTENT_TYPE.as_str());
        let fine = match declared {
            Some(kind) => is_json(kind),
            None => !headers.contains_key(header::ORIGIN),
        };
        if !fine {
            let said = declared.map_or_else(
                || "no Content-Type, from a web page".to_string(),
                |k| format!("`Content-Type: {k}`"),
            );
            return ApiError::unsupported_media_type(format!(
                "The body must be JSON sent with `Content-Type: application/json`; this request \
                 has {said}. (curl's -d alone sends a form type: add \
                 -H 'Content-Type: application/json'.)"
            ))
            .respond(Dialect::of_path(req.uri().path()));
        }
    }
    next.run(req).await
}

/// `application/json` or a `+json` type, parameters aside.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .split_once('/')
            .is_some_and(|(_, subtype)| subtype.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(cors: &[&str], hosts: &[&str]) -> BrowserPolicy {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        BrowserPolicy::new("127.0.0.1:8080".parse().unwrap(), &own(cors), &own(hosts))
    }

    #[test]
    fn a_loopback_server_answers_only_local_names_and_listed_ones() {
        let p = loopback(&[], &[]);
        for ok in [
            "localhost",
            "localhost:8080",
            "LocalHost:1",
            "app.localhost:3000",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]:8080",
            "[::1]",
            "::1",
            "10.1.2.3:8080",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "evillocalhost",
            "",
        ] {
            assert!(!p.host_allowed(refused), "{refused}");
        }
        let p = loopback(&[], &["box.lan", "*.corp.example"]);
        assert!(p.host_allowed("box.lan:8080"));
        assert!(p.host_allowed("a.corp.example"));
        assert!(!p.host_allowed("corp.example"));
        assert!(!p.host_allowed("xcorp.example"));
        assert!(!p.host_allowed("evil.example"));
        assert!(loopback(&[], &["*"]).host_allowed("evil.example"));
    }

    #[test]
    fn a_server_on_the_network_answers_any_name_unless_told() {
        let open = BrowserPolicy::new("0.0.0.0:8080".parse().unwrap(), &[], &[]);
        assert!(open.host_allowed("evil.example"));
        let listed = BrowserPolicy::new(
            "0.0.0.0:8080".parse().unwrap(),
            &[],
            &["chat.example.com".into()],
        );
        assert!(listed.host_allowed("chat.example.com"));
        assert!(listed.host_allowed("10.0.0.5:8080"));
        assert!(!listed.host_allowed("evil.example"));
    }

    #[test]
    fn only_the_own_origin_and_cors_origins_pass() {
        let p = loopback(&["http://app.example/"], &[]);
        assert!(p.origin_allowed("http://localhost:8080", Some("localhost:8080")));
        assert!(p.origin_allowed("https://Chat.Example", Some("chat.example")));
        assert!(p.origin_allowed("http://app.example", Some("localhost:8080")));
        assert!(!p.origin_allowed("http://evil.example", Some("localhost:8080")));
        assert!(!p.origin_allowed("http://localhost:3000", Some("localhost:8080")));
        assert!(!p.origin_allowed("null", Some("localhost:8080")));
        assert!(!p.origin_allowed("http://localhost:8080", None));
        assert!(loopback(&["*"], &[]).origin_allowed("null", None));
    }

    #[test]
    fn json_is_application_json_or_a_json_suffix() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.api+json",
        ] {
            assert!(is_json(ok), "{ok}");
        }
        for refused in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/json",
            "json",
            "",
        ] {
            assert!(!is_json(refused), "{refused}");
        }
    }
}
