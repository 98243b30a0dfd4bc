//! The envd listeners: each binds its address, holds its session and serves its routes over
//! HTTP/1.1 (keep-alive) and h2c on every connection, behind `X-Access-Token` when one is set.
//! Until its first request has arrived, a connection holds a place of the listener's HTTP phase
//! under a deadline, as a WebSocket listener's does before its upgrade (`server::admission`),
//! and a connection made inside a sandbox is closed unread, as there.

use super::connect::{client_stream, server_stream, unary, Code, ConnectError};
use super::Envd;
use crate::config::EnvdListen;
use crate::server::admission::{accept_tcp, retry_accept, Peer};
use crate::server::pending_http::PendingHttp;
use crate::server::Daemon;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use subtle::ConstantTimeEq as _;

/// Binds every `--envd-listen` address and serves each in tasks of its own.
pub(crate) async fn spawn(daemon: &Arc<Daemon>) -> anyhow::Result<()> {
    let settings = &daemon.config.envd;
    if let Some((path, profile)) = &settings.sandbox {
        crate::sandbox::profile::check(profile).map_err(|err| {
            anyhow::anyhow!(
                "--envd-sandbox {} is not a sandbox profile: {err}",
                path.display()
            )
        })?;
    }
    for listen in &settings.listen {
        // One session per listener, named after its address so a restart finds it again.
        let session = daemon.sessions.hold(&format!("envd {listen}"))?;
        let envd = Arc::new(Envd {
            daemon: daemon.clone(),
            session,
            watchers: Default::default(),
            accounts: Default::default(),
        });
        let http = PendingHttp::new(routes(envd), &daemon.config);
        match listen {
            EnvdListen::Tcp(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|err| anyhow::anyhow!("cannot listen for envd on {addr}: {err}"))?;
                let local = listener.local_addr()?;
                crate::sandbox::peers::note_listener(local);
                tracing::info!("envd listening on http://{local}");
                tokio::spawn(serve_tcp(listener, http));
            }
            EnvdListen::Unix(path) => {
                let listener = bind_unix(path).map_err(|err| {
                    anyhow::anyhow!("cannot listen for envd on {}: {err}", path.display())
                })?;
                tracing::info!("envd listening on unix://{}", path.display());
                tokio::spawn(serve_unix(listener, http));
            }
        }
    }
    Ok(())
}

async fn serve_tcp(listener: tokio::net::TcpListener, http: PendingHttp) {
    loop {
        // A sandbox on the host network must not drive the daemon from outside its sandbox.
        let (stream, peer) = accept_tcp(&listener).await;
        http.serve(stream, Peer::of_ip(peer.ip()));
    }
}

async fn serve_unix(listener: tokio::net::UnixListener, http: PendingHttp) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // Places count per uid (only the daemon's may connect; the socket is 0600).
                let uid = stream.peer_cred().map_or(u32::MAX, |cred| cred.uid());
                http.serve(stream, Peer::Uid(uid));
            }
            Err(err) => retry_accept(err).await,
        }
    }
}

