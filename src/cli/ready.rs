//! `exec-server ready`: exits 0 when a daemon answers `GET /readyz` with 200, 1 otherwise. A
//! container health check that needs nothing but the daemon's own binary (the runtime image
//! has no curl, and its `sh` has no `/dev/tcp`).

use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Debug, clap::Args)]
pub struct ReadyArgs {
    /// The daemon's URL (e.g. ws://127.0.0.1:8765, wss://…, unix:///…); `/readyz` needs no
    /// token.
    #[arg(long, env = "EXEC_SERVER_URL")]
    url: String,
    /// For wss://: CA certificates (PEM) to trust besides the usual roots.
    #[arg(long, env = "EXEC_SERVER_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// Not ready if no answer came within this long.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// The exit code: 0 ready, 1 not (with the reason on stderr), as health checks expect.
pub(super) async fn run(args: ReadyArgs) -> u8 {
    match tokio::time::timeout(args.timeout, readyz(&args.url, args.ca_file.as_deref())).await {
        Ok(Ok(())) => 0,
        Ok(Err(err)) => {
            eprintln!("exec-server: not ready: {err:#}");
            1
        }
        Err(_) => {
            eprintln!(
                "exec-server: not ready: no answer from {} within {:?}",
                args.url, args.timeout
            );
            1
        }
    }
}

pub(super) async fn readyz(text: &str, ca_file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let (stream, uri) = exec_server_client::open_stream(text, ca_file).await?;
    ask(stream, uri.authority().map_or("localhost", |a| a.as_str())).await
}

/// `GET /readyz` on an open connection to `host`.
async fn ask(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    host: &str,
) -> anyhow::Result<()> {
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    // The status line is all that matters; a server that never stops talking is cut off.
    let mut response = Vec::new();
    stream.take(4096).read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let status = response.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.starts_with("HTTP/1.1 200 "),
        "GET /readyz answered `{status}`"
    );
    Ok(())
}
