//! Network intent: `restricted` means a new network namespace plus a socket-family filter;
//! `enabled` keeps the host network. Every probe targets a listener this test starts on the
//! host's loopback, so a failure to reach it is the sandbox, and nothing leaves the machine.

use crate::common;
use crate::sandbox_support;

use common::*;
use sandbox_support::*;
use std::io::Read as _;
use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

/// Syscall numbers (x86_64) and the machine code of an i386 `getpid` via `int 0x80`.
const PROBES: &str = r#"
import ctypes, errno, os, socket, sys, mmap
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, 'ERR', errno.errorcode.get(e.errno, e.errno), e.strerror)
def syscall(nr, *args):
    rc = libc.syscall(nr, *args)
    if rc < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return rc
"#;

fn probe(body: &str) -> String {
    format!("{PROBES}\n{body}")
}

#[tokio::test]
async fn restricted_network_reaches_nothing_but_local_ipc_works() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let (tcp_port, udp_port) = (
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port(),
    );
    let sandbox = workspace_write(&d.ws, "restricted");
    let body = format!(
        r#"
attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {tcp_port}), timeout=2))
attempt('tcp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {udp_port})))
attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {tcp_port})))
attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0))
attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt('vsock', lambda: socket.socket(40, socket.SOCK_STREAM))
attempt('vsockpair', lambda: syscall(53, 40, 1, 0, ctypes.byref((ctypes.c_int * 2)())))
attempt('io_uring', lambda: syscall(425, 8, ctypes.byref((ctypes.c_char * 120)())))
a, b = socket.socketpair()
a.send(b'ping'); print('socketpair', b.recv(4).decode())
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); u.bind('{ws}/sock'); u.listen()
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect('{ws}/sock'); c.sendall(b'unix')
print('unix', u.accept()[0].recv(4).decode())
import asyncio, threading
async def main():
    loop = asyncio.get_running_loop(); fut = loop.create_future()
    threading.Thread(target=lambda: loop.call_soon_threadsafe(fut.set_result, 42)).start()
    return await asyncio.wait_for(fut, 5)
print('asyncio', asyncio.run(main()))
sys.exit(1)
"#,
        ws = d.ws.display()
    );
    let outcome = py(&client, "net", &d.ws, &sandbox, &probe(&body)).await;
    assert!(outcome.denied, "{outcome:?}");
    for name in [
        "tcp6",
        "udp",
        "mptcp",
        "raw",
        "packet",
        "netlink",
        "vsock",
        "vsockpair",
        "io_uring",
    ] {
        assert!(
            outcome.output.contains(&format!("{name} ERR EPERM")),
            "{name}: {outcome:?}"
        );
    }
    assert!(outcome.output.contains("tcp ERR EPERM"), "{outcome:?}");
    for works in ["socketpair ping", "unix unix", "asyncio 42"] {
        assert!(outcome.output.contains(works), "{works}: {outcome:?}");
    }
    assert!(tcp.accept().is_err(), "the host listener saw a connection");
    assert!(
        udp.recv_from(&mut [0; 16]).is_err(),
        "the host socket saw a datagram"
    );
}

#[tokio::test]
async fn network_tools_fail_and_are_classified_as_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let sandbox = workspace_write(&d.ws, "restricted");
    let url = format!("http://127.0.0.1:{port}/");
    let curl = run(
        &client,
        params(
            "curl",
            &["curl", "-sS", "--max-time", "3", &url],
            &d.ws,
            sandbox.clone(),
        ),
    )
    .await;
    assert_eq!(curl.code, 7, "{curl:?}");
    assert!(curl.denied, "{curl:?}");
    let resolve = run(
        &client,
        params(
            "dns",
            &[
                "curl",
                "-sS",
                "--max-time",
                "3",
                "http://exec-server-test.invalid/",
            ],
            &d.ws,
            sandbox.clone(),
        ),
    )
    .await;
    assert_eq!(resolve.code, 6, "{resolve:?}");
    assert!(resolve.denied, "{resolve:?}");
    let bash = sh(
        &client,
        "devtcp",
        &d.ws,
        &sandbox,
        &format!("bash -c 'echo x > /dev/tcp/127.0.0.1/{port}'"),
    )
    .await;
    assert_ne!(bash.code, 0, "{bash:?}");
    assert!(bash.denied, "{bash:?}");
    tcp.set_nonblocking(true).unwrap();
    assert!(tcp.accept().is_err(), "the host listener saw a connection");
}

#[tokio::test]
async fn enabled_network_connects_but_vsock_and_io_uring_stay_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let accepted = std::thread::spawn(move || {
        let (mut stream, _) = tcp.accept().unwrap();
        let mut text = String::new();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.read_to_string(&mut text).unwrap();
        text
    });
    let sandbox = workspace_write(&d.ws, "enabled");
    let out = d.out("f").display().to_string();
    let body = format!(
        r#"
s = socket.create_connection(('127.0.0.1', {port}), timeout=5); s.sendall(b'hello from the sandbox'); s.close()
attempt('vsock', lambda: socket.socket(40, socket.SOCK_STREAM))
attempt('io_uring', lambda: syscall(425, 8, ctypes.byref((ctypes.c_char * 120)())))
attempt('write', lambda: open('{out}', 'w'))
"#
    );
    let outcome = py(&client, "net", &d.ws, &sandbox, &probe(&body)).await;
    assert_eq!(outcome.code, 0, "{outcome:?}");
    assert!(outcome.output.contains("vsock ERR EPERM"), "{outcome:?}");
    assert!(outcome.output.contains("io_uring ERR EPERM"), "{outcome:?}");
    assert!(outcome.output.contains("write ERR EROFS"), "{outcome:?}");
    assert_eq!(accepted.join().unwrap(), "hello from the sandbox");
    d.assert_outside_untouched();
}

