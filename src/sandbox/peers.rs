//! Keeps sandboxed processes off the daemon's own TCP listener.
//!
//! A sandbox with network enabled shares the host's network namespace, so it can open a
//! connection to the daemon's `ws://` address and start unsandboxed processes. Landlock's
//! `ConnectTcp` rules are per-port allow-lists: excluding one port takes 65 534 rules, and
//! every launch's own (file-system) domain copies all rules of the domain it nests in, which
//! measured 16–30 ms per launch here. So the daemon recognises the peer instead: every helper
//! with network enabled is moved into a cgroup (v2, `exec-server-sandboxes` below the daemon's
//! own, so resource accounting stays the daemon's) before it is handed out. A socket records
//! the v2 cgroup of the process that created it, and the kernel reports it through sock_diag
//! (`INET_DIAG_CGROUP_ID`), so on every accepted connection the daemon looks up the peer's
//! socket and drops the connection, before reading a byte, when it was made in that cgroup.
//! A sandboxed process can neither leave the cgroup (cgroupfs is read-only in its view and
//! outside its Landlock grants, and it has no capabilities) nor create a socket elsewhere. A
//! local peer whose socket cannot be found (it closed already, or what was found is a
//! listener or a TIME_WAIT entry) is refused as well: a sandbox could otherwise send its
//! requests and close before the check.

use super::sock_diag::{self, SOCK_DIAG_BY_FAMILY, TCP_LISTEN};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The cgroup every network-enabled sandbox runs in.
pub(crate) struct SandboxCgroup {
    procs: PathBuf,
    /// The cgroup's id, as sock_diag reports it: its inode number in cgroupfs.
    id: u64,
}

impl SandboxCgroup {
    /// Moves process `pid` (and what it starts later) into the cgroup.
    pub(crate) fn admit(&self, pid: u32) -> io::Result<()> {
        std::fs::write(&self.procs, pid.to_string())
    }
}

/// Why there is no sandbox cgroup.
#[derive(Debug, thiserror::Error)]
#[error(
    "a sandbox with network enabled must run in a cgroup of its own, so that the daemon can \
     refuse its connections, and none could be made: {source}"
)]
pub(crate) struct CgroupError {
    pub source: io::Error,
}

/// The sandbox cgroup, made on first use; Err says why there is none (then no sandbox with
/// network enabled may run).
pub(crate) fn cgroup() -> &'static Result<SandboxCgroup, CgroupError> {
    static CGROUP: OnceLock<Result<SandboxCgroup, CgroupError>> = OnceLock::new();
    CGROUP.get_or_init(|| create().map_err(|source| CgroupError { source }))
}

fn create() -> io::Result<SandboxCgroup> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    // Fields: id parent dev root mount-point options... - fstype source super-options.
    let mount = mountinfo
        .lines()
        .find(|line| {
            line.split(" - ")
                .nth(1)
                .is_some_and(|s| s.starts_with("cgroup2 "))
        })
        .and_then(|line| line.split(' ').nth(4))
        .ok_or_else(|| io::Error::other("no cgroup2 file system is mounted"))?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")?;
    let own = cgroups
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("the daemon has no cgroup2 membership"))?;
    let dir = PathBuf::from(mount)
        .join(own.trim_start_matches('/'))
        .join("exec-server-sandboxes");
    match std::fs::create_dir(&dir) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(
                err.kind(),
                format!("creating `{}`: {err}", dir.display()),
            ))
        }
        _ => {}
    }
    Ok(SandboxCgroup {
        id: std::fs::metadata(&dir)?.ino(),
        procs: dir.join("cgroup.procs"),
    })
}

/// Ports at which the daemon's own listeners answer on 127.0.0.1.
static OWN_PORTS: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// Records a listener of the daemon. A managed network must not be bridged to it: the
/// bridge's connections are the daemon's own, which [`refuse`] lets through.
pub(crate) fn note_listener(local: SocketAddr) {
    if local.ip().is_loopback() || local.ip().is_unspecified() {
        OWN_PORTS.lock().unwrap().push(local.port());
    }
}

/// Whether 127.0.0.1:`port` is one of the daemon's own listeners.
pub(crate) fn is_own_port(port: u16) -> bool {
    OWN_PORTS.lock().unwrap().contains(&port)
}

/// Whether a connection the daemon accepted on `local` from `peer` must be dropped: its peer
/// socket was made in the sandbox cgroup, or it is local and its socket is gone.
pub(crate) fn refuse(local: SocketAddr, peer: SocketAddr) -> bool {
    let Ok(cgroup) = cgroup() else {
        // No cgroup: no sandbox with network enabled runs, and the others have no route here.
        return false;
    };
    match peer_socket_cgroup(local, peer) {
        Ok(Some(id)) => id == cgroup.id,
        Ok(None) | Err(_) => is_local(peer.ip()),
    }
}

