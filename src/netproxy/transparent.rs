//! Transparent TCP (`transparentTcp`): every TCP connection the command makes reaches the
//! proxy, whether or not the program honours the proxy variables. The sandbox helper routes the
//! namespace's traffic to a TUN device (`crate::child::bridge`) whose only descriptor the
//! daemon holds; a userspace TCP stack on it (ipstack) ends each connection here with the
//! address the command dialled, which the policy decides as a SOCKS5 CONNECT to that address
//! (codex's tun2socks audits it so: `socks5_tcp`). UDP and other protocols go nowhere.

use super::{connect, Proxy, Request};
use crate::sandbox::plan::TUN_MTU;
use exec_server_protocol::network::NetworkProtocol;
use ipstack::{IpStack, IpStackConfig, IpStackStream, IpStackTcpStream};
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How often, and how many times, a refused connection's close is asked of the stack.
const CLOSE_RETRY: std::time::Duration = std::time::Duration::from_millis(20);
const CLOSE_ATTEMPTS: usize = 100;

/// Whether this host can make the TUN device (its `/dev/net/tun`, which the helper opens),
/// checked once.
pub(crate) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        use std::os::unix::fs::FileTypeExt as _;
        std::fs::metadata("/dev/net/tun").is_ok_and(|meta| meta.file_type().is_char_device())
    })
}

/// Serves the connections routed to `device` (non-blocking), each holding one of `permits`
/// (a connection past them is dropped at once), until the device or the task ends.
pub(crate) async fn serve(proxy: Arc<Proxy>, device: OwnedFd, permits: Arc<Semaphore>) {
    // SAFETY: an OwnedFd stays open, the same descriptor, for as long as the AsyncFd owns it.
    let device = match unsafe { AsyncFd::register(device) } {
        Ok(device) => Tun(device),
        Err(err) => return tracing::warn!("transparent TCP: the TUN device: {err}"),
    };
    let mut config = IpStackConfig::default();
    config.mtu_unchecked(TUN_MTU);
    let mut stack = IpStack::new(config, device);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = stack.accept() => match accepted {
                Ok(IpStackStream::Tcp(stream)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => drop(connections.spawn(proxy.clone().carry(stream, permit))),
                    Err(_) => tracing::debug!("too many transparent connections; closing one"),
                },
                // UDP, ICMP and the rest: the sandbox has no way out for them.
                Ok(_) => {}
                Err(_) => return,
            },
            Some(_) = connections.join_next() => {}
        }
    }
}

impl Proxy {
    /// One transparent connection: decided as a SOCKS5 CONNECT to where it was dialled, then
    /// relayed; a refused one (or one whose destination does not answer) is closed.
    async fn carry(self: Arc<Self>, mut stream: IpStackTcpStream, _permit: OwnedSemaphorePermit) {
        let destination = stream.peer_addr();
        let host = destination.ip().to_string();
        let client = stream.local_addr();
        let asked = Request::new(
            NetworkProtocol::Socks5Tcp,
            &host,
            destination.port(),
            None,
            client,
        );
        let upstream = match self.decide(&asked).await {
            Ok(addresses) => connect(&addresses).await.ok(),
            Err(_) => None,
        };
        match upstream {
            Some(upstream) => relay(stream, upstream).await,
            // Refused, or the destination does not answer: closed, so that the program does not
            // wait on it (codex's stack resets it; this one has no reset to send, so a FIN).
            None => close(&mut stream).await,
        }
    }
}

/// Both directions, each closed when its source ends (half-close, as `copy_bidirectional`,
/// whose shutdown of the stack's side this replaces with [`close`]).
async fn relay(stream: IpStackTcpStream, mut upstream: tokio::net::TcpStream) {
    let (mut from_program, mut to_program) = tokio::io::split(stream);
    let (mut from_upstream, mut to_upstream) = upstream.split();
    let outbound = async {
        let _ = tokio::io::copy(&mut from_program, &mut to_upstream).await;
        let _ = to_upstream.shutdown().await;
    };
    let inbound = async {
        let _ = tokio::io::copy(&mut from_upstream, &mut to_program).await;
        close(&mut to_program).await;
    };
    tokio::join!(outbound, inbound);
}

/// Sends the program a FIN. The stack sends it only once the handshake is done and what it sent
/// is acknowledged, and does not always wake a shutdown that had to wait: it is asked again.
async fn close(stream: &mut (impl AsyncWrite + Unpin)) {
    for _ in 0..CLOSE_ATTEMPTS {
        if tokio::time::timeout(CLOSE_RETRY, stream.shutdown())
            .await
            .is_ok()
        {
            return;
        }
    }
}

/// The TUN device as the stack reads and writes it: one packet per read or write.
struct Tun(AsyncFd<OwnedFd>);

impl AsyncRead for Tun {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| Ok(nix::unistd::read(fd.get_ref(), unfilled)?)) {
                Ok(Ok(read)) => {
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Tun {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        packet: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|fd| Ok(nix::unistd::write(fd.get_ref(), packet)?)) {
                Ok(written) => return Poll::Ready(written),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
