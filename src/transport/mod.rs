//! Where clients connect: a WebSocket listener (with `/readyz`) on TCP or on a Unix socket, or
//! a single stdio connection.

pub(crate) mod handover;
mod remote;
pub(crate) mod stdio;
mod systemd;
mod tls;
mod unix_socket;
mod ws;
mod zero_copy;

use crate::config::{Config, RemoteConfig};
use crate::server::Daemon;
use std::net::SocketAddr;
use std::sync::Arc;

pub use handover::Handover;
#[doc(hidden)]
pub use remote::registry_reply;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenUrl {
    WebSocket(SocketAddr),
    /// `wss://`: TLS with `--tls-cert` and `--tls-key`.
    SecureWebSocket(SocketAddr),
    /// The WebSocket protocol on a Unix socket at this absolute path.
    Unix(std::path::PathBuf),
    Stdio,
}

impl ListenUrl {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        if text == "stdio" || text == "stdio://" {
            return Ok(Self::Stdio);
        }
        if let Some(path) = text.strip_prefix("unix://") {
            anyhow::ensure!(
                path.starts_with('/') && path.len() > 1,
                "invalid --listen URL `{text}`; expected `unix:///ABSOLUTE/PATH`"
            );
            return Ok(Self::Unix(path.into()));
        }
        if let Some(addr) = text.strip_prefix("wss://") {
            return addr.parse().map(Self::SecureWebSocket).map_err(|_| {
                anyhow::anyhow!("invalid websocket --listen URL `{text}`; expected `wss://IP:PORT`")
            });
        }
        match text.strip_prefix("ws://") {
            Some(addr) => addr.parse().map(Self::WebSocket).map_err(|_| {
                anyhow::anyhow!("invalid websocket --listen URL `{text}`; expected `ws://IP:PORT`")
            }),
            None => anyhow::bail!(
                "unsupported --listen URL `{text}`; expected `ws://IP:PORT`, `wss://IP:PORT`, `unix:///PATH` or `stdio`"
            ),
        }
    }
}

/// How long shutdown waits for the audit records still queued (the processes' last exits).
const AUDIT_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A `ws://`, `wss://` or `unix://` listener.
enum Listener {
    Tcp(tokio::net::TcpListener),
    /// Its file is removed when this is dropped, once the daemon stops serving (never in a
    /// hand-over, which exits before).
    Unix(unix_socket::UnixSocket),
}

impl Listener {
    /// Binds `listen`, or takes over the socket a predecessor passed; None for stdio.
    async fn open(
        listen: &ListenUrl,
        inherited: Option<std::os::fd::OwnedFd>,
        config: &Config,
    ) -> anyhow::Result<Option<Self>> {
        Ok(Some(match (listen, inherited) {
            (ListenUrl::Stdio, None) => return Ok(None),
            (ListenUrl::Stdio, Some(_)) => return Err(handover::HandoverError::Stdio.into()),
            (ListenUrl::WebSocket(addr) | ListenUrl::SecureWebSocket(addr), None) => {
                Self::Tcp(tokio::net::TcpListener::bind(addr).await?)
            }
            (ListenUrl::WebSocket(addr) | ListenUrl::SecureWebSocket(addr), Some(fd)) => {
                Self::Tcp(handover::tcp_listener(fd, *addr)?)
            }
            // A live daemon on the path is refused here, before anything else.
            (ListenUrl::Unix(path), None) => {
                Self::Unix(unix_socket::UnixSocket::bind(path, config)?)
            }
            (ListenUrl::Unix(path), Some(fd)) => Self::Unix(unix_socket::UnixSocket::adopt(
                handover::unix_listener(fd, path)?,
                path,
                config,
            )?),
        }))
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd as _;
        match self {
            Self::Tcp(listener) => listener.as_fd(),
            Self::Unix(socket) => socket.listener.as_fd(),
        }
    }
}