/// Whether `ip` is an address of this host: only then can it be bound.
fn is_local(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

const INET_DIAG_CGROUP_ID: u16 = 21;
const TCP_TIME_WAIT: u8 = 6;
/// `nlmsghdr` + `inet_diag_req_v2`.
const REQUEST_BYTES: usize = 16 + 56;
/// Where `inet_diag_msg`'s attributes start: `nlmsghdr` + the message.
const ATTRIBUTES_AT: usize = 16 + 72;

/// The cgroup id recorded on the connecting socket of the TCP connection `peer` → `local`,
/// None when there is no such live connected socket in this network namespace.
fn peer_socket_cgroup(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u64>> {
    let mut found = None;
    sock_diag::query(&request(local, peer), |reply| found = cgroup_of(reply))?;
    Ok(found)
}

/// An exact sock_diag lookup of the socket whose own end is `peer` and remote end `local`.
fn request(local: SocketAddr, peer: SocketAddr) -> Vec<u8> {
    let (family, src, dst) = match (peer.ip(), local.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let pad = |ip: std::net::Ipv4Addr| {
                let mut bytes = [0u8; 16];
                bytes[..4].copy_from_slice(&ip.octets());
                bytes
            };
            (libc::AF_INET, pad(src), pad(dst))
        }
        // Mapped IPv4 addresses are looked up among IPv4 sockets by the kernel itself.
        (src, dst) => (libc::AF_INET6, v6(src), v6(dst)),
    };
    let mut message = sock_diag::header(REQUEST_BYTES, false);
    message.extend([family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    message.extend(u32::MAX.to_ne_bytes()); // every state
    message.extend(peer.port().to_be_bytes());
    message.extend(local.port().to_be_bytes());
    message.extend(src);
    message.extend(dst);
    message.extend([0u8; 4]); // any interface
    message.extend([0xffu8; 8]); // INET_DIAG_NOCOOKIE
    message
}

fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
        IpAddr::V6(ip) => ip.octets(),
    }
}

/// The `INET_DIAG_CGROUP_ID` of a sock_diag reply that found a connected socket.
fn cgroup_of(reply: &[u8]) -> Option<u64> {
    let kind = u16::from_ne_bytes(reply.get(4..6)?.try_into().ok()?);
    let state = *reply.get(17)?;
    if kind != SOCK_DIAG_BY_FAMILY || state == TCP_LISTEN || state == TCP_TIME_WAIT {
        return None;
    }
    let total = (u32::from_ne_bytes(reply.get(..4)?.try_into().ok()?) as usize).min(reply.len());
    let mut at = ATTRIBUTES_AT;
    while at + 4 <= total {
        let len = u16::from_ne_bytes(reply[at..at + 2].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(reply[at + 2..at + 4].try_into().ok()?);
        if len < 4 {
            return None;
        }
        if kind == INET_DIAG_CGROUP_ID {
            return Some(u64::from_ne_bytes(
                reply.get(at + 4..at + 12)?.try_into().ok()?,
            ));
        }
        at += (len + 3) & !3;
    }
    None
}

/// Whether process `pid` runs inside a sandbox: below a sandbox helper, which every sandboxed
/// launch runs under (whatever it forks stays below it, its subreaper), and which is known by
/// its command name (`super::plan::HELPER_NAME`): a process can change only its own, and a
/// helper sets it before its program exists. A process that is gone counts as sandboxed:
/// nothing is known of it.
pub(crate) fn runs_in_sandbox(pid: i32) -> bool {
    let mut current = pid;
    // Bounded, in case a chain changes under the walk.
    for _ in 0..4096 {
        if current <= 1 {
            return false;
        }
        let Ok(name) = std::fs::read_to_string(format!("/proc/{current}/comm")) else {
            return true;
        };
        if name.trim_end_matches('\n') == super::plan::HELPER_NAME {
            return true;
        }
        let Some(parent) = parent_of(current) else {
            return true;
        };
        current = parent;
    }
    true
}

/// The parent of `pid`, from `/proc/PID/stat` (its 4th field, after the command name, which
/// may hold spaces and parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_socket_of_a_local_peer_and_only_that() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let local = accepted.local_addr().unwrap();
        assert!(peer_socket_cgroup(local, peer).unwrap().is_some());
        let listening = SocketAddr::new(peer.ip(), local.port());
        assert_eq!(peer_socket_cgroup(local, listening).unwrap(), None);
        assert!(is_local(peer.ip()));
        assert!(!is_local("192.0.2.1".parse().unwrap()));
    }
}
