//! Who may hold a connection in its HTTP phase (nothing authenticated yet), and for how long:
//! a cap for the listener, a lower one per peer so that one peer cannot take every place, and a
//! shorter deadline once the places run short, so that stalled peers make room sooner. The
//! WebSocket listeners (`transport`) and the envd listeners (`envd`) admit alike, and accept
//! alike: a TCP connection made inside a sandbox is closed before a byte of it is read.

use crate::config::Config;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What a connection counts against: its source address (an IPv6 one by its /64, which one
/// host typically holds whole), or its uid on a Unix socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    Ip(IpAddr),
    Uid(u32),
}

impl Peer {
    pub(crate) fn of_ip(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Self::Ip(IpAddr::V6(prefix.into()))
            }
            v4 => Self::Ip(v4),
        }
    }
}

/// The places of one listener.
pub(crate) struct Admission {
    places: Arc<Semaphore>,
    per_peer: Arc<Mutex<HashMap<Peer, usize>>>,
    max: usize,
    max_per_peer: usize,
    timeout: Duration,
}

/// A connection's place, given back when dropped.
pub(crate) struct Place {
    _place: OwnedSemaphorePermit,
    peer: Peer,
    per_peer: Arc<Mutex<HashMap<Peer, usize>>>,
    /// How long the connection may stay in its HTTP phase.
    pub timeout: Duration,
}

/// Why a connection got no place.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Full {
    #[error("too many connections in their HTTP phase")]
    Listener,
    #[error("too many connections in their HTTP phase from this peer")]
    Peer,
}

impl Admission {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            places: Arc::new(Semaphore::new(config.max_pending_connections)),
            per_peer: Default::default(),
            max: config.max_pending_connections,
            max_per_peer: config.max_pending_connections_per_peer,
            timeout: config.upgrade_timeout,
        }
    }

    /// A place for a new connection from `peer`, if there is one.
    pub(crate) fn admit(&self, peer: Peer) -> Result<Place, Full> {
        let place = self
            .places
            .clone()
            .try_acquire_owned()
            .map_err(|_| Full::Listener)?;
        {
            let mut per_peer = self.per_peer.lock().unwrap();
            let held = per_peer.entry(peer).or_default();
            if *held >= self.max_per_peer {
                return Err(Full::Peer);
            }
            *held += 1;
        }
        // Under pressure: more than half of the places taken.
        let pressed = self.places.available_permits() < self.max / 2;
        Ok(Place {
            _place: place,
            peer,
            per_peer: self.per_peer.clone(),
            timeout: if pressed {
                self.timeout / 4
            } else {
                self.timeout
            },
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut per_peer = self.per_peer.lock().unwrap();
        if let Some(held) = per_peer.get_mut(&self.peer) {
            *held -= 1;
            if *held == 0 {
                per_peer.remove(&self.peer);
            }
        }
    }
}

/// Pause after a failed accept (e.g. out of descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The next connection on `listener` not made inside a sandbox, refused (closed) before a byte
/// of it is read otherwise.
pub(crate) async fn accept_tcp(
    listener: &tokio::net::TcpListener,
) -> (tokio::net::TcpStream, std::net::SocketAddr) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                retry_accept(err).await;
                continue;
            }
        };
        // One netlink round trip, cheaper than a hop to a blocking thread.
        let from_sandbox = stream
            .local_addr()
            .map_or(true, |local| crate::sandbox::peers::refuse(local, peer));
        if from_sandbox {
            tracing::warn!(
                "refused a connection from {peer}: made inside a sandbox, or gone before it could \
                 be checked"
            );
            continue;
        }
        // Without TCP_NODELAY a small reply waits for the client's delayed ACK (~40 ms).
        let _ = stream.set_nodelay(true);
        return (stream, peer);
    }
}

/// After a failed accept (e.g. EMFILE), a pause: retrying at once would spin while nothing
/// is freed.
pub(crate) async fn retry_accept(err: std::io::Error) {
    tracing::warn!("accepting a connection failed: {err}");
    tokio::time::sleep(ACCEPT_RETRY).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(max: usize, max_per_peer: usize) -> Admission {
        use clap::Parser as _;
        let mut config = crate::Cli::parse_from(["exec-server"])
            .serve
            .config()
            .unwrap();
        config.max_pending_connections = max;
        config.max_pending_connections_per_peer = max_per_peer;
        config.upgrade_timeout = Duration::from_secs(8);
        Admission::new(&config)
    }

    fn ip(text: &str) -> Peer {
        Peer::of_ip(text.parse().unwrap())
    }

    #[test]
    fn a_peer_gets_its_share_and_others_the_rest() {
        let admission = admission(6, 2);
        let first: Vec<Place> = (0..2)
            .map(|_| admission.admit(ip("10.0.0.1")).unwrap())
            .collect();
        assert!(matches!(admission.admit(ip("10.0.0.1")), Err(Full::Peer)));
        // The refused attempt held nothing.
        let second = admission.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(second.timeout, Duration::from_secs(8));
        let third = admission.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(third.timeout, Duration::from_secs(2), "under pressure");
        drop(first);
        assert!(admission.admit(ip("10.0.0.1")).is_ok());
        assert!(
            admission.per_peer.lock().unwrap().len() <= 2,
            "no empty entries kept"
        );
    }

    #[test]
    fn ipv6_peers_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8:1:2:aaaa::1"), ip("2001:db8:1:2:bbbb::2"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:10.0.0.1"), ip("10.0.0.1"));
    }
}
