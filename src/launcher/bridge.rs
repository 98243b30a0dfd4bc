//! Managed network: the sandbox reaches the host's loopback proxy ports, and nothing else.
//!
//! A managed launch runs in a helper with its own empty network namespace, as a restricted one
//! does. Once it has the plan, the helper brings that namespace's `lo` up, listens on
//! 127.0.0.1 at each listed port there (`crate::child::bridge::open`), and passes the listeners to the daemon on
//! its control socket before it goes on with the launch. A socket keeps the namespace it was
//! made in, so the daemon, on the host's network, accepts the program's connections on them
//! and relays each to the host's 127.0.0.1 at the same port ([`Bridge`]); the daemon holds the
//! only copies, and dropping the bridge (when the process has exited) closes the listeners and
//! every relayed connection. Inside, any other port of 127.0.0.1 is refused (nothing listens),
//! any other address is unreachable (no route), and seccomp and Landlock refuse the rest (see
//! `seccomp::tcp_only`, `landlock::restrict`). With the process's own proxy, its ports'
//! connections go to it instead; for transparent TCP the helper also sends a TUN device, the
//! namespace's default route, whose connections the proxy serves too
//! (`crate::netproxy::transparent`).

use crate::ipc::channel;
use crate::ipc::message::Answer;
use crate::netproxy::Proxy;
use crate::sandbox::plan::{ManagedPlan, MAX_PORTS};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// Relayed connections open at once per launch; more are closed when accepted.
const MAX_CONNECTIONS: usize = 64;

/// How long a relay waits for the host's port to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an accept loop pauses after a failed accept (e.g. EMFILE) instead of spinning.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// In the daemon: the first message on a managed helper's control socket. With the listeners
/// (after the marker): them and the bytes that followed. A helper that failed before it could
/// send them writes its failure report instead: no listeners, and the report's first bytes.
pub(crate) async fn receive(
    control: &tokio::net::UnixStream,
) -> io::Result<(Vec<OwnedFd>, Vec<u8>)> {
    let mut data = [0u8; 512];
    // The listeners, and a TUN device.
    let channel::Received { fds, bytes, .. } =
        channel::recv_fds_async(control, &mut data, MAX_PORTS + 1).await?;
    Ok(match Answer::after_listeners(&data[..bytes]) {
        Ok(rest) => (fds, rest.to_vec()),
        Err(failure) => (Vec::new(), failure.to_vec()),
    })
}

/// The relays of one launch. Dropping it closes the listeners and every relayed connection.
#[derive(Debug)]
pub(crate) struct Bridge {
    _tasks: tokio::task::JoinSet<()>,
}

/// Why the listeners a helper sent cannot be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BridgeError {
    #[error("{0}")]
    Listener(#[from] io::Error),
    #[error("the sandbox helper sent a listener on {0}")]
    NotLoopback(SocketAddr),
    #[error("the sandbox helper sent a listener on port {0}, which was not asked for")]
    UnaskedPort(u16),
    #[error("the sandbox helper did not send a listener for every port")]
    MissingPort,
    #[error("transparent TCP was asked of a launch without its own proxy")]
    TransparentWithoutProxy,
    #[error("the sandbox helper did not send the TUN device for transparent TCP")]
    MissingTun,
}

impl Bridge {
    /// Serves `listeners`, which must be TCP listeners on 127.0.0.1 at exactly `managed`'s
    /// ports, then its TUN device when it asks for transparent TCP: with `proxy`, its ports'
    /// connections (and the device's) go to it instead of the host.
    pub(crate) fn start(
        mut listeners: Vec<OwnedFd>,
        managed: &ManagedPlan,
        proxy: Option<Arc<Proxy>>,
    ) -> Result<Self, BridgeError> {
        let mut tasks = tokio::task::JoinSet::new();
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        if managed.transparent_tcp {
            let proxy = proxy.clone().ok_or(BridgeError::TransparentWithoutProxy)?;
            let device = listeners.pop().ok_or(BridgeError::MissingTun)?;
            let kind = nix::sys::stat::fstat(&device)
                .map_err(io::Error::from)?
                .st_mode;
            if kind & libc::S_IFMT != libc::S_IFCHR {
                return Err(BridgeError::MissingTun);
            }
            tasks.spawn(crate::netproxy::transparent::serve(
                proxy,
                device,
                permits.clone(),
            ));
        }
        let ports = &managed.ports[..];
        let mut seen = Vec::new();
        for fd in listeners {
            let listener = std::net::TcpListener::from(fd);
            let port = match listener.local_addr()? {
                SocketAddr::V4(addr) if *addr.ip() == Ipv4Addr::LOCALHOST => addr.port(),
                other => return Err(BridgeError::NotLoopback(other)),
            };
            if !ports.contains(&port) || seen.contains(&port) {
                return Err(BridgeError::UnaskedPort(port));
            }
            seen.push(port);
            listener.set_nonblocking(true)?;
            let listener = tokio::net::TcpListener::from_std(listener)?;
            let target = match &proxy {
                Some(proxy) if proxy.ports().contains(&port) => Target::Proxy(proxy.clone()),
                _ => Target::Host,
            };
            tasks.spawn(serve(listener, port, target, permits.clone()));
        }
        if seen.len() != ports.len() {
            return Err(BridgeError::MissingPort);
        }
        Ok(Self { _tasks: tasks })
    }
}

/// Where a port's connections go.
#[derive(Clone)]
enum Target {
    /// The host's 127.0.0.1 at the same port (the client's proxy).
    Host,
    /// The process's own managed proxy, served here.
    Proxy(Arc<Proxy>),
}

/// Accepts the sandbox's connections to `port` and relays each to its target. Its relays are
/// its own tasks, so aborting it ends them too.
async fn serve(
    listener: tokio::net::TcpListener,
    port: u16,
    target: Target,
    permits: Arc<tokio::sync::Semaphore>,
) {
    let mut relays = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((inner, _)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let target = target.clone();
                        relays.spawn(async move {
                            match target {
                                Target::Host => relay(inner, port).await,
                                Target::Proxy(proxy) => proxy.serve(inner, port).await,
                            }
                            drop(permit);
                        });
                    }
                    Err(_) => tracing::debug!(port, "too many relayed connections; closing one"),
                },
                Err(err) => {
                    tracing::warn!(port, "accepting a managed-network connection: {err}");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
            Some(_) = relays.join_next() => {}
        }
    }
}

async fn relay(mut inner: tokio::net::TcpStream, port: u16) {
    let connect = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port));
    let mut outer = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(outer)) => outer,
        // The sandbox sees its connection closed, as if the proxy had closed it.
        Ok(Err(err)) => return tracing::debug!(port, "relaying to the host: {err}"),
        Err(_) => return tracing::debug!(port, "relaying to the host: timed out"),
    };
    let _ = inner.set_nodelay(true);
    let _ = outer.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut inner, &mut outer).await;
}
