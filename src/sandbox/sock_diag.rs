//! One request to the kernel's sock_diag netlink interface and its replies, for the inet
//! lookup of a peer's cgroup (`super::peers`) and the dump of bound Unix sockets
//! (`super::sockets`). No netlink crate: each caller builds its few fixed-layout bytes, and
//! this is the socket, the send and the walk over the replies they share.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

/// `nlmsghdr`'s type of a sock_diag request and of each socket it reports.
pub(super) const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// Socket states (the kernel's TCP ones, which Unix sockets use too): connected,
/// unconnected, listening.
pub(super) const TCP_ESTABLISHED: u8 = 1;
pub(super) const TCP_CLOSE: u8 = 7;
pub(super) const TCP_LISTEN: u8 = 10;
/// `sizeof(struct nlmsghdr)`.
pub(super) const HEADER_BYTES: usize = 16;

/// The `nlmsghdr` of a request of `total` bytes (the header included); `dump` asks for every
/// match rather than the one an exact lookup names.
pub(super) fn header(total: usize, dump: bool) -> Vec<u8> {
    let mut flags = libc::NLM_F_REQUEST as u16;
    if dump {
        flags |= libc::NLM_F_DUMP as u16;
    }
    let mut message = Vec::with_capacity(total);
    message.extend((total as u32).to_ne_bytes());
    message.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    message.extend(flags.to_ne_bytes());
    message.extend([0u8; 8]); // sequence, port id
    message
}

/// Sends `request` (made with [`header`]) and hands each reply message, its `nlmsghdr`
/// included, to `each`: every socket of a dump, up to the kernel's `NLMSG_DONE`, or the one
/// reply of an exact lookup, which may be an `NLMSG_ERROR` (the caller tells by its type).
pub(super) fn query(request: &[u8], mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let dump = u16::from_ne_bytes([request[6], request[7]]) & libc::NLM_F_DUMP as u16 != 0;
    // SAFETY: socket takes integers only; the descriptor it returns is checked and owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a valid buffer; the kernel is the default destination of a netlink socket.
    let sent = unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // The kernel fills each datagram up to the buffer, at most a page's worth of sockets more
    // than the 8 KiB netlink(7) asks for.
    let mut reply = vec![0u8; 32 << 10];
    loop {
        // SAFETY: a valid buffer.
        let len = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                reply.as_mut_ptr().cast(),
                reply.len(),
                0,
            )
        };
        if len < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        let mut rest = &reply[..len as usize];
        while rest.len() >= HEADER_BYTES {
            let size = (u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize).min(rest.len());
            let kind = u16::from_ne_bytes([rest[4], rest[5]]);
            if size < HEADER_BYTES {
                return Err(io::Error::other(
                    "sock_diag: a reply shorter than its header",
                ));
            }
            let message = &rest[..size];
            match kind {
                _ if !dump => {
                    each(message);
                    return Ok(());
                }
                k if k == libc::NLMSG_DONE as u16 => return Ok(()),
                k if k == libc::NLMSG_ERROR as u16 => return Err(dump_error(message)),
                _ => each(message),
            }
            rest = rest.get((size + 3) & !3..).unwrap_or_default();
        }
        if len == 0 {
            return Err(io::Error::other(
                "sock_diag: the dump ended without NLMSG_DONE",
            ));
        }
    }
}

/// The error an `NLMSG_ERROR` reply carries (a negated errno after the header).
fn dump_error(message: &[u8]) -> io::Error {
    message
        .get(HEADER_BYTES..HEADER_BYTES + 4)
        .map(|code| i32::from_ne_bytes(code.try_into().unwrap()))
        .filter(|code| *code < 0)
        .map_or_else(
            || io::Error::other("sock_diag: an error reply without an error"),
            |code| io::Error::from_raw_os_error(-code),
        )
}
