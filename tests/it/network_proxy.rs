//! Attacks on a process's managed proxy (`process/start.networkProxy`), each performed and
//! shown stopped: a command that drops the proxy variables or goes around the proxy reaches
//! nothing; a name that resolves to a loopback address is refused even when allowlisted (DNS
//! pointing at the host's own services); another sandbox, or the host itself, cannot use a
//! process's proxy; unsandboxed, the network is still confined to the proxy. Every destination
//! is a server this test starts on the host (its loopback, or its own address for transparent
//! TCP), so nothing leaves the machine. With transparent TCP: a raw connection the policy
//! refuses reaches nothing, UDP finds no way out, the program cannot rewire its namespace or
//! make a device of its own, and holds no descriptor of the proxy's; many such processes at once,
//! over many connections, are each carried, and leave no device behind in the daemon.

use crate::codex_differential::network_proxy::{host_address, network_proxy, run, RAW_GET};
use crate::common::http_server::HttpServer;
use crate::common::{scratch_dir, Daemon};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

/// A name other than `localhost` that the host's `/etc/hosts` maps to a loopback address.
fn loopback_alias() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    hosts
        .lines()
        .filter_map(|line| {
            let mut words = line.split('#').next()?.split_whitespace();
            let address: std::net::IpAddr = words.next()?.parse().ok()?;
            address.is_loopback().then_some(words)
        })
        .flatten()
        .find(|name| !name.contains("localhost"))
        .expect("/etc/hosts names a loopback address other than localhost")
        .to_owned()
}

fn allow_local() -> Value {
    network_proxy(json!({"127.0.0.1": "allow"}), json!({"enableSocks5": true}))
}

/// Without the proxy variables, or told to bypass the proxy, or straight at the address, the
/// command reaches nothing: the sandbox has no route out but the proxy.
#[tokio::test]
async fn going_around_the_proxy_reaches_nothing() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let address = server.base.replace("http://", "").replace(':', "/");
    let script = format!(
        "env -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy \
         curl -sS --max-time 3 \"$0/target\"; echo \" a=$?\"; \
         curl -sS --max-time 3 --noproxy '*' \"$0/target\"; echo \" b=$?\"; \
         ( : <>/dev/tcp/{address} ) 2>/dev/null; echo \" c=$?\""
    );
    let argv = ["bash", "-c", &script, &server.base];
    let outcome = run(
        &client,
        root.path(),
        "around",
        &argv,
        allow_local(),
        json!(null),
    )
    .await;
    assert!(outcome.output.contains(" a=7"), "{outcome:?}");
    assert!(outcome.output.contains(" b=7"), "{outcome:?}");
    assert!(outcome.output.contains(" c=1"), "{outcome:?}");
    assert_eq!(server.state.target_hits.load(Ordering::Relaxed), 0);
    assert!(
        outcome.audit.is_empty(),
        "nothing went through the proxy: {outcome:?}"
    );
}

/// A name the policy allows by pattern that resolves to a loopback address is refused as
/// local, through HTTP and SOCKS5 alike: allowlisting a name does not open the host's own
/// services to it.
#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_even_when_allowed() {
    let server = HttpServer::start().await;
    let port = server.base.rsplit(':').next().unwrap();
    let alias = loopback_alias();
    let url = format!("http://{alias}:{port}/target");
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let proxy = network_proxy(json!({"*": "allow"}), json!({"enableSocks5": true}));
    let script = "curl -sS -i --max-time 3 \"$0\"; curl -sS --max-time 3 -x \"$ALL_PROXY\" \"$0\"";
    let argv = ["sh", "-c", script, &url];
    let outcome = run(&client, root.path(), "alias", &argv, proxy, json!(null)).await;
    assert!(
        outcome
            .output
            .contains("x-proxy-error: blocked-by-allowlist"),
        "{outcome:?}"
    );
    let reasons: Vec<&Value> = outcome.audit.iter().map(|e| &e["reason"]).collect();
    assert_eq!(reasons, [&json!("not_allowed_local"); 2], "{outcome:?}");
    assert_eq!(server.state.target_hits.load(Ordering::Relaxed), 0);
}

