//! Transparent TCP (`transparentTcp`): every TCP connection the command makes reaches the
//! proxy, whether or not the program honours the proxy variables. The sandbox helper routes the
//! namespace's traffic to a TUN device (`crate::child::bridge`) whose only descriptor the
//! daemon holds; a userspace TCP stack on it (smoltcp, through netstack-smoltcp) ends each
//! connection here with the address the command dialled, which the policy decides as a SOCKS5
//! CONNECT to that address (codex's tun2socks audits it so: `socks5_tcp`). UDP and other
//! protocols go nowhere. Every buffer on the way is bounded: the stack's per-connection windows
//! and its packet queues, so a program that sends faster than its destination reads is slowed
//! by TCP, as on a real network, and the daemon holds at most a window per connection.

use super::{connect, Proxy, Request};
use crate::sandbox::plan::{TUN_DEVICE, TUN_MTU};
use exec_server_protocol::network::NetworkProtocol;
use futures::{SinkExt as _, StreamExt as _};
use netstack_smoltcp::{StackBuilder, TcpStream};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Each connection's receive and send window in the stack, in bytes: what the daemon may hold
/// for one connection in each direction.
const WINDOW: u32 = 64 * 1024;

/// Packets queued between the device and the stack, each way.
const QUEUED_PACKETS: usize = 256;

/// How long a refused connection's close waits for its handshake to finish.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// How often, and how many times, a refused connection's close is asked of the stack.
const CLOSE_RETRY: std::time::Duration = std::time::Duration::from_millis(20);
const CLOSE_ATTEMPTS: usize = 100;

/// Whether this host can make the TUN device (its `/dev/net/tun`, which the helper opens),
/// checked once.
pub(crate) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        use std::os::unix::fs::FileTypeExt as _;
        std::fs::metadata(TUN_DEVICE).is_ok_and(|meta| meta.file_type().is_char_device())
    })
}

/// Serves the connections routed to `device` (non-blocking), each holding one of `permits`
/// (a connection past them is closed at once), until the device or the task ends.
pub(crate) async fn serve(proxy: Arc<Proxy>, device: OwnedFd, permits: Arc<Semaphore>) {
    if let Err(err) = run(proxy, device, permits).await {
        tracing::debug!("transparent TCP ended: {err}");
    }
}

async fn run(proxy: Arc<Proxy>, device: OwnedFd, permits: Arc<Semaphore>) -> io::Result<()> {
    // SAFETY: an OwnedFd stays open, the same descriptor, for as long as the AsyncFd owns it.
    let device = unsafe { AsyncFd::register(device) }.map_err(io::Error::from)?;
    let (stack, runner, _, listener) = StackBuilder::default()
        .enable_tcp(true)
        .mtu(TUN_MTU.into())
        .stack_buffer_size(QUEUED_PACKETS)
        .tcp_buffer_size(QUEUED_PACKETS)
        .tcp_recv_buffer_size(WINDOW)
        .tcp_send_buffer_size(WINDOW)
        .build()?;
    let (Some(runner), Some(mut listener)) = (runner, listener) else {
        return Err(io::Error::other("the stack has no TCP"));
    };
    let (mut to_stack, mut from_stack) = stack.split();
    let inbound = async {
        let mut packet = vec![0; usize::from(TUN_MTU)];
        loop {
            let read = read_packet(&device, &mut packet).await?;
            to_stack.send(packet[..read].to_vec()).await?;
        }
    };
    let outbound = async {
        while let Some(packet) = from_stack.next().await {
            write_packet(&device, &packet?).await?;
        }
        Ok::<_, io::Error>(())
    };
    let accepting = async {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                Some((mut stream, program, dialled)) = listener.next() => {
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) => drop(connections.spawn(
                            proxy.clone().carry(stream, program, dialled, permit),
                        )),
                        Err(_) => {
                            tracing::debug!("too many transparent connections; closing one");
                            drop(connections.spawn(async move { close(&mut stream).await }));
                        }
                    }
                }
                Some(_) = connections.join_next() => {}
                else => return Ok::<_, io::Error>(()),
            }
        }
    };
    tokio::select! {
        ended = runner => ended,
        ended = inbound => ended,
        ended = outbound => ended,
        ended = accepting => ended,
    }
}

/// One packet from the device into `buffer`: its length.
async fn read_packet(device: &AsyncFd<OwnedFd>, buffer: &mut [u8]) -> io::Result<usize> {
    loop {
        let mut guard = device.readable().await?;
        match guard.try_io(|fd| Ok(nix::unistd::read(fd.get_ref(), buffer)?)) {
            Ok(read) => return read,
            Err(_would_block) => continue,
        }
    }
}

/// One packet to the device.
async fn write_packet(device: &AsyncFd<OwnedFd>, packet: &[u8]) -> io::Result<()> {
    loop {
        let mut guard = device.writable().await?;
        match guard.try_io(|fd| Ok(nix::unistd::write(fd.get_ref(), packet)?)) {
            Ok(written) => return written.map(drop),
            Err(_would_block) => continue,
        }
    }
}

impl Proxy {
    /// One transparent connection from `program` to `dialled`: decided as a SOCKS5 CONNECT to
    /// where it was dialled, then relayed; a refused one (or one whose destination does not
    /// answer) is closed.
    async fn carry(
        self: Arc<Self>,
        mut stream: TcpStream,
        program: std::net::SocketAddr,
        dialled: std::net::SocketAddr,
        _permit: OwnedSemaphorePermit,
    ) {
        let host = dialled.ip().to_string();
        let asked = Request::new(
            NetworkProtocol::Socks5Tcp,
            &host,
            dialled.port(),
            None,
            program,
        );
        let upstream = match self.decide(&asked).await {
            Ok(addresses) => connect(&addresses).await.ok(),
            Err(_) => None,
        };
        match upstream {
            Some(mut upstream) => {
                let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
            }
            // Closed, so that the program does not wait on a connection nobody serves.
            None => close(&mut stream).await,
        }
    }
}

/// Sends the program a FIN. The stack hands a connection out at its SYN, and a close that
/// reaches it before the handshake is done is lost: first the handshake is let finish (the
/// program's first bytes, or [`SETTLE`]), then the close is asked until the stack takes it.
async fn close(stream: &mut TcpStream) {
    let _ = tokio::time::timeout(SETTLE, stream.read(&mut [0; 1])).await;
    for _ in 0..CLOSE_ATTEMPTS {
        if tokio::time::timeout(CLOSE_RETRY, stream.shutdown())
            .await
            .is_ok()
        {
            return;
        }
    }
}
