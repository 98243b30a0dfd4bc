//! A fake environment registry (HTTP) and rendezvous (WebSocket) on loopback for remote mode:
//! it records the registration and every dial (requests, headers, bodies), answers the
//! registration with the rendezvous URL and accepts or refuses upgrades; the test then plays
//! the JSON-RPC client over the accepted socket. And a SigV4 verifier written from AWS's
//! specification, so that signatures are checked independently of the signer.

use ring::{digest, hmac};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The credentials handed to the executor (its environment) and checked here.
pub const KEY_ID: &str = "AKIDREMOTETEST";
pub const SECRET: &str = "remote/test+secret/key";
pub const REGION: &str = "us-test-1";
pub const ENVIRONMENT: &str = "env-test";

/// The executor's environment for SigV4 with the keys above, and no profile files of the
/// machine's.
pub const SIGV4_ENV: [(&str, &str); 5] = [
    ("AWS_ACCESS_KEY_ID", KEY_ID),
    ("AWS_SECRET_ACCESS_KEY", SECRET),
    ("AWS_REGION", REGION),
    ("AWS_CONFIG_FILE", "/nonexistent"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
];

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One HTTP request as received: its request line's method and target, headers (names in
/// lower case), body.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The path and the query of the target.
    pub fn path_query(&self) -> (&str, &str) {
        self.target.split_once('?').unwrap_or((&self.target, ""))
    }
}

pub struct Registry {
    /// The base URL the executor is given (`--remote`).
    pub url: String,
    /// The URL the registration answer names.
    pub rendezvous_url: String,
    registrations: mpsc::UnboundedReceiver<Received>,
    dials: mpsc::UnboundedReceiver<(Received, Option<Socket>)>,
    /// The status the next upgrades get instead of 101, if set.
    refuse: Arc<Mutex<Option<u16>>>,
}

/// What the registry answers instead of a registration, if set: a status and a body.
pub type Answer = Option<(u16, String)>;

impl Registry {
    pub async fn start() -> Self {
        Self::answering(None).await
    }

    /// A registry that answers registrations with `answer` (None: as it should).
    pub async fn answering(answer: Answer) -> Self {
        let registry = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let rendezvous = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", registry.local_addr().unwrap());
        let rendezvous_url = format!(
            "ws://{}/rendezvous/{ENVIRONMENT}?sig=abc&role=environment",
            rendezvous.local_addr().unwrap()
        );
        let (registered, registrations) = mpsc::unbounded_channel();
        let rendezvous_answer = rendezvous_url.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = registry.accept().await {
                let answer = answer.clone();
                let url = rendezvous_answer.clone();
                tokio::spawn(register(stream, url, answer, registered.clone()));
            }
        });
        let refuse = Arc::new(Mutex::new(None));
        let (dialed, dials) = mpsc::unbounded_channel();
        let refusing = refuse.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = rendezvous.accept().await {
                let status = *refusing.lock().unwrap();
                tokio::spawn(upgrade(stream, status, dialed.clone()));
            }
        });
        Self {
            url,
            rendezvous_url,
            registrations,
            dials,
            refuse,
        }
    }

    /// The next registration, within `patience`.
    pub async fn registration(&mut self, patience: std::time::Duration) -> Option<Received> {
        tokio::time::timeout(patience, self.registrations.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next dial (its handshake request, and the socket unless it was refused), within
    /// `patience`.
    pub async fn dial(
        &mut self,
        patience: std::time::Duration,
    ) -> Option<(Received, Option<Socket>)> {
        tokio::time::timeout(patience, self.dials.recv())
            .await
            .ok()
            .flatten()
    }

    /// From now on, upgrades get `status` instead of 101 (None: accepted again).
    pub fn refuse_upgrades(&self, status: Option<u16>) {
        *self.refuse.lock().unwrap() = status;
    }
}

/// Serves one registration request: recorded, answered with `answer` or else with
/// `rendezvous_url` and the environment id of the path.
async fn register(
    mut stream: TcpStream,
    rendezvous_url: String,
    answer: Answer,
    registered: mpsc::UnboundedSender<Received>,
) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let environment = request
        .target
        .strip_prefix("/cloud/environment/")
        .and_then(|rest| rest.strip_suffix("/direct/register"))
        .unwrap_or("?")
        .to_owned();
    let _ = registered.send(request);
    let (status, body) = answer.unwrap_or_else(|| {
        let body = serde_json::json!({
            "environment_id": environment,
            "url": rendezvous_url,
            "transport": "direct_jsonrpc_v1",
            "registration_id": "reg-1",
            "ignored_member": true,
        });
        (200, body.to_string())
    });
    let reason = axum::http::StatusCode::from_u16(status)
        .unwrap()
        .canonical_reason()
        .unwrap_or("");
    let reply = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: \
         {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// One HTTP/1.1 request with a `content-length` body.
async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buffer = Vec::new();
    let head_end = loop {
        let mut chunk = [0; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target) = (
        request_line.next()?.to_owned(),
        request_line.next()?.to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| value.parse().unwrap());
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(Received {
        method,
        target,
        headers,
        body,
    })
}

/// Serves one dial: its handshake recorded, then refused with `status` or accepted.
// tungstenite's callback type returns its (large) error response by value.
#[allow(clippy::result_large_err)]
async fn upgrade(
    stream: TcpStream,
    status: Option<u16>,
    dialed: mpsc::UnboundedSender<(Received, Option<Socket>)>,
) {
    let seen = Arc::new(Mutex::new(None));
    let record = seen.clone();
    let callback = move |request: &Request, response: Response| {
        *record.lock().unwrap() = Some(Received {
            method: request.method().to_string(),
            target: request.uri().to_string(),
            headers: request
                .headers()
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.to_str().unwrap().to_owned()))
                .collect(),
            body: Vec::new(),
        });
        match status {
            None => Ok(response),
            Some(status) => {
                let mut refusal = ErrorResponse::new(Some("refused".to_owned()));
                *refusal.status_mut() = status.try_into().unwrap();
                Err(refusal)
            }
        }
    };
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None);
    let accepted = tokio_tungstenite::accept_hdr_async_with_config(
        MaybeTlsStream::Plain(stream),
        callback,
        Some(config),
    )
    .await;
    let Some(request) = seen.lock().unwrap().take() else {
        return;
    };
    let _ = dialed.send((request, accepted.ok()));
}