/// A process's proxy serves that process alone: another sandboxed process, with a proxy of its
/// own that allows nothing, finds its own proxy at the same address and is refused; a process
/// on the host finds no proxy there at all. The first process's allowed target stays unreached
/// by them, and reached by it.
#[tokio::test]
async fn no_one_else_can_use_a_process_proxy() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let target = format!("{}/target", server.base);
    // The owner keeps its proxy alive while the others try.
    let owner = ["sh", "-c", "curl -sS --max-time 3 \"$0\"; sleep 3", &target];
    let owning = run(
        &client,
        root.path(),
        "owner",
        &owner,
        allow_local(),
        json!(null),
    );
    let other = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let client = daemon.client().await;
        client.initialize(None).await.unwrap();
        let deny_all = network_proxy(json!({"example.com": "allow"}), json!({}));
        let probe = [
            "sh",
            "-c",
            "curl -sS -i --max-time 3 -x http://127.0.0.1:3128 \"$0\"",
            &target,
        ];
        let outcome = run(&client, root.path(), "other", &probe, deny_all, json!(null)).await;
        let host = std::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "3",
                "-x",
                "http://127.0.0.1:3128",
                &target,
            ])
            .output()
            .unwrap();
        (outcome, host)
    };
    let (owner, (other, host)) = tokio::join!(owning, other);
    assert_eq!(owner.output, "target", "{owner:?}");
    assert!(
        other.output.contains("x-proxy-error: blocked-by-allowlist"),
        "{other:?}"
    );
    let host_output = String::from_utf8_lossy(&host.stdout);
    assert!(
        !host_output.contains("target"),
        "the host reached the proxy: {host_output}"
    );
    assert_eq!(
        server.state.target_hits.load(Ordering::Relaxed),
        1,
        "the owner's request only"
    );
}

/// Without a `sandbox`, a proxied process's network is still confined to its proxy: the
/// proxy narrows what the process may reach, it never widens it.
#[tokio::test]
async fn an_unsandboxed_proxied_process_is_confined_to_its_proxy() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let start = json!({"processId": "bare", "argv": ["sh", "-c",
            "curl -sS --max-time 3 \"$0/target\"; echo \" via=$?\"; \
             curl -sS --max-time 3 --noproxy '*' \"$0/target\"; echo \" direct=$?\"",
            server.base],
        "cwd": format!("file://{}", root.path().display()), "env": {"PATH": "/usr/bin:/bin"},
        "tty": false, "networkProxy": allow_local()});
    let started = client.call("process/start", start).await;
    assert_eq!(started["sandboxType"], "linuxSeccomp");
    let events = client.events_until_closed("bare").await;
    let output = output_of(&events, None);
    assert!(output.contains("target via=0"), "{output}");
    assert!(output.contains(" direct=7"), "{output}");
    assert_eq!(server.state.target_hits.load(Ordering::Relaxed), 1);
}

fn transparent(domains: Value) -> Value {
    network_proxy(
        domains,
        json!({"enableSocks5": true, "transparentTcp": true}),
    )
}

/// `process/start`'s params of `argv` as `id`, sandboxed over `root` with `RAW` set to
/// [`RAW_GET`], through transparent TCP allowing `domains`.
fn transparent_start(id: &str, argv: &[&str], root: &std::path::Path, domains: Value) -> Value {
    json!({"processId": id, "argv": argv, "cwd": format!("file://{}", root.display()),
        "env": {"PATH": "/usr/bin:/bin", "RAW": RAW_GET}, "tty": false,
        "sandbox": crate::codex_differential::network_proxy::sandbox(root),
        "enforceManagedNetwork": true, "networkProxy": transparent(domains)})
}

/// What a process wrote on `stream` (None: both), from its events.
fn output_of(events: &[Value], stream: Option<&str>) -> String {
    events
        .iter()
        .filter(|e| e["method"] == "process/output")
        .filter(|e| stream.is_none_or(|stream| e["params"]["stream"] == stream))
        .map(|e| String::from_utf8_lossy(&crate::common::unb64(&e["params"]["chunk"])).into_owned())
        .collect()
}

