//! A managed network's descriptors, opened by the sandbox helper in the sandbox's network
//! namespace and passed to the daemon (`crate::launcher::bridge` serves them): a listener per
//! port, and for transparent TCP a TUN device that every other TCP connection is routed to.

use crate::ipc::channel;
use crate::ipc::message::Answer;
use crate::sandbox::plan::{ManagedPlan, TUN_DEVICE, TUN_MTU};
use nix::sys::socket::{AddressFamily, SockFlag};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The TUN device's name, and its addresses (documentation ranges, as codex's), in the
/// sandbox's namespace.
const TUN_NAME: &str = "codextun";
const TUN_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const TUN_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// In the helper, in its new network namespace (which it may still configure): `lo` up, a
/// listener on 127.0.0.1 at each of the plan's ports, then its TUN device (last), all sent to
/// the daemon on `control` (then closed here, so the program never holds them).
pub(crate) fn open(control: &UnixStream, managed: &ManagedPlan) -> io::Result<()> {
    let socket = inet_socket(AddressFamily::Inet)?;
    set_up(&socket, "lo")?;
    let mut fds: Vec<OwnedFd> = managed
        .ports
        .iter()
        .map(|&port| std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(OwnedFd::from))
        .collect::<io::Result<_>>()?;
    if managed.transparent_tcp {
        fds.push(tun(&socket)?);
    }
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    // No ports: the marker alone (the daemon has nothing to bridge).
    channel::send_fds(control.as_fd(), &Answer::Listeners.encode(), &raw).map(drop)
}

/// A TCP socket of `family`, to configure interfaces with: the only inet kind the managed
/// seccomp filter lets the helper make.
fn inet_socket(family: AddressFamily) -> io::Result<OwnedFd> {
    let stream = nix::sys::socket::SockType::Stream;
    Ok(nix::sys::socket::socket(
        family,
        stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

/// An ifreq naming `name` (which fits with its NUL: the names here are short).
fn request(name: &str) -> libc::ifreq {
    // SAFETY: a zeroed ifreq is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    request
}

/// `ioctl(fd, op, arg)`, its failure as an error.
///
/// # Safety
/// `arg` must be what `op` reads and writes.
unsafe fn ioctl<T>(fd: &OwnedFd, op: libc::c_ulong, arg: *mut T) -> io::Result<()> {
    // SAFETY: the caller's promise.
    match unsafe { libc::ioctl(fd.as_raw_fd(), op as _, arg) } {
        0.. => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Sets IFF_UP on `name` (`lo`: which assigns it 127.0.0.1).
fn set_up(socket: &OwnedFd, name: &str) -> io::Result<()> {
    let mut request = request(name);
    // SAFETY: the interface flag ioctls read and write the ifreq we pass.
    unsafe {
        ioctl(socket, libc::SIOCGIFFLAGS, &mut request)?;
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        ioctl(socket, libc::SIOCSIFFLAGS, &mut request)
    }
}

fn sockaddr_v4(ip: Ipv4Addr) -> libc::sockaddr {
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; the kernel reads it by family.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(address) }
}

/// The TUN device for transparent TCP: made, addressed, up, and the default route of both
/// families (loopback's routes stay more specific, so the proxy's ports are still reached
/// directly). Non-blocking, for the daemon's reactor.
fn tun(socket: &OwnedFd) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let device: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(TUN_DEVICE)?
        .into();
    let mut create = request(TUN_NAME);
    create.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    let mut address = request(TUN_NAME);
    address.ifr_ifru.ifru_addr = sockaddr_v4(TUN_V4);
    let mut mask = request(TUN_NAME);
    mask.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::BROADCAST);
    let mut mtu = request(TUN_NAME);
    mtu.ifr_ifru.ifru_mtu = TUN_MTU.into();
    // SAFETY: each ioctl reads (and writes) the ifreq of its kind we pass.
    unsafe {
        ioctl(&device, libc::TUNSETIFF as libc::c_ulong, &mut create)?;
        ioctl(socket, libc::SIOCSIFADDR, &mut address)?;
        ioctl(socket, libc::SIOCSIFNETMASK, &mut mask)?;
        ioctl(socket, libc::SIOCSIFMTU, &mut mtu)?;
    }
    set_up(socket, TUN_NAME)?;
    default_route_v4(socket)?;
    match route_v6() {
        // A kernel without IPv6 has no IPv6 route to leave open.
        Err(err) if err.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
        other => other?,
    }
    Ok(device)
}

fn default_route_v4(socket: &OwnedFd) -> io::Result<()> {
    let mut name = TUN_NAME.as_bytes().to_vec();
    name.push(0);
    // SAFETY: a zeroed rtentry is valid.
    let mut route: libc::rtentry = unsafe { std::mem::zeroed() };
    route.rt_dst = sockaddr_v4(Ipv4Addr::UNSPECIFIED);
    route.rt_genmask = sockaddr_v4(Ipv4Addr::UNSPECIFIED);
    route.rt_flags = libc::RTF_UP;
    route.rt_dev = name.as_mut_ptr().cast();
    // SAFETY: SIOCADDRT reads the rtentry, and the name it points to, which outlives the call.
    unsafe { ioctl(socket, libc::SIOCADDRT, &mut route) }
}

/// The kernel's `struct in6_rtmsg` (libc's has private fields).
#[repr(C)]
struct In6Rtmsg {
    dst: libc::in6_addr,
    src: libc::in6_addr,
    gateway: libc::in6_addr,
    kind: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

/// The TUN device's IPv6 address, and the IPv6 default route through it.
fn route_v6() -> io::Result<()> {
    let socket = inet_socket(AddressFamily::Inet6)?;
    let mut index = request(TUN_NAME);
    // SAFETY: SIOCGIFINDEX writes the index into the ifreq we pass.
    unsafe { ioctl(&socket, libc::SIOCGIFINDEX, &mut index)? };
    // SAFETY: the union's index, which SIOCGIFINDEX set.
    let ifindex = unsafe { index.ifr_ifru.ifru_ifindex };
    let mut address = libc::in6_ifreq {
        ifr6_addr: libc::in6_addr {
            s6_addr: TUN_V6.octets(),
        },
        ifr6_prefixlen: 128,
        ifr6_ifindex: ifindex,
    };
    let any = libc::in6_addr { s6_addr: [0; 16] };
    let mut route = In6Rtmsg {
        dst: any,
        src: any,
        gateway: any,
        kind: 0,
        dst_len: 0,
        src_len: 0,
        metric: 1,
        info: 0,
        flags: libc::RTF_UP.into(),
        ifindex,
    };
    // SAFETY: SIOCSIFADDR on an IPv6 socket reads an in6_ifreq; SIOCADDRT an in6_rtmsg.
    unsafe {
        ioctl(&socket, libc::SIOCSIFADDR, &mut address)?;
        ioctl(&socket, libc::SIOCADDRT, &mut route)
    }
}
