//! In a restricted sandbox helper: entering a network namespace recycled from an earlier
//! restricted launch (`crate::launcher::netns`) instead of making one, only if it is pristine.

use std::os::fd::{AsRawFd as _, OwnedFd};

/// The socket tables of a namespace, each a header line and one line per socket.
const SOCKET_TABLES: &[&str] = &[
    "unix", "tcp", "tcp6", "udp", "udp6", "raw", "raw6", "packet",
];

/// Enters `namespace` and checks that it holds no socket. The daemon recycles a namespace only
/// once the launch's whole tree and its helper are gone; this checks what is visible of that (a
/// socket left in it would be a live process's). True: this process is now in it, pristine.
/// False: the caller makes a fresh one (leaving any namespace entered and found wanting).
pub(super) fn enter_pristine(namespace: &OwnedFd) -> bool {
    // SAFETY: setns takes a descriptor and a flag; the process is single-threaded, so it all
    // moves.
    if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return false;
    }
    SOCKET_TABLES.iter().all(|table| empty_table(table)) && no_user_netlink_socket()
}

/// `/proc/self/net/<table>` (this namespace's) lists no socket; a table the kernel does not
/// have (no IPv6, no packet sockets) has none.
fn empty_table(table: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/self/net/{table}")) {
        Ok(text) => text.lines().count() <= 1,
        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Every netlink socket of the namespace is the kernel's own (port id 0).
fn no_user_netlink_socket() -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/net/netlink") else {
        return false;
    };
    text.lines()
        .skip(1)
        .all(|line| line.split_whitespace().nth(2) == Some("0"))
}