/// Transparent TCP opens a route out of the sandbox, to the proxy and nowhere else: a raw
/// connection to an address the policy refuses is closed unserved; a UDP datagram to the host
/// is not delivered; the program cannot take the route down or reroute (no netlink), cannot
/// make a TUN device of its own (no CAP_NET_ADMIN), and holds no descriptor of the proxy's
/// device.
#[tokio::test]
async fn transparent_tcp_leaves_no_other_way_out() {
    let host = host_address();
    let server = HttpServer::start_on(host).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let udp = std::net::UdpSocket::bind((host, 0)).unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port().to_string();
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let script =         "bash -c \"$RAW\" \"$0\" \"$1\"; \
         python3 -c 'import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); \
         s.sendto(b\"x\",(sys.argv[1],int(sys.argv[2])))' \"$0\" \"$2\" 2>/dev/null; echo \" udp=$?\"; \
         ip route del default 2>/dev/null; echo \" route=$?\"; \
         ip link set codextun down 2>/dev/null; echo \" link=$?\"; \
         python3 -c 'import fcntl,struct; f=open(\"/dev/net/tun\",\"r+b\",buffering=0); \
         fcntl.ioctl(f,0x400454ca,struct.pack(\"16sH\",b\"evil0\",0x1001))' 2>/dev/null; \
         echo \" tun=$?\"; \
         ls -l /proc/self/fd/ | grep -c /dev/net/tun; \
         bash -c \"$RAW\" \"$0\" \"$1\"";
    let host = host.to_string();
    let argv = ["bash", "-c", script, &host, &port, &udp_port];
    let domains = json!({"example.com": "allow"});
    let start = transparent_start("out", &argv, root.path(), domains);
    client.call("process/start", start).await;
    let events = client.events_until_closed("out").await;
    let output = output_of(&events, Some("stdout"));
    let refusals = events
        .iter()
        .filter(|e| e["method"] == "network/policyDecision" && e["params"]["decision"] == "deny")
        .count();
    for expected in [" udp=1", " tun=1", "\n0\n"] {
        assert!(output.contains(expected), "{expected:?} in {output:?}");
    }
    for refused in [" route=0", " link=0"] {
        assert!(!output.contains(refused), "{refused:?} in {output:?}");
    }
    assert!(!output.contains("target"), "{output}");
    // The second after the attempts on the route: still routed to the proxy.
    assert_eq!(
        refusals, 2,
        "both raw connections met the policy: {events:#?}"
    );
    assert_eq!(server.state.target_hits.load(Ordering::Relaxed), 0);
    assert!(
        udp.recv(&mut [0; 8]).is_err(),
        "a datagram reached the host"
    );
}

/// Many transparent processes at once, over many connections, each opening several raw
/// connections at once: every one is carried to the allowed server, and once they are gone
/// the daemon holds no TUN device any more.
#[tokio::test]
async fn many_transparent_processes_at_once_are_each_carried_and_leave_nothing() {
    const CLIENTS: usize = 8;
    const CONNECTIONS: usize = 10;
    let host = host_address();
    let server = HttpServer::start_on(host).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let daemon = Daemon::start();
    // The descriptors of the daemon's on the TUN devices; a relay's socket is not told apart
    // from the pool's, so the devices stand for their launches.
    let tun_devices = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target == std::path::Path::new("/dev/net/tun"))
            .count()
    };
    let warm = daemon.client().await;
    warm.initialize(None).await.unwrap();
    let root = scratch_dir();
    let host = host.to_string();
    let script =
        format!("for i in $(seq {CONNECTIONS}); do bash -c \"$RAW\" \"$0\" \"$1\" & done; wait");
    let runs = (0..CLIENTS).map(|index| {
        let (daemon, root, script, host, port) = (&daemon, root.path(), &script, &host, &port);
        async move {
            let client = daemon.client().await;
            client.initialize(None).await.unwrap();
            let argv = ["bash", "-c", script.as_str(), host.as_str(), port.as_str()];
            let (id, domains) = (format!("many{index}"), json!({ host.as_str(): "allow" }));
            let start = transparent_start(&id, &argv, root, domains);
            client.call("process/start", start).await;
            let events = client.events_until_closed(&id).await;
            client.close().await;
            output_of(&events, None)
        }
    });
    let outputs = futures::future::join_all(runs).await;
    for output in &outputs {
        assert_eq!(output.matches(" 200 OK").count(), CONNECTIONS, "{output}");
    }
    assert_eq!(
        server.state.target_hits.load(Ordering::Relaxed),
        CLIENTS * CONNECTIONS
    );
    crate::common::eventually("the daemon holds no TUN device", || tun_devices() == 0).await;
}

