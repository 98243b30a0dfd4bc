//! Managed network (`enforceManagedNetwork` + `managedNetwork`): the command reaches exactly
//! the listed loopback ports of the daemon's host, where a real HTTP proxy listens, and
//! nothing else. Every probe targets a listener this test starts on the host's loopback (or an
//! address with no route from the sandbox), so nothing leaves the machine.

use crate::common;
use crate::sandbox_support;
use crate::support::http_proxy;

use common::http_server::HttpServer;
use common::*;
use http_proxy::HttpProxy;
use sandbox_support::*;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::Path;

/// `params` with the managed network fields and the proxy environment the client sends.
fn managed(mut params: Value, ports: &[u16], allow_local_binding: bool) -> Value {
    params["enforceManagedNetwork"] = json!(true);
    params["managedNetwork"] =
        json!({"loopbackPorts": ports, "allowLocalBinding": allow_local_binding});
    params
}

fn proxy_env(port: u16) -> Value {
    let url = format!("http://127.0.0.1:{port}");
    json!({
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LC_ALL": "C",
        "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
        "ALL_PROXY": url, "NO_PROXY": "", "CODEX_NETWORK_PROXY_ACTIVE": "1",
    })
}

/// Runs `sh -c script` under `sandbox` with a managed network of `ports` and the proxy
/// environment.
async fn managed_sh(
    client: &Client,
    id: &str,
    ws: &Path,
    sandbox: Value,
    ports: &[u16],
    script: &str,
) -> Outcome {
    let mut params = params(id, &["sh", "-c", script], ws, sandbox);
    params["env"] = proxy_env(ports[0]);
    run(client, managed(params, ports, false)).await
}

async fn managed_py(
    client: &Client,
    id: &str,
    ws: &Path,
    ports: &[u16],
    allow_local_binding: bool,
    code: &str,
) -> Outcome {
    let params = params(
        id,
        &[python(), "-c", code],
        ws,
        workspace_write(ws, "restricted"),
    );
    run(client, managed(params, ports, allow_local_binding)).await
}

const PROBES: &str = r#"
import errno, socket, sys
def attempt(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, 'ERR', errno.errorcode.get(e.errno, e.errno), e.strerror)
"#;

#[tokio::test]
async fn a_request_through_the_proxy_reaches_the_host_server_with_the_env_untouched() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let server = HttpServer::start().await;
    let proxy = HttpProxy::start().await;
    let url = server.url("/target");
    let script = format!("env | grep -i proxy | sort; curl -sS --max-time 5 {url}");
    let sandbox = workspace_write(&d.ws, "restricted");
    let outcome = managed_sh(&client, "curl", &d.ws, sandbox, &[proxy.port], &script).await;
    assert_ok(&outcome);
    assert!(outcome.output.ends_with("target"), "{outcome:?}");
    assert_eq!(proxy.requests(), [format!("GET {url} HTTP/1.1")]);
    assert_eq!(server.hits(), 1);
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port);
    let mut expected: Vec<String> = [
        "ALL_PROXY",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "http_proxy",
        "https_proxy",
    ]
    .iter()
    .map(|key| format!("{key}={proxy_url}"))
    .chain(["CODEX_NETWORK_PROXY_ACTIVE=1".into(), "NO_PROXY=".into()])
    .collect();
    expected.sort();
    let mut shown: Vec<&str> = outcome.output.lines().filter(|l| l.contains('=')).collect();
    shown.sort();
    assert_eq!(shown, expected, "{outcome:?}");
}

/// The proxy port is reachable; another host loopback port, an outside address, UDP and a
/// bind are not, and the host listener never sees a connection.
#[tokio::test]
async fn everything_but_the_proxy_ports_is_refused() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let proxy = HttpProxy::start().await;
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let other_port = other.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let body = format!(
        r#"
attempt('proxy', lambda: socket.create_connection(('127.0.0.1', {proxy}), timeout=5).close())
attempt('other', lambda: socket.create_connection(('127.0.0.1', {other_port}), timeout=5))
attempt('v6', lambda: socket.create_connection(('::1', {proxy}), timeout=5))
attempt('outside', lambda: socket.create_connection(('10.255.255.1', 80), timeout=5))
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {udp_port})))
attempt('udp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))
attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt('bind', lambda: socket.socket().bind(('127.0.0.1', 0)))
attempt('bind6', lambda: socket.socket(socket.AF_INET6).bind(('::1', 0)))
sys.exit(1)
"#,
        proxy = proxy.port
    );
    let outcome = managed_py(
        &client,
        "probe",
        &d.ws,
        &[proxy.port],
        false,
        &format!("{PROBES}{body}"),
    )
    .await;
    let (bind_errno, _) = bind_refusal();
    for expected in [
        "proxy OK",
        "other ERR ECONNREFUSED",
        "outside ERR ENETUNREACH",
        "udp ERR EPERM",
        "udp6 ERR EPERM",
        "raw ERR EPERM",
        "mptcp ERR EPERM",
        "netlink ERR EPERM",
        &format!("bind ERR {bind_errno}"),
        &format!("bind6 ERR {bind_errno}"),
    ] {
        assert!(outcome.output.contains(expected), "{expected}: {outcome:?}");
    }
    // [::1] is not bridged: refused, or unreachable where the kernel has no IPv6.
    assert!(outcome.output.contains("v6 ERR E"), "{outcome:?}");
    assert!(other.accept().is_err(), "the other port saw a connection");
    assert!(
        udp.recv_from(&mut [0; 16]).is_err(),
        "the host socket saw a datagram"
    );
}

