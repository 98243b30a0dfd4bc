//! A TLS-intercepting CONNECT proxy on loopback, as a corporate one is (and as codex's own
//! `chatgpt_cloudflare_affinity` test uses): it accepts `CONNECT host:443`, then terminates TLS
//! itself with a certificate for that host signed by its own throwaway CA, and answers the
//! HTTP/1.1 requests inside. Nothing leaves the machine.
//!
//! Each answer is `200 ok`, with one `Set-Cookie: NAME=VALUE; Path=/; Secure` per `set=NAME=VALUE`
//! item of the request's query. Every request is recorded with its host and `Cookie` header.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One request seen inside a tunnel.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub host: String,
    pub path: String,
    pub cookie: Option<String>,
}

pub struct InterceptingProxy {
    pub port: u16,
    /// The proxy's CA certificate (PEM), for the client to trust.
    pub ca_pem: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl InterceptingProxy {
    pub async fn start() -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "intercepting proxy test CA");
        let ca = Arc::new(rcgen::CertifiedIssuer::self_signed(params, ca_key).unwrap());
        let ca_pem = ca.pem();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (seen, ca) = (seen.clone(), ca.clone());
                    tokio::spawn(async move {
                        let _ = tunnel(client, &ca, &seen).await;
                    });
                }
            })
        };
        Self {
            port,
            ca_pem,
            seen,
            accept,
        }
    }

    /// The requests seen so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for InterceptingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn tunnel(
    client: TcpStream,
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    let mut client = BufReader::new(client);
    let head = read_head(&mut client).await?;
    let target = head[0]
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    let host = target
        .rsplit_once(':')
        .map_or(&*target, |(host, _)| host)
        .to_owned();
    let client = client.into_inner();
    let mut client = client;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(ca, &host)));
    let mut tls = BufReader::new(acceptor.accept(client).await?);
    loop {
        let head = match read_head(&mut tls).await {
            Ok(head) if !head.is_empty() => head,
            _ => return Ok(()),
        };
        let path = head[0].split_whitespace().nth(1).unwrap_or("/").to_owned();
        let cookie = head.iter().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("cookie")
                .then(|| value.trim().to_owned())
        });
        let set_cookies: String = path
            .split_once('?')
            .map(|(_, query)| query)
            .unwrap_or_default()
            .split('&')
            .filter_map(|item| item.strip_prefix("set="))
            .map(|cookie| format!("Set-Cookie: {cookie}; Path=/; Secure\r\n"))
            .collect();
        seen.lock().unwrap().push(Seen {
            host: host.clone(),
            path,
            cookie,
        });
        let response = format!(
            "HTTP/1.1 200 OK\r\n{set_cookies}Content-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
        );
        tls.get_mut().write_all(response.as_bytes()).await?;
    }
}

/// The request head's lines, up to the blank line (empty at end of stream).
async fn read_head<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Vec<String>> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(Vec::new());
        }
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            return Ok(lines);
        }
        lines.push(line);
    }
}

/// TLS 1.3 (and 1.2) for `host`, with a certificate the CA signs on the spot.
fn server_config(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    host: &str,
) -> rustls::ServerConfig {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![host.to_owned()])
        .unwrap()
        .signed_by(&key, ca)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap()
}