/// A program that sends through transparent TCP faster than its destination reads (here: a
/// server on the host that accepts and never reads) is slowed by TCP's windows, as on a real
/// network: the daemon holds a window per connection, not what the program sent. (A stack
/// without flow control to the program held all of it: 440 MiB after 10 s.)
#[tokio::test]
async fn a_destination_that_never_reads_holds_no_more_than_a_window() {
    let host = host_address();
    let sink = std::net::TcpListener::bind((host, 0)).unwrap();
    let port = sink.local_addr().unwrap().port().to_string();
    let held = std::thread::spawn(move || sink.accept().map(|(stream, _)| stream));
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let host = host.to_string();
    let argv = [
        "bash",
        "-c",
        "head -c 2G /dev/zero > /dev/tcp/$0/$1",
        &host,
        &port,
    ];
    let domains = json!({ host.as_str(): "allow" });
    let start = transparent_start("flood", &argv, root.path(), domains);
    let before = crate::common::rss_kib(daemon.pid());
    client.call("process/start", start).await;
    let _connection = held.join().unwrap().unwrap();
    let mut most = before;
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        most = most.max(crate::common::rss_kib(daemon.pid()));
    }
    client
        .call("process/terminate", json!({"processId": "flood"}))
        .await;
    client.events_until_closed("flood").await;
    assert!(
        most - before < 48 * 1024,
        "the daemon grew by {} KiB while the program flooded",
        most - before
    );
}

/// On a host without `/dev/net/tun` (here: a daemon that sees an empty `/dev/net`, through a
/// mount in a namespace of its own), transparent TCP is not offered, and asked for anyway it is
/// refused at the start, before any sandbox is set up.
#[tokio::test]
async fn transparent_tcp_is_refused_where_the_host_has_no_tun() {
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs none /dev/net && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "ws://127.0.0.1:0"])
        .stdout(std::process::Stdio::piped());
    let daemon = Daemon::launch(command);
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", Value::Null).await;
    assert_eq!(info["capabilities"]["networkProxyLaunch"], true, "{info}");
    assert_eq!(info["capabilities"]["networkProxyTransparentTcp"], false);
    let root = scratch_dir();
    let start = transparent_start("t", &["true"], root.path(), json!({"*": "allow"}));
    let error = client.request("process/start", start).await.unwrap_err();
    assert_eq!(error["code"], -32602, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("no /dev/net/tun"), "{error}");
}

/// One process's transparent connections are capped (64 at once, as its bridge's relays): past
/// the cap a connection is closed at once, not left waiting; those under it are carried. Here
/// 80 at once to a server that accepts and never answers.
#[tokio::test]
async fn transparent_connections_past_the_cap_are_closed_at_once() {
    let host = host_address();
    let silent = std::net::TcpListener::bind((host, 0)).unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    let holding = std::thread::spawn(move || {
        let mut held = Vec::new();
        while held.len() < 64 {
            held.push(silent.accept().unwrap().0);
        }
        std::thread::sleep(std::time::Duration::from_secs(8));
    });
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.initialize(None).await.unwrap();
    let root = scratch_dir();
    let host = host.to_string();
    let script = "for i in $(seq 80); do ( exec 3<>/dev/tcp/$0/$1 && timeout 5 cat <&3; \
                  echo \" rc=$?\" ) & done; wait";
    let argv = ["bash", "-c", script, &host, &port];
    let domains = json!({ host.as_str(): "allow" });
    let start = transparent_start("many", &argv, root.path(), domains);
    client.call("process/start", start).await;
    let events = client.events_until_closed("many").await;
    let output = output_of(&events, Some("stdout"));
    assert_eq!(
        output.matches(" rc=124").count(),
        64,
        "carried, waiting: {output}"
    );
    assert_eq!(
        output.matches(" rc=0").count(),
        16,
        "closed past the cap: {output}"
    );
    holding.join().unwrap();
}
