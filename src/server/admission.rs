//! Who may hold a connection in its HTTP phase (nothing authenticated yet), and for how long:
//! a cap for the listener, a lower one per peer so that one peer cannot take every place, and a
//! shorter deadline once the places run short, so that stalled peers make room sooner. The
//! WebSocket listeners (`transport`) and the envd listeners (`envd`) admit alike, and accept
//! alike: a TCP connection made inside a sandbox is closed before a byte of it is read.

use crate::config::Config;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

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
    pending: Arc<Mutex<Pending>>,
    max: usize,
    max_per_peer: usize,
    timeout: Duration,
}

/// The places held, by their number: numbers grow, so the first is the oldest.
#[derive(Default)]
struct Pending {
    next: u64,
    /// Each place's peer, and the sender whose drop tells its holder it was evicted.
    places: BTreeMap<u64, (Peer, oneshot::Sender<()>)>,
    /// Each peer's places, oldest first; a peer holding none has no entry.
    per_peer: HashMap<Peer, BTreeSet<u64>>,
}

impl Pending {
    /// Frees place `number` (nothing if it is already free); an evicted holder learns it.
    fn free(&mut self, number: u64) {
        let Some((peer, _evict)) = self.places.remove(&number) else {
            return;
        };
        if let Some(held) = self.per_peer.get_mut(&peer) {
            held.remove(&number);
            if held.is_empty() {
                self.per_peer.remove(&peer);
            }
        }
    }
}

/// A connection's place, given back when dropped.
pub(crate) struct Place {
    number: u64,
    pending: Arc<Mutex<Pending>>,
    evicted: oneshot::Receiver<()>,
    /// How long the connection may stay in its HTTP phase.
    pub timeout: Duration,
}

impl Place {
    /// Resolves when a newer connection took this place: its connection must close then.
    pub(crate) async fn evicted(&mut self) {
        // The sender is dropped only when the place is taken back.
        let _ = (&mut self.evicted).await;
    }
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
    /// Places that, at a cap, evict the oldest connection there (the peer's own at its cap, the
    /// listener's at the listener's) for the newcomer: whoever holds a place must then close
    /// its connection when [`Place::evicted`] resolves.
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            pending: Default::default(),
            max: config.max_pending_connections,
            max_per_peer: config.max_pending_connections_per_peer,
            timeout: config.upgrade_timeout,
        }
    }

    /// A place for a new connection from `peer`, if there is one.
    pub(crate) fn admit(&self, peer: Peer) -> Result<Place, Full> {
        let mut pending = self.pending.lock().unwrap();
        let of_peer = pending.per_peer.get(&peer);
        let full = if of_peer.is_some_and(|held| held.len() >= self.max_per_peer) {
            Some((Full::Peer, of_peer.and_then(|held| held.first().copied())))
        } else if pending.places.len() >= self.max {
            Some((Full::Listener, pending.places.keys().next().copied()))
        } else {
            None
        };
        if let Some((full, oldest)) = full {
            match oldest {
                // A slow or stalled connection yields to a new one, as a load balancer does.
                Some(oldest) => {
                    tracing::debug!(?peer, "{full}: the oldest pending connection makes room");
                    pending.free(oldest);
                }
                _ => return Err(full),
            }
        }
        let number = pending.next;
        pending.next += 1;
        let (evict, evicted) = oneshot::channel();
        pending.places.insert(number, (peer, evict));
        pending.per_peer.entry(peer).or_default().insert(number);
        // Under pressure: more than half of the places taken.
        let pressed = pending.places.len() > self.max - self.max / 2;
        Ok(Place {
            number,
            pending: self.pending.clone(),
            evicted,
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
        self.pending.lock().unwrap().free(self.number);
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
        Admission::new(&config(max, max_per_peer))
    }

    fn config(max: usize, max_per_peer: usize) -> Config {
        use clap::Parser as _;
        let mut config = crate::Cli::parse_from(["exec-server"])
            .serve
            .config()
            .unwrap();
        config.max_pending_connections = max;
        config.max_pending_connections_per_peer = max_per_peer;
        config.upgrade_timeout = Duration::from_secs(8);
        config
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
        // At its cap the peer's oldest yields; the count stays at its share.
        let _evicting = admission.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(
            admission.pending.lock().unwrap().per_peer[&ip("10.0.0.1")].len(),
            2
        );
        let second = admission.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(second.timeout, Duration::from_secs(8));
        let third = admission.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(third.timeout, Duration::from_secs(2), "under pressure");
        drop(first);
        assert!(admission.admit(ip("10.0.0.1")).is_ok());
        assert!(
            admission.pending.lock().unwrap().per_peer.len() <= 2,
            "no empty entries kept"
        );
    }

    #[tokio::test]
    async fn at_a_cap_the_oldest_place_there_is_evicted() {
        let admission = admission(4, 2);
        let mut first = admission.admit(ip("10.0.0.1")).unwrap();
        let mut second = admission.admit(ip("10.0.0.1")).unwrap();
        // The peer's cap: its own oldest goes, not another's.
        let _third = admission.admit(ip("10.0.0.1")).unwrap();
        first.evicted().await;
        let mut other = admission.admit(ip("10.0.0.2")).unwrap();
        let _fourth = admission.admit(ip("10.0.0.2")).unwrap();
        // The listener's cap: the oldest of all.
        let _fifth = admission.admit(ip("10.0.0.3")).unwrap();
        second.evicted().await;
        assert!(futures::poll!(std::pin::pin!(other.evicted())).is_pending());
        drop(first);
        assert_eq!(admission.pending.lock().unwrap().places.len(), 4);
    }

    #[test]
    fn ipv6_peers_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8:1:2:aaaa::1"), ip("2001:db8:1:2:bbbb::2"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:10.0.0.1"), ip("10.0.0.1"));
    }
}
