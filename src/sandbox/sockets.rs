//! Host Unix sockets a sandbox with network restricted must not reach.
//!
//! A pathname socket is reached through the file system (`connect`, `sendto` to its path), and
//! neither the network namespace, nor Landlock before its `RESOLVE_UNIX` right, nor seccomp
//! (which cannot read the address) stops that; the read-only view does not either, a socket is
//! no file to write. So the daemon lists the sockets bound in its network namespace (the
//! host's) and the helper covers each one outside the launch's write roots with an empty
//! mode-000 file (`super::mounts::hide_sockets`): without CAP_DAC_OVERRIDE the sandbox gets
//! EACCES. Abstract sockets are Landlock's scope (`super::landlock`).
//!
//! The list comes from a sock_diag dump, not from `/proc/net/unix`, whose every line (each
//! connection of each process on the host, as text) was read and parsed on each sandboxed
//! launch. Only sockets a path can reach are kept: listeners (stream and seqpacket),
//! unconnected ones, and datagram ones in any state (the journal's is `connected` once a
//! client connects to it, as syslog clients do). Connected stream sockets are not: they take
//! no `connect`, and an accepted connection bears its listener's path, which the listener
//! stands for. The kernel drops every other state before it writes a byte.

use super::policy::{effective, Rule};
use super::sock_diag::{
    self, HEADER_BYTES, SOCK_DIAG_BY_FAMILY, TCP_CLOSE, TCP_ESTABLISHED, TCP_LISTEN,
};
use exec_server_protocol::sandbox::FsAccess;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// The sockets bound in the daemon's network namespace that a path reaches, at their
/// canonical paths, that `rules` do not make writable, but those in what every sandbox's view
/// hides already (the state directory, where each kept process has a socket).
pub(super) fn outside_write_roots(rules: &[Rule]) -> Vec<PathBuf> {
    let hidden = super::hidden();
    // Sockets are many and their directories few: each directory is resolved once.
    let mut directories = HashMap::new();
    let mut sockets: Vec<PathBuf> = reachable()
        .unwrap_or_default()
        .into_iter()
        .filter(|socket| !hidden.iter().any(|dir| socket.name.starts_with(&dir.path)))
        .filter_map(|socket| socket.canonical_path(&mut directories))
        .filter(|path| effective(rules, path) != Some(FsAccess::Write))
        .collect();
    sockets.sort();
    sockets.dedup();
    sockets
}

/// A socket bound to a path, as sock_diag reports it.
#[derive(Debug)]
struct Bound {
    /// The path it was bound to, as the binder spelled it.
    name: PathBuf,
    /// The device and inode of the file `bind` made (`UNIX_DIAG_VFS`).
    dev: u64,
    ino: u64,
}

impl Bound {
    /// Its path with every link resolved, when the file there is still this socket's.
    fn canonical_path(
        self,
        directories: &mut HashMap<PathBuf, Option<PathBuf>>,
    ) -> Option<PathBuf> {
        let parent = self.name.parent()?;
        let file = self.name.file_name()?;
        let directory = directories
            .entry(parent.to_owned())
            .or_insert_with(|| std::fs::canonicalize(parent).ok())
            .as_ref()?;
        let path = directory.join(file);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if meta.file_type().is_symlink() {
            // Replaced by a link since it was bound: where the link leads, as a path-wide
            // resolution finds it.
            let target = std::fs::canonicalize(&path).ok()?;
            let meta = std::fs::metadata(&target).ok()?;
            return self.is(&meta).then_some(target);
        }
        self.is(&meta).then_some(path)
    }

    fn is(&self, meta: &std::fs::Metadata) -> bool {
        (meta.dev(), meta.ino()) == (self.dev, self.ino)
    }
}

