//! The byte stream to a daemon, by its URL: TCP for `ws://`, TLS over TCP for `wss://` (the
//! Mozilla roots and an optional CA file), a Unix socket for `unix:///PATH`.

use crate::Error;
use std::path::Path;
use std::sync::Arc;
use tokio_tungstenite::tungstenite::http::Uri;

/// Any stream the WebSocket (or a plain HTTP request) can run over.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Opens the stream to the daemon at `url`, and returns the URI its HTTP requests name (a Unix
/// socket's names `localhost`).
pub async fn open(url: &str, ca_file: Option<&Path>) -> Result<(Box<dyn Io>, Uri), Error> {
    let cannot =
        |err: &dyn std::fmt::Display| Error::Connect(format!("cannot connect to {url}: {err}"));
    let invalid =
        |err: &dyn std::fmt::Display| Error::Connect(format!("invalid URL `{url}`: {err}"));
    if let Some(path) = url.strip_prefix("unix://") {
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .map_err(|err| cannot(&err))?;
        return Ok((Box::new(stream), Uri::from_static("ws://localhost/")));
    }
    let uri: Uri = url.parse().map_err(|err| invalid(&err))?;
    let tls = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => return Err(invalid(&"expected ws://, wss:// or unix:///PATH")),
    };
    let host = uri.host().ok_or_else(|| invalid(&"no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|err| cannot(&err))?;
    // Without it a small request waits for the daemon's delayed ACK.
    let _ = stream.set_nodelay(true);
    if !tls {
        return Ok((Box::new(stream), uri));
    }
    let name =
        rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|err| invalid(&err))?;
    let stream = tls_connector(ca_file)?
        .connect(name, stream)
        .await
        .map_err(|err| cannot(&err))?;
    Ok((Box::new(stream), uri))
}

/// TLS trusting the Mozilla roots and the certificates of `ca_file`.
fn tls_connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, Error> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = ca_file {
        let unreadable = |err: &dyn std::fmt::Display| {
            Error::Connect(format!("CA file {}: {err}", path.display()))
        };
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|err| unreadable(&err))?;
        for cert in certs {
            roots
                .add(cert.map_err(|err| unreadable(&err))?)
                .map_err(|err| unreadable(&err))?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|err| Error::Connect(err.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}
