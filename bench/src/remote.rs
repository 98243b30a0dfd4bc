//! Remote mode for the fan-out: the bench plays the environment registry (one HTTP endpoint)
//! and the rendezvous (it accepts the WebSocket the daemon dials), and drives the daemon over
//! that one socket, as an orchestrator that is its own rendezvous does.

use anyhow::Context as _;
use exec_server_client::{Client, ClientOptions};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// A daemon in remote mode and the client over the socket it dialed.
pub(crate) struct Remote {
    pub(crate) client: Client,
    _daemon: crate::daemon::Daemon,
    _token: tempfile::TempDir,
}

impl Remote {
    /// `binary` started with `--remote` (beside its usual listener), bearer-authenticated.
    pub(crate) async fn start(binary: &Path) -> anyhow::Result<Self> {
        let registry = TcpListener::bind("127.0.0.1:0").await?;
        let rendezvous = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!(
            "ws://{}/executor?role=environment",
            rendezvous.local_addr()?
        );
        let registry_url = format!("http://{}", registry.local_addr()?);
        tokio::spawn(answer_registrations(registry, url));
        let token = tempfile::tempdir()?;
        let token_file = token.path().join("token");
        std::fs::write(&token_file, "bench-token\n")?;
        std::fs::set_permissions(
            &token_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )?;
        let daemon = crate::daemon::Daemon::start(
            binary,
            &[
                "--remote",
                &registry_url,
                "--environment-id",
                "bench",
                "--remote-transport",
                "direct",
                "--remote-token-file",
                token_file.to_str().context("a UTF-8 temp path")?,
            ],
        )?;
        let (tcp, _) = tokio::time::timeout(Duration::from_secs(10), rendezvous.accept())
            .await
            .context("the daemon in remote mode did not dial the rendezvous")??;
        tcp.set_nodelay(true)?;
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let socket = tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await?;
        let client = Client::over_dialed_socket(socket, ClientOptions::new("remote")).await?;
        Ok(Self {
            client,
            _daemon: daemon,
            _token: token,
        })
    }
}

/// Answers every registration with `url`: the request is read to its end (headers, then a
/// `content-length` body) and not checked; the tests check it.
async fn answer_registrations(registry: TcpListener, url: String) {
    let body = serde_json::json!({
        "environment_id": "bench",
        "url": url,
        "transport": "direct_jsonrpc_v1",
        "registration_id": "bench-1",
    })
    .to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    while let Ok((mut stream, _)) = registry.accept().await {
        let mut request = Vec::new();
        let mut chunk = [0; 4096];
        while !complete(&request) {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => request.extend_from_slice(&chunk[..read]),
            }
        }
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

/// Whether `request` holds its headers and all of its `content-length` body.
fn complete(request: &[u8]) -> bool {
    let Some(end) = request.windows(4).position(|window| window == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    request.len() >= end + 4 + length
}
