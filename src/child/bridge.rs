//! A managed network's listeners, opened by the sandbox helper in the sandbox's network
//! namespace and passed to the daemon (`crate::launcher::bridge` relays them).

use crate::ipc::channel;
use crate::ipc::message::Answer;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd as _, AsRawFd as _, RawFd};
use std::os::unix::net::UnixStream;

/// In the helper, in its new network namespace (which it may still configure): `lo` up, a
/// listener on 127.0.0.1 at each of `ports`, all sent to the daemon on `control` (then closed
/// here, so the program never holds them).
pub(crate) fn open(control: &UnixStream, ports: &[u16]) -> io::Result<()> {
    loopback_up()?;
    let listeners = ports
        .iter()
        .map(|&port| std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)))
        .collect::<io::Result<Vec<_>>>()?;
    let fds: Vec<RawFd> = listeners.iter().map(|l| l.as_raw_fd()).collect();
    // No ports: the marker alone (the daemon has nothing to bridge).
    channel::send_fds(control.as_fd(), &Answer::Listeners.encode(), &fds).map(drop)
}

/// Sets IFF_UP on `lo`, which assigns it 127.0.0.1.
fn loopback_up() -> io::Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    // A TCP socket: the only inet kind the managed seccomp filter lets the helper make.
    let socket = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: a zeroed ifreq is valid; the name fits with its NUL.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: the interface ioctls read and write the ifreq we pass.
    unsafe {
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) < 0 {
            return Err(io::Error::last_os_error());
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