/// i386 `int 0x80` and x32 calls bypass a number-keyed filter unless the arch is checked.
#[tokio::test]
async fn foreign_syscall_abis_are_killed() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    // mov eax, 20 (i386 getpid); int 0x80; ret
    let int80 = probe(
        r#"
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print('int80', fn())
"#,
    );
    let i386 = py(&client, "int80", &d.ws, &sandbox, &int80).await;
    assert_eq!(i386.code, 128 + libc::SIGSYS as i64, "{i386:?}");
    assert!(i386.denied, "{i386:?}");
    let x32 = py(
        &client,
        "x32",
        &d.ws,
        &sandbox,
        &probe("print('x32', libc.syscall(0x40000000 + 39))"),
    )
    .await;
    assert_eq!(x32.code, 128 + libc::SIGSYS as i64, "{x32:?}");
    assert!(x32.denied, "{x32:?}");
}

/// Abstract Unix sockets are not files: Landlock's scope (network on) and the network
/// namespace (network off) keep the sandbox from reaching a listener outside.
#[tokio::test]
async fn abstract_unix_sockets_outside_are_unreachable() {
    use std::os::linux::net::SocketAddrExt as _;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let name = format!("exec-server-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    // Below Landlock ABI 6 a sandbox on the host's network makes no Unix socket but by
    // socketpair (seccomp): refused at `socket`, before any address.
    let body = format!(
        "attempt('abstract', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect('\\0{name}'))"
    );
    for (network, expect) in [
        ("enabled", "abstract ERR EPERM"),
        ("restricted", "abstract ERR ECONNREFUSED"),
    ] {
        let sandbox = workspace_write(&d.ws, network);
        let outcome = py(&client, network, &d.ws, &sandbox, &probe(&body)).await;
        assert!(outcome.output.contains(expect), "{network}: {outcome:?}");
    }
    assert!(listener.accept().is_err(), "the listener saw a connection");
}

/// The critical escape: a sandbox on the host network opens a WebSocket to the daemon itself
/// and starts an unsandboxed process. Once waiting for the replies, once sending everything
/// and closing at once (so the daemon cannot look at a live peer). The daemon must close such
/// connections before reading them; nothing may run, and it keeps serving everyone else.
#[tokio::test]
async fn a_network_enabled_sandbox_cannot_drive_the_daemon() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let port: u16 = daemon.url.rsplit(':').next().unwrap().parse().unwrap();
    let target = |mode: &str| d.out(&format!("pwned-{mode}"));
    let body = format!(
        r#"
import base64, json, struct
def frame(obj):
    data = json.dumps(obj).encode(); mask = os.urandom(4)
    size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0xfe]) + struct.pack('>H', len(data))
    return b'\x81' + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
def attack(mode, target):
    start = {{"processId": mode, "argv": ["sh", "-c", "echo x > " + target], "cwd": "file:///",
             "env": {{"PATH": "/usr/bin:/bin"}}, "tty": False}}
    key = base64.b64encode(os.urandom(16)).decode()
    upgrade = ("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
    messages = [{{"id": 1, "method": "initialize", "params": {{"clientName": "sandbox"}}}},
                {{"method": "initialized", "params": {{}}}},
                {{"id": 2, "method": "process/start", "params": start}}]
    s = socket.create_connection(('127.0.0.1', {port}), timeout=5)
    s.sendall(upgrade + b''.join(frame(m) for m in messages))
    if mode == 'burst':
        s.close(); return
    reply = b''
    while b'sandboxType' not in reply:
        chunk = s.recv(65536)
        if not chunk: break
        reply += chunk
    print(mode, 'reply', reply[-200:])
attempt('wait', lambda: attack('wait', '{wait}'))
attempt('burst', lambda: attack('burst', '{burst}'))
"#,
        wait = target("wait").display(),
        burst = target("burst").display(),
    );
    let sandbox = workspace_write(&d.ws, "enabled");
    let outcome = py(&client, "ws", &d.ws, &sandbox, &probe(&body)).await;
    assert!(!outcome.output.contains("sandboxType"), "{outcome:?}");
    assert!(
        outcome.output.contains("wait reply b''") || outcome.output.contains("wait ERR ECONNRESET"),
        "{outcome:?}"
    );
    // What the daemon would have started runs in well under this.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for mode in ["wait", "burst"] {
        assert!(
            !target(mode).exists(),
            "{mode}: the daemon ran the sandbox's process"
        );
    }
    d.assert_outside_untouched();
    // The daemon still serves its clients, sandboxed starts included.
    assert_ok(&sh(&client, "after", &d.ws, &sandbox, "true").await);
    let other = daemon.client().await;
    other.initialize(None).await.unwrap();
}