/// `unix_diag_req.udiag_states`: listening, unconnected, and connected (which a datagram
/// socket others connected to is; the stream ones are left out below).
const STATES: u32 = 1 << TCP_LISTEN | 1 << TCP_CLOSE | 1 << TCP_ESTABLISHED;
const UDIAG_SHOW_NAME: u32 = 1;
const UDIAG_SHOW_VFS: u32 = 2;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
/// `sizeof(struct unix_diag_req)` and `sizeof(struct unix_diag_msg)`.
const REQUEST_BYTES: usize = 24;
const MESSAGE_BYTES: usize = 16;

/// Every pathname socket in the daemon's network namespace a path reaches.
fn reachable() -> std::io::Result<Vec<Bound>> {
    let mut request = sock_diag::header(HEADER_BYTES + REQUEST_BYTES, true);
    request.extend([libc::AF_UNIX as u8, 0, 0, 0]); // family, protocol, pad
    request.extend(STATES.to_ne_bytes());
    request.extend(0u32.to_ne_bytes()); // any inode
    request.extend((UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    request.extend([0xffu8; 8]); // no cookie
    let mut sockets = Vec::new();
    sock_diag::query(&request, |message| sockets.extend(bound(message)))?;
    Ok(sockets)
}

/// The socket a dump's message reports, when it is bound to a path (abstract names start
/// with a NUL byte, an unbound socket has none).
fn bound(message: &[u8]) -> Option<Bound> {
    use std::os::unix::ffi::OsStrExt as _;
    let kind = u16::from_ne_bytes(message.get(4..6)?.try_into().ok()?);
    // `unix_diag_msg`: family, type, state.
    let (socket_type, state) = (*message.get(17)?, *message.get(18)?);
    let reachable = state != TCP_ESTABLISHED || i32::from(socket_type) == libc::SOCK_DGRAM;
    if kind != SOCK_DIAG_BY_FAMILY || !reachable {
        return None;
    }
    let (mut name, mut vfs) = (None, None);
    let mut at = HEADER_BYTES + MESSAGE_BYTES;
    while at + 4 <= message.len() {
        let len = u16::from_ne_bytes(message[at..at + 2].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(message[at + 2..at + 4].try_into().ok()?);
        let payload = message.get(at + 4..at + len)?;
        match kind {
            UNIX_DIAG_NAME => name = Some(payload),
            UNIX_DIAG_VFS => vfs = Some(payload),
            _ => {}
        }
        at += (len.max(4) + 3) & !3;
    }
    let name = name.filter(|name| name.first() == Some(&b'/'))?;
    // The address as given to `bind`, which may count the path's terminating NUL.
    let name = name.split(|byte| *byte == 0).next()?;
    let ino = u32::from_ne_bytes(vfs?.get(..4)?.try_into().ok()?);
    let kernel_dev = u32::from_ne_bytes(vfs?.get(4..8)?.try_into().ok()?);
    Some(Bound {
        name: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
        // The kernel's own encoding (major << 20 | minor), not stat's.
        dev: libc::makedev(kernel_dev >> 20, kernel_dev & 0xf_ffff),
        ino: ino.into(),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

    #[test]
    fn lists_the_sockets_a_path_reaches_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        let listener = UnixListener::bind(dir.join("listener")).unwrap();
        let journal = UnixDatagram::bind(dir.join("journal")).unwrap();
        // A client connected to the journal: both are `connected` now, and still reached.
        let client = UnixDatagram::bind(dir.join("client")).unwrap();
        client.connect(dir.join("journal")).unwrap();
        // An accepted connection, which bears the listener's path, is not listed again.
        let _connection = UnixStream::connect(dir.join("listener")).unwrap();
        let _accepted = listener.accept().unwrap();
        let mut listed: Vec<_> = super::reachable()
            .unwrap()
            .into_iter()
            .filter(|socket| socket.name.starts_with(&dir))
            .map(|socket| socket.canonical_path(&mut Default::default()))
            .collect();
        listed.sort();
        let expected = ["client", "journal", "listener"].map(|name| Some(dir.join(name)));
        assert_eq!(listed, expected);
        drop(journal);
    }
}