/// Serves on `listen` and, in remote mode, over the socket `remote` dials, until SIGTERM or
/// SIGINT (or, on stdio, the end of input; in remote mode, a refused dial), then kills every
/// managed process before returning; or, after SIGUSR2, hands over to a successor and exits
/// (`handover`).
pub async fn serve(
    listen: Option<ListenUrl>,
    remote: Option<RemoteConfig>,
    config: Config,
    mut handover: Handover,
) -> anyhow::Result<()> {
    // Before any helper exists: every sandbox of this daemon is enforced alike.
    config.sandbox.install();
    let inherited = handover.take_inherited()?;
    let upgrade_requests = handover::requests()?;
    // First: a daemon that cannot have the state dir it was told to use must not bind anything.
    // A successor cannot have it before its predecessor has exited (which holds its lock): it
    // opens it after `take_over`.
    let state_first = match inherited {
        None => Some(open_state_dir(&config)?),
        Some(_) => {
            crate::state_dir::StateDir::check(&config.state_dir)?;
            None
        }
    };
    // Everything else that can fail on a bad configuration comes before a successor says it is
    // ready, so that a failed upgrade leaves the predecessor serving.
    let audit = match &config.audit_log {
        Some(path) => crate::audit::Audit::open(path, config.audit_required)?,
        None => Default::default(),
    };
    let tls = tls_of(listen.as_ref(), &config)?;
    let (inherited, predecessor) = match inherited {
        Some(inherited) => (Some(inherited.listener), Some(inherited.predecessor)),
        None => (None, None),
    };
    let listener = match &listen {
        Some(listen) => Listener::open(listen, inherited, &config).await?,
        None => None,
    };
    let took_over = predecessor.is_some();
    if let Some(predecessor) = predecessor {
        predecessor.take_over().await?;
    }
    // From here on this is the only daemon (a successor's predecessor has exited): what only
    // one daemon may own (the state directory, the processes to adopt) is opened from here on,
    // never above.
    let state = match state_first {
        Some(state) => state,
        None => open_state_dir(&config)?,
    };
    // Bound before the banner, so a harness that read it can scrape at once (a successor's
    // only now: its predecessor held the port).
    let metrics = bind_metrics(&config).await?;
    let daemon = Daemon::new(config, audit, state);
    daemon.sessions.adopt().await?;
    log_hangups();
    if let Some(listener) = metrics {
        spawn_metrics(listener, &daemon)?;
    }
    crate::envd::spawn(&daemon).await?;
    crate::sandboxd::grpc::spawn(&daemon).await?;
    let outcome = serve_clients(
        Serving {
            listener: listener.as_ref(),
            stdio: listen == Some(ListenUrl::Stdio),
            remote,
        },
        tls,
        &daemon,
        took_over,
        &handover,
        upgrade_requests,
    )
    .await;
    drop(listener);
    daemon.sessions.shutdown().await;
    crate::launcher::fs_servers::retire_idle().await;
    // The trees and the fs helpers are gone: no placeholder of a protected name is left in a
    // workspace.
    crate::sandbox::protected::release_placeholders().await;
    daemon.audit.flush(AUDIT_FLUSH_LIMIT).await;
    outcome
}

/// A `wss://` listener's certificate and key, which only it takes.
fn tls_of(listen: Option<&ListenUrl>, config: &Config) -> anyhow::Result<Option<tls::Tls>> {
    Ok(match (listen, &config.tls) {
        (Some(ListenUrl::SecureWebSocket(_)), Some((cert, key))) => Some(tls::Tls::new(cert, key)?),
        (Some(ListenUrl::SecureWebSocket(_)), None) => {
            anyhow::bail!("a wss:// listener needs --tls-cert and --tls-key")
        }
        (_, Some(_)) => anyhow::bail!("--tls-cert and --tls-key are for a wss:// listener"),
        (_, None) => None,
    })
}

/// The `--metrics-listen` listener, if one is set.
async fn bind_metrics(config: &Config) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = config.metrics_listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen for metrics on {addr}: {err}"))?;
    Ok(Some(listener))
}

/// Serves `/metrics` on the `--metrics-listen` `listener`, in a task of its own.
fn spawn_metrics(listener: tokio::net::TcpListener, daemon: &Arc<Daemon>) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    // Before any process can start: no managed network may bridge to it.
    crate::sandbox::peers::note_listener(local);
    tracing::info!("metrics on http://{local}/metrics");
    tokio::spawn(ws::serve_metrics(listener, daemon.clone()));
    Ok(())
}

/// Where the daemon serves: a listener, stdio, remote mode's dialed socket, or a listener (or
/// stdio) and remote mode together.
struct Serving<'a> {
    listener: Option<&'a Listener>,
    stdio: bool,
    remote: Option<RemoteConfig>,
}

/// Serves the clients of `serving` until stdio's input ends, remote mode fails, or a signal to
/// stop (SIGTERM, SIGINT) arrives; after one of `upgrade_requests` and a successor ready, hands
/// over to it and exits instead. `took_over`: a predecessor handed the listener over.
async fn serve_clients(
    serving: Serving<'_>,
    tls: Option<tls::Tls>,
    daemon: &Arc<Daemon>,
    took_over: bool,
    handover: &Handover,
    upgrade_requests: tokio::signal::unix::Signal,
) -> anyhow::Result<()> {
    let connections = ws::Connections::default();
    let start = ws::Start {
        connections: connections.clone(),
        took_over,
    };
    let listener = serving.listener;
    let remote = connections.clone();
    let mut listening = std::pin::pin!(async {
        match listener {
            Some(Listener::Unix(socket)) => ws::serve_unix(socket, daemon.clone(), start).await,
            Some(Listener::Tcp(listener)) => {
                ws::serve_tcp(listener, tls, daemon.clone(), start).await
            }
            None if serving.stdio => stdio::serve(daemon.clone()).await,
            None => std::future::pending().await,
        }
    });
    tokio::select! {
        outcome = &mut listening => outcome,
        outcome = async {
            match serving.remote {
                Some(config) => remote::serve(config, daemon.clone(), remote).await,
                None => std::future::pending().await,
            }
        } => outcome,
        signal = shutdown_signal() => {
            tracing::info!("received {signal}; shutting down");
            // Still listening while the processes are drained: probes and a router read 503
            // (the pod is not ready) rather than a refused connection.
            daemon.stop();
            tokio::select! {
                _ = &mut listening => {}
                () = daemon.sessions.shutdown() => {}
            }
            Ok(())
        }
        successor = handover::successor_on_signal(
            handover,
            upgrade_requests,
            listener.map(Listener::fd),
        ) => {
            handover::hand_over_and_exit(successor, &connections, daemon).await
        }
    }
}