/// A connection the managed network refuses makes the exit `sandboxDenied`, as curl and as a
/// script report it.
#[tokio::test]
async fn a_refused_connection_is_reported_as_sandbox_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let proxy = HttpProxy::start().await;
    let server = HttpServer::start().await;
    let direct = managed_sh(
        &client,
        "direct",
        &d.ws,
        workspace_write(&d.ws, "restricted"),
        &[proxy.port],
        &format!(
            "curl -sS --noproxy '*' --max-time 5 {}",
            server.url("/target")
        ),
    )
    .await;
    assert_eq!(direct.code, 7, "{direct:?}");
    assert!(direct.denied, "{direct:?}");
    let script = managed_py(
        &client,
        "script",
        &d.ws,
        &[proxy.port],
        false,
        &format!(
            "import socket; socket.create_connection(('127.0.0.1', {}))",
            server.base.rsplit(':').next().unwrap()
        ),
    )
    .await;
    assert_denied(&script, "Connection refused");
    let outside = managed_py(
        &client,
        "outside",
        &d.ws,
        &[proxy.port],
        false,
        "import socket; socket.create_connection(('10.255.255.1', 80), timeout=5)",
    )
    .await;
    assert_denied(&outside, "Network is unreachable");
    let bind = managed_py(
        &client,
        "bind",
        &d.ws,
        &[proxy.port],
        false,
        "import socket; socket.socket().bind(('127.0.0.1', 8080))",
    )
    .await;
    assert_denied(&bind, bind_refusal().1);
    // No ports at all: not even the proxy is reachable.
    let none = managed_py(
        &client,
        "none",
        &d.ws,
        &[],
        false,
        &format!(
            "import socket; socket.create_connection(('127.0.0.1', {}))",
            proxy.port
        ),
    )
    .await;
    assert_denied(&none, "Connection refused");
    assert_eq!(server.hits(), 0);
    assert!(proxy.requests().is_empty());
}

/// `enforceManagedNetwork` confines the network whatever the intent says of it: under an
/// `enabled` profile, and with no sandbox intent at all (the file system then unrestricted),
/// the launch is sandboxed and reaches only the proxy.
#[tokio::test]
async fn managed_network_confines_an_enabled_profile_and_a_launch_without_intent() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let server = HttpServer::start().await;
    let proxy = HttpProxy::start().await;
    let url = server.url("/hello");
    for (name, sandbox) in [
        ("enabled", workspace_write(&d.ws, "enabled")),
        ("none", Value::Null),
    ] {
        let via_proxy = managed_sh(
            &client,
            &format!("{name}-via"),
            &d.ws,
            sandbox.clone(),
            &[proxy.port],
            &format!("curl -sS --max-time 5 {url}"),
        )
        .await;
        assert_ok(&via_proxy);
        assert_eq!(via_proxy.output, "hello world", "{name}");
        let direct = managed_sh(
            &client,
            &format!("{name}-direct"),
            &d.ws,
            sandbox,
            &[proxy.port],
            &format!("curl -sS --noproxy '*' --max-time 5 {url}"),
        )
        .await;
        assert_eq!(direct.code, 7, "{name}: {direct:?}");
        assert!(direct.denied, "{name}: {direct:?}");
    }
    assert_eq!(proxy.requests().len(), 2);
}

#[tokio::test]
async fn local_binding_works_only_when_allowed() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let proxy = HttpProxy::start().await;
    let echo = r#"
import socket
server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen()
peer = socket.create_connection(server.getsockname(), timeout=5); peer.sendall(b'local')
print('echo', server.accept()[0].recv(5).decode())
"#;
    let allowed = managed_py(&client, "allowed", &d.ws, &[proxy.port], true, echo).await;
    assert_ok(&allowed);
    assert!(allowed.output.contains("echo local"), "{allowed:?}");
    let refused = managed_py(&client, "refused", &d.ws, &[proxy.port], false, echo).await;
    assert_denied(&refused, bind_refusal().1);
}

