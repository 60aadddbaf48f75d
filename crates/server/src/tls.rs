//! HTTPS on the server's own port (`--tls-cert`, `--tls-key`), for users who
//! expose it without a proxy: rustls with its ring provider, HTTP/1.1 over
//! it. A client that speaks plain HTTP to the port gets a short plain-HTTP
//! 400 that says to use `https://`, not a handshake error it cannot read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The certificate chain and private key files, PEM.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the TLS set-up failed (at start, before the port is bound).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("cannot read {what} {}: {why}", path.display())]
    Read {
        /// `certificate` or `private key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the pair (a key that does not match, say).
    #[error("the certificate and key cannot be used together: {0}")]
    Config(String),
}

/// An acceptor for `files`.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read_err = |what, path: &Path, why: String| TlsError::Read {
        what,
        path: path.to_path_buf(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| read_err("certificate", &files.cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| read_err("certificate", &files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(read_err(
            "certificate",
            &files.cert,
            "no CERTIFICATE block in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| read_err("private key", &files.key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A TLS handshake record starts with this byte; plain HTTP with a letter.
const HANDSHAKE: u8 = 0x16;

/// The answer to plain HTTP on the TLS port.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 57\r\n\r\n\
This port speaks HTTPS: use an https:// URL to reach it.\n";

/// Complete the handshake on `stream` within `limit`; `None` (the
/// connection closed) when the client sent plain HTTP (answered with a 400
/// first), failed the handshake, or took too long.
pub(crate) async fn accept(
    acceptor: &TlsAcceptor,
    mut stream: TcpStream,
    limit: Duration,
) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(limit, stream.peek(&mut first)).await;
    match peeked {
        Ok(Ok(1)) if first[0] == HANDSHAKE => {}
        Ok(Ok(1)) => {
            let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
            let _ = stream.shutdown().await;
            return None;
        }
        _ => return None,
    }
    tokio::time::timeout(limit, acceptor.accept(stream))
        .await
        .ok()?
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_answer_says_its_length() {
        let text = std::str::from_utf8(PLAIN_HTTP_ANSWER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn missing_files_are_named() {
        let files = TlsFiles {
            cert: "/no/such/cert.pem".into(),
            key: "/no/such/key.pem".into(),
        };
        let e = acceptor(&files).err().unwrap().to_string();
        assert!(
            e.contains("certificate") && e.contains("/no/such/cert.pem"),
            "{e}"
        );
    }
}