/// Checks `request`'s AWS SigV4 `Authorization` (key [`KEY_ID`], secret [`SECRET`], region
/// [`REGION`], service `execute-api`) by computing it again; returns its signed headers.
pub fn verify_sigv4(request: &Received) -> Result<Vec<String>, String> {
    let authorization = request.header("authorization").ok_or("no authorization")?;
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| format!("not SigV4: {authorization}"))?;
    let field = |name: &str| {
        rest.split(", ")
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
            .ok_or(format!("no {name} in {authorization}"))
    };
    let (credential, signed, signature) = (
        field("Credential")?,
        field("SignedHeaders")?,
        field("Signature")?,
    );
    let date_time = request.header("x-amz-date").ok_or("no x-amz-date")?;
    let date = &date_time[..8];
    let scope = format!("{date}/{REGION}/execute-api/aws4_request");
    if credential != format!("{KEY_ID}/{scope}") {
        return Err(format!(
            "credential {credential}, expected {KEY_ID}/{scope}"
        ));
    }
    let names: Vec<String> = signed.split(';').map(str::to_owned).collect();
    let mut canonical_headers = String::new();
    for name in &names {
        let value = request
            .header(name)
            .ok_or(format!("signed {name} missing"))?;
        canonical_headers += &format!("{name}:{}\n", value.trim());
    }
    let (path, query) = request.path_query();
    let mut pairs: Vec<&str> = query.split('&').filter(|pair| !pair.is_empty()).collect();
    pairs.sort_unstable();
    let canonical = format!(
        "{}\n{path}\n{}\n{canonical_headers}\n{signed}\n{}",
        request.method,
        pairs.join("&"),
        hex(digest::digest(&digest::SHA256, &request.body).as_ref())
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date_time}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let mut key = format!("AWS4{SECRET}").into_bytes();
    for part in [date, REGION, "execute-api", "aws4_request"] {
        key = mac(&key, part.as_bytes());
    }
    let expected = hex(&mac(&key, to_sign.as_bytes()));
    if signature != expected {
        return Err(format!(
            "signature {signature}, expected {expected} over {canonical:?}"
        ));
    }
    Ok(names)
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
