//! `hearth health`: a tiny HTTP probe for container health checks. A
//! `FROM scratch` image has no curl or wget, so the binary probes itself:
//! one `GET` over plain HTTP/1.1, exit 0 on a 200 and 1 otherwise. With
//! `--wait` it retries until a 200 comes (scripts that wait for a server).

use anyhow::{anyhow, bail, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Flags of `hearth health`.
#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    /// The URL to probe (http://; the probe runs next to the server).
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
    /// The server's API key, sent as a Bearer token (/health is behind it
    /// unless the server runs with --public-health); read from
    /// HEARTH_API_KEY, as the server reads it, so a container's probe just works.
    #[arg(long, env = "HEARTH_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

/// GET `url` once: its status code, or why there is none. The agent never
/// uses a proxy from the environment: the probe runs beside the server.
fn probe(url: &str, timeout: Duration, key: Option<&str>) -> Result<u16> {
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .user_agent("hearth-health")
        .build();
    let mut req = agent.get(url);
    if let Some(key) = key.filter(|k| !k.is_empty()) {
        req = req.set("Authorization", &format!("Bearer {key}"));
    }
    match req.call() {
        Ok(resp) => Ok(resp.status()),
        Err(ureq::Error::Status(code, _)) => Ok(code),
        Err(ureq::Error::Transport(t)) => Err(anyhow!("{url}: {t}")),
    }
}

/// Whether `url` could ever be probed: http:// with a host (a mistake here
/// fails at once, not after `--wait` seconds of retries).
fn check_url(url: &str) -> Result<()> {
    match url.trim().strip_prefix("http://") {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        _ => bail!("{url}: expected http://HOST[:PORT]/PATH"),
    }
}

/// Probe the URL: exit 0 on 200, 1 on any other status or error.
pub fn run(args: &HealthArgs) -> Result<ExitCode> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    let timeout = Duration::from_secs_f64(args.timeout.min(3600.0));
    // A malformed URL fails at once, waiting or not.
    check_url(&args.url)?;
    let status = match args.wait {
        None => probe(&args.url, timeout, args.api_key.as_deref())?,
        Some(w) if w.is_finite() && w >= 0.0 => {
            let deadline = Instant::now() + Duration::from_secs_f64(w.min(86_400.0));
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let wait = timeout.min(left.max(Duration::from_millis(100)));
                let res = probe(&args.url, wait, args.api_key.as_deref());
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

    #[test]
    fn only_http_urls_with_a_host_are_probed() {
        for ok in [
            "http://127.0.0.1:8080/health",
            "http://localhost",
            "http://[::1]:9/h",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "https://x/health",
            "x:8080/health",
            "http:///health",
            "http://",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_closed_port_is_an_error_not_a_status() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/health");
        assert!(probe(&url, Duration::from_secs(2), None).is_err());
    }
}