/// The state directory of `config`, hidden from every sandbox and out of reach of every write
/// grant.
fn open_state_dir(config: &Config) -> anyhow::Result<Option<crate::state_dir::StateDir>> {
    let state = crate::state_dir::StateDir::open(&config.state_dir)?;
    if let Some(state) = &state {
        let path = state.path().canonicalize()?;
        warn_if_on_disk(&path);
        crate::sandbox::guard::protect_state_dir(&path);
        let hidden = crate::sandbox::mounts::Hidden::of(path)?;
        crate::sandbox::hide_from_sandboxes(vec![hidden]);
    }
    Ok(state)
}

/// Says so, once at start, when the state dir lies on a disk file system: launches of kept
/// processes create directories and files there until processes done with leave theirs to
/// reuse, and write meta and journals, which ext4 (and the overlay of a container's `/run`)
/// makes slow under concurrency.
fn warn_if_on_disk(path: &std::path::Path) {
    use nix::sys::statfs::{self, FsType};
    /// ramfs's magic number (linux/magic.h), which nix does not name.
    const RAMFS_MAGIC: FsType = FsType(0x8584_58f6);
    let Ok(fs) = statfs::statfs(path) else {
        return;
    };
    let kind = fs.filesystem_type();
    if kind == statfs::TMPFS_MAGIC || kind == RAMFS_MAGIC {
        return;
    }
    let name = match kind {
        statfs::EXT4_SUPER_MAGIC => "ext2/3/4".to_owned(),
        statfs::XFS_SUPER_MAGIC => "xfs".to_owned(),
        statfs::BTRFS_SUPER_MAGIC => "btrfs".to_owned(),
        statfs::OVERLAYFS_SUPER_MAGIC => "overlay".to_owned(),
        statfs::NFS_SUPER_MAGIC => "nfs".to_owned(),
        FsType(magic) => format!("file system type {magic:#x}"),
    };
    tracing::warn!(
        "the state dir {} lies on {name}, not tmpfs: launches create and write files there, \
         which runs 50 concurrent clients' launches at 0.24–0.46× their rate with it on tmpfs, \
         0.43–0.86× once it has served many (issue 43, ext4); give --state-dir a directory on \
         tmpfs (a tmpfs volume in a container, an emptyDir with medium: Memory on Kubernetes; \
         docs/operations.md)",
        path.display()
    );
}

/// SIGHUP reloads what can be reloaded (a TLS listener's certificate, the audit log's file; each
/// listens for it itself) and never ends the daemon, whose default action it would otherwise
/// be: a service manager's "reload" must not stop it.
fn log_hangups() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!(
                "received SIGHUP; reloading the TLS certificate and the audit log, where set"
            );
        }
    });
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_urls_parse_as_the_reference_does() {
        assert_eq!(ListenUrl::parse("stdio").unwrap(), ListenUrl::Stdio);
        assert_eq!(ListenUrl::parse("stdio://").unwrap(), ListenUrl::Stdio);
        assert!(matches!(
            ListenUrl::parse("ws://127.0.0.1:0").unwrap(),
            ListenUrl::WebSocket(_)
        ));
        assert_eq!(
            ListenUrl::parse("ws://localhost:1234")
                .unwrap_err()
                .to_string(),
            "invalid websocket --listen URL `ws://localhost:1234`; expected `ws://IP:PORT`"
        );
        assert_eq!(
            ListenUrl::parse("http://127.0.0.1:1")
                .unwrap_err()
                .to_string(),
            "unsupported --listen URL `http://127.0.0.1:1`; expected `ws://IP:PORT`, `wss://IP:PORT`, `unix:///PATH` or `stdio`"
        );
        assert_eq!(
            ListenUrl::parse("unix:///run/exec/exec.sock").unwrap(),
            ListenUrl::Unix("/run/exec/exec.sock".into())
        );
        assert!(ListenUrl::parse("unix://relative.sock").is_err());
    }
}
