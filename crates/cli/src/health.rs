//! `hearth health`: a tiny HTTP probe for container health checks. A
//! `FROM scratch` image has no curl or wget, so the binary probes itself:
//! one `GET` over plain HTTP/1.1, exit 0 on a 200 and 1 otherwise. With
//! `--wait` it retries until a 200 comes (scripts that wait for a server).

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Flags of `hearth health`.
#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    /// The URL to probe (plain http:// only; the probe runs next to the server).
    #[arg(long, default_value = "http://127.0.0.1:8080/health")]
    url: String,
    /// Seconds to wait for the connection and for the answer.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Print nothing on success.
    #[arg(short, long)]
    quiet: bool,
    /// Retry every 10 ms for up to this many seconds until the answer is 200
    /// (a server still starting refuses connections, then answers 503).
    #[arg(long, value_name = "SECS")]
    wait: Option<f64>,
}

/// Where a request goes: `host:port` to connect to, the Host header, the path.
#[derive(Debug, PartialEq)]
struct Target {
    authority: String,
    path: String,
}

/// Split `http://HOST[:PORT][/PATH]`; port 80 and path `/` when absent.
fn parse_url(url: &str) -> Result<Target> {
    let rest = url
        .trim()
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("{url}: only http:// URLs can be probed"))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        bail!("{url}: expected http://HOST[:PORT]/PATH");
    }
    if path.chars().any(|c| c.is_ascii_control() || c == ' ') {
        bail!("{url}: the path has spaces or control characters");
    }
    // A port is present when the part after the last ':' is outside an
    // IPv6 literal's brackets.
    let has_port = authority
        .rfind(':')
        .is_some_and(|i| !authority[i..].contains(']'));
    let authority = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok(Target { authority, path })
}

/// The status code of a raw HTTP/1.x response's first line.
fn status_of(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// GET `url` and return its status code.
fn probe(url: &str, timeout: Duration) -> Result<u16> {
    let target = parse_url(url)?;
    let addrs: Vec<_> = target
        .authority
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {}", target.authority))?
        .collect();
    let mut last_err = None;
    let mut stream = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_err = Some(e),
        }
    }
    let Some(mut s) = stream else {
        return Err(match last_err {
            Some(e) => anyhow!("cannot connect to {}: {e}", target.authority),
            None => anyhow!("{} resolves to no address", target.authority),
        });
    };
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let host = target
        .authority
        .strip_suffix(":80")
        .unwrap_or(&target.authority);
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hearth-health\r\nConnection: close\r\n\r\n",
        target.path
    );
    s.write_all(req.as_bytes())
        .with_context(|| format!("cannot send to {}", target.authority))?;
    // The status line is all we need; read at most a little more.
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 4096 {
        let n = s
            .read(&mut buf)
            .with_context(|| format!("no answer from {}", target.authority))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    status_of(&head).ok_or_else(|| anyhow!("{url} did not answer with HTTP"))
}

/// Probe the URL: exit 0 on 200, 1 on any other status or error.
pub fn run(args: &HealthArgs) -> Result<ExitCode> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    let timeout = Duration::from_secs_f64(args.timeout.min(3600.0));
    // A malformed URL fails at once, waiting or not.
    parse_url(&args.url)?;
    let status = match args.wait {
        None => probe(&args.url, timeout)?,
        Some(w) if w.is_finite() && w >= 0.0 => {
            let deadline = Instant::now() + Duration::from_secs_f64(w.min(86_400.0));
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let res = probe(&args.url, timeout.min(left.max(Duration::from_millis(100))));
                match res {
                    Ok(200) => break 200,
                    Ok(_) | Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    other => break other?,
                }
            }
        }
        Some(_) => bail!("--wait must be a number of seconds, 0 or more"),
    };
    if status == 200 {
        if !args.quiet {
            println!("{} 200", args.url);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{} answered {status}", args.url);
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(authority: &str, path: &str) -> Target {
        Target {
            authority: authority.into(),
            path: path.into(),
        }
    }

    #[test]
    fn urls_split_into_authority_and_path() {
        let ok = |u: &str| parse_url(u).expect(u);
        assert_eq!(
            ok("http://127.0.0.1:8080/health"),
            t("127.0.0.1:8080", "/health")
        );
        assert_eq!(ok("http://localhost"), t("localhost:80", "/"));
        assert_eq!(ok("http://[::1]:9/h?x=1"), t("[::1]:9", "/h?x=1"));
        assert_eq!(ok("http://[::1]/"), t("[::1]:80", "/"));
        assert_eq!(ok("http://h:1?q"), t("h:1", "/?q"));
        for bad in [
            "https://x/health",
            "x:8080/health",
            "http:///health",
            "http://u@h/",
            "http://h/a b",
            "",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.0 503 x"), Some(503));
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b""), None);
        assert_eq!(status_of(b"HTTP/1.1 abc"), None);
        assert_eq!(status_of(&[0xff, 0xfe, b'\n']), None);
    }
}