/// The sockets of daemon `pid` whose local or peer port is `port`, found by duplicating each
/// of its socket descriptors (pidfd_getfd): the bridge's listener and both halves of every
/// relayed connection.
fn daemon_sockets_on(pid: i32, port: u16) -> usize {
    // SAFETY: plain syscalls; every fd obtained is closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    let mut count = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Ok(target_fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: as above.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, target_fd, 0) } as i32;
        if fd < 0 {
            continue;
        }
        let ports = [libc::getsockname, libc::getpeername].map(|query| {
            // SAFETY: a sockaddr_storage buffer with its length.
            let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of_val(&addr) as libc::socklen_t;
            let ok = unsafe {
                query(
                    fd,
                    (&mut addr as *mut libc::sockaddr_storage).cast(),
                    &mut len,
                )
            } == 0;
            (ok && addr.ss_family == libc::AF_INET as libc::sa_family_t).then(|| {
                // SAFETY: an AF_INET address.
                let v4: libc::sockaddr_in = unsafe { std::mem::transmute_copy(&addr) };
                u16::from_be(v4.sin_port)
            })
        });
        if ports.contains(&Some(port)) {
            count += 1;
        }
        // SAFETY: our duplicate.
        unsafe { libc::close(fd) };
    }
    // SAFETY: ours.
    unsafe { libc::close(pidfd) };
    count
}

#[tokio::test]
async fn the_bridge_is_gone_with_the_process() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let proxy = HttpProxy::start().await;
    assert_eq!(daemon_sockets_on(daemon.pid(), proxy.port), 0);
    let code = format!(
        "import socket, time\n\
         s = socket.create_connection(('127.0.0.1', {}), timeout=5)\n\
         print('connected', flush=True)\n\
         time.sleep(60)",
        proxy.port
    );
    let params = params(
        "held",
        &[python(), "-c", &code],
        &d.ws,
        workspace_write(&d.ws, "restricted"),
    );
    let started = client
        .call("process/start", managed(params, &[proxy.port], false))
        .await;
    assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
    let read = client
        .call(
            "process/read",
            json!({"processId": "held", "afterSeq": 0, "waitMs": 10000}),
        )
        .await;
    let output: Vec<u8> = read["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|chunk| unb64(&chunk["chunk"]))
        .collect();
    assert_eq!(output, b"connected\n", "{read}");
    eventually("the relayed connection at the proxy", || {
        proxy.open_connections() == 1
    })
    .await;
    // The listener, the sandbox's connection as accepted, and the relay to the proxy.
    assert_eq!(daemon_sockets_on(daemon.pid(), proxy.port), 3);
    client
        .call("process/terminate", json!({"processId": "held"}))
        .await;
    let (_, last) = read_all(&client, "held").await;
    assert_eq!(last["exited"], true, "{last}");
    eventually("the bridge's sockets to close", || {
        daemon_sockets_on(daemon.pid(), proxy.port) == 0
    })
    .await;
    eventually("the relayed connection to close", || {
        proxy.open_connections() == 0
    })
    .await;
}

#[tokio::test]
async fn bad_managed_network_requests_are_refused() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let own_port: u16 = daemon.url.rsplit(':').next().unwrap().parse().unwrap();
    let base = || {
        params(
            "bad",
            &["true"],
            &d.ws,
            workspace_write(&d.ws, "restricted"),
        )
    };
    let mut without_ports = base();
    without_ports["enforceManagedNetwork"] = json!(true);
    let too_many: Vec<u16> = (1000..1017).collect();
    for (params, message) in [
        (without_ports, "requires managedNetwork"),
        (managed(base(), &[0], false), "0 is not a port"),
        (managed(base(), &too_many, false), "at most 16"),
        (managed(base(), &[own_port], false), "own listener"),
    ] {
        let err = client.request("process/start", params).await.unwrap_err();
        assert_eq!(err["code"], -32602, "{err}");
        let text = err["message"].as_str().unwrap();
        assert!(text.contains(message), "{message}: {err}");
    }
    let mut port_too_big = managed(base(), &[1], false);
    port_too_big["managedNetwork"]["loopbackPorts"] = json!([65536]);
    let err = client
        .request("process/start", port_too_big)
        .await
        .unwrap_err();
    assert_eq!(err["code"], -32602, "{err}");
}

/// A launch holds at most 64 relayed connections at once; the daemon closes the rest as it
/// accepts them.
#[tokio::test]
async fn relayed_connections_are_bounded_per_launch() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let proxy = HttpProxy::start().await;
    let code = format!(
        r#"
import select, socket, time
conns = [socket.create_connection(('127.0.0.1', {}), timeout=5) for _ in range(70)]
time.sleep(1)
readable, _, _ = select.select(conns, [], [], 0)
print('closed', sum(1 for c in readable if c.recv(1) == b''))
"#,
        proxy.port
    );
    let outcome = managed_py(&client, "many", &d.ws, &[proxy.port], false, &code).await;
    assert_ok(&outcome);
    assert_eq!(outcome.output, "closed 6\n");
}