/// A socket at `path` that only the daemon's user may connect to (whoever connects runs
/// commands as any user). A socket left by a daemon that is gone (a predecessor, a crash) is
/// replaced; a live one is not.
fn bind_unix(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    let stale = std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
        && std::os::unix::net::UnixStream::connect(path)
            .is_err_and(|err| err.kind() == std::io::ErrorKind::ConnectionRefused);
    if stale {
        std::fs::remove_file(path)?;
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn routes(envd: Arc<Envd>) -> Router {
    let rpc = Router::new()
        .route("/{service}/{method}", post(rpc))
        .route(
            "/files",
            get(super::files::download).post(super::files::upload),
        )
        .route("/metrics", get(metrics))
        .route("/envs", get(|| async { axum::Json(serde_json::json!({})) }))
        .layer(axum::middleware::from_fn_with_state(
            envd.clone(),
            access_token,
        ));
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .merge(rpc)
        .layer(axum::middleware::from_fn_with_state(
            envd.clone(),
            body_deadline,
        ))
        .with_state(envd)
}

/// A deadline on every request body's silence: a client that sends a head and stalls its body
/// would hold its connection (a descriptor) without end, and a body that sends nothing for it
/// fails (its connection then closes). `--upgrade-timeout`, as for the HTTP phase before the
/// head; `StreamInput` may idle between its keepalives as a WebSocket between pings, two
/// `--ping-interval`s. Unary bodies must also be whole by then (`connect::body_bytes`).
async fn body_deadline(State(envd): State<Arc<Envd>>, request: Request, next: Next) -> Response {
    let config = &envd.daemon.config;
    let idle = match request.uri().path() {
        "/process.Process/StreamInput" => config.ping_interval * 2,
        _ => config.upgrade_timeout,
    };
    next.run(request.map(|body| Body::new(tower_http::timeout::TimeoutBody::new(idle, body))))
        .await
}

/// `X-Access-Token`, compared in constant time, when `--envd-access-token-file` is set.
async fn access_token(State(envd): State<Arc<Envd>>, request: Request, next: Next) -> Response {
    if let Some(token) = &envd.daemon.config.envd.access_token {
        let given = request
            .headers()
            .get("x-access-token")
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if !bool::from(given.ct_eq(token.as_bytes())) {
            return ConnectError::new(Code::Unauthenticated, "invalid access token")
                .into_response();
        }
    }
    next.run(request).await
}

/// A Connect call to `/SERVICE/METHOD`.
async fn rpc(
    State(envd): State<Arc<Envd>>,
    Path((service, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match service.as_str() {
        "process.Process" => process_rpc(envd, &method, headers, body).await,
        "filesystem.Filesystem" => super::filesystem::rpc(envd, &method, headers, body).await,
        _ => super::connect::no_method(&service, &method),
    }
}

async fn process_rpc(envd: Arc<Envd>, method: &str, headers: HeaderMap, body: Body) -> Response {
    let h = &headers;
    match method {
        "Start" => {
            let envd = envd.clone();
            let headers = headers.clone();
            server_stream(h, body, move |request, events| {
                envd.start(headers, request, events)
            })
            .await
        }
        "Connect" => {
            let headers = headers.clone();
            server_stream(h, body, move |request, events| {
                envd.connect(headers, request, events)
            })
            .await
        }
        "StreamInput" => {
            client_stream(h, body, |requests| async move {
                envd.stream_input(requests).await
            })
            .await
        }
        unary_method => {
            let within = envd.daemon.config.upgrade_timeout;
            let body = match super::connect::body_bytes(body, within).await {
                Ok(body) => body,
                Err(error) => return error.into_response(),
            };
            match unary_method {
                "List" => unary(h, body, async |_: super::messages::Empty| Ok(envd.list())).await,
                "SendInput" => unary(h, body, async |r| envd.send_input(r)).await,
                "CloseStdin" => unary(h, body, async |r| envd.close_stdin(r)).await,
                "SendSignal" => unary(h, body, async |r| envd.send_signal(r)).await,
                "Update" => unary(h, body, async |r| envd.update(r)).await,
                other => super::connect::no_method("process.Process", other),
            }
        }
    }
}

/// envd's `/metrics`: the host's resource use, as JSON.
async fn metrics() -> Response {
    let (mem_total, mem_available, mem_cache) = meminfo();
    let (disk_total, disk_used) = match nix::sys::statvfs::statvfs("/") {
        Ok(fs) => {
            let block = fs.fragment_size();
            let total = fs.blocks() * block;
            (total, total - fs.blocks_free() * block)
        }
        Err(_) => (0, 0),
    };
    let mem_used = mem_total.saturating_sub(mem_available);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    axum::Json(serde_json::json!({
        "ts": ts,
        "cpu_count": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "mem_total": mem_total,
        "mem_used": mem_used,
        "mem_cache": mem_cache,
        "mem_total_mib": mem_total / (1 << 20),
        "mem_used_mib": mem_used / (1 << 20),
        "disk_total": disk_total,
        "disk_used": disk_used,
    }))
    .into_response()
}

/// MemTotal, MemAvailable and Cached from /proc/meminfo, in bytes.
fn meminfo() -> (u64, u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        (text.lines())
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("MemTotal"), field("MemAvailable"), field("Cached"))
}
