//! Attacks on the daemon's listeners and on its descriptors, each performed against the real
//! binary over loopback sockets: idle connections to the metrics port, a sandbox reaching it,
//! one peer holding every place of the HTTP phase, one client starting processes without end.

use crate::common::*;
use crate::metrics::{free_port, http_get};
use crate::sandbox_support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Connects to `to` from the loopback address `from` (e.g. `127.0.0.2`: another peer) and sends
/// `opening`, then nothing. The daemon may already have closed it: the write may fail.
pub(crate) async fn stalled(from: &str, to: &str, opening: &[u8]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let to: SocketAddr = to.parse().unwrap();
    let mut stream = tokio::time::timeout(TIMEOUT, socket.connect(to))
        .await
        .expect("connect in time")
        .unwrap();
    let _ = stream.write_all(opening).await;
    stream
}

/// Half an upgrade request.
const HALF_UPGRADE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n";

/// When the daemon closed `stream` (EOF or reset), if within `wait`.
pub(crate) async fn closed_after(
    mut stream: tokio::net::TcpStream,
    wait: Duration,
) -> Option<Duration> {
    let begun = tokio::time::Instant::now();
    let mut buffer = [0; 1024];
    tokio::time::timeout(wait, async {
        while let Ok(1..) = stream.read(&mut buffer).await {}
    })
    .await
    .ok()
    .map(|()| begun.elapsed())
}

/// How many of `streams` the daemon left open for `wait` (all waited on at once).
pub(crate) async fn still_open(streams: Vec<tokio::net::TcpStream>, wait: Duration) -> usize {
    let closed =
        futures::future::join_all(streams.into_iter().map(|stream| closed_after(stream, wait)))
            .await;
    closed.iter().filter(|closed| closed.is_none()).count()
}

fn address(url: &str) -> &str {
    url.split_once("://").unwrap().1
}

/// A session made on a fresh connection, within a deadline (a daemon out of descriptors never
/// answers the upgrade).
async fn fresh_session(daemon: &Daemon) -> Client {
    let client = tokio::time::timeout(TIMEOUT, daemon.client())
        .await
        .expect("a new connection is served in time");
    client.initialize(None).await.expect("initialize");
    client
}

/// Item 8: 300 idle connections to `--metrics-listen` of a daemon allowed 256 descriptors took
/// them all: no new client connected, no process started. They now get the main port's places
/// and deadline.
#[tokio::test]
async fn idle_metrics_connections_cannot_exhaust_descriptors_and_are_timed_out() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = daemon_with_fd_limits(
        &["--metrics-listen", &metrics, "--upgrade-timeout", "3s"],
        256,
        256,
    );
    let (client, _) = daemon.session().await;
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(stalled("127.0.0.1", &metrics, b"").await);
    }
    // Let the daemon accept what it will.
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .call("process/start", start_params("p", &["echo", "hi"]))
        .await;
    assert_eq!(output_of(&client.events_until_closed("p").await), b"hi\n");
    let other = fresh_session(&daemon).await;
    other
        .call("process/start", start_params("q", &["true"]))
        .await;
    let closed = futures::future::join_all(
        idle.into_iter()
            .map(|stream| closed_after(stream, Duration::from_secs(10))),
    )
    .await;
    assert!(
        closed.iter().all(Option::is_some),
        "{} of 300 idle metrics connections still open after 10 s",
        closed.iter().filter(|closed| closed.is_none()).count()
    );
    let (status, body) = http_get(&metrics, "/metrics", None);
    assert_eq!(status, 200, "{body}");
}

/// Item 9: a sandbox with network enabled reached `--metrics-listen` (and could hold hundreds of
/// connections there); a managed network could bridge to it. Both are refused now, as on the
/// main port.
#[tokio::test]
async fn a_network_enabled_sandbox_cannot_reach_the_metrics_port() {
    let metrics_port = free_port();
    let daemon = Daemon::start_with(
        &["--metrics-listen", &format!("127.0.0.1:{metrics_port}")],
        &[],
    );
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let probe = format!(
        r#"
import socket
held = []
for i in range(20):
    s = socket.create_connection(('127.0.0.1', {metrics_port}), timeout=5)
    held.append(s)
s = held[0]
try:
    s.sendall(b'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
    reply = b''
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        reply += chunk
    print('reply', len(reply), reply[:40])
except OSError as e:
    print('reply ERR', e)
closed = 0
for s in held[1:]:
    s.settimeout(1)
    try:
        closed += s.recv(1) == b''
    except TimeoutError:
        pass
    except OSError:
        closed += 1
print('closed', closed)
"#
    );
    let outcome = py(&client, "metrics", &d.ws, &sandbox, &probe).await;
    assert!(!outcome.output.contains("200 OK"), "{outcome:?}");
    assert!(
        outcome.output.contains("reply 0 ") || outcome.output.contains("reply ERR"),
        "{outcome:?}"
    );
    assert!(outcome.output.contains("closed 19"), "{outcome:?}");
    // The host still scrapes it.
    let (status, _) = http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics", None);
    assert_eq!(status, 200);
    // No managed network may bridge to it either.
    let mut bridged = params(
        "bridged",
        &["true"],
        &d.ws,
        workspace_write(&d.ws, "restricted"),
    );
    bridged["enforceManagedNetwork"] = json!(true);
    bridged["managedNetwork"] =
        json!({"loopbackPorts": [metrics_port], "allowLocalBinding": false});
    let error = client.request("process/start", bridged).await.unwrap_err();
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("own listener"),
        "{error}"
    );
}

/// Item 10: one unauthenticated peer held every place of the HTTP phase (256) with half-sent
/// requests, so no new connection, and no resume, got in. Now one peer gets its share only.
#[tokio::test]
async fn one_peer_with_stalled_requests_locks_out_no_one() {
    // Enough descriptors for the default caps to be 512 places, a quarter (128) per peer.
    let daemon = daemon_with_fd_limits(&[], 4096, 4096);
    let (client, session) = daemon.session().await;
    client
        .call("process/start", start_params("p", &["echo", "before"]))
        .await;
    client.close().await;
    let mut attack = Vec::new();
    for _ in 0..300 {
        attack.push(stalled("127.0.0.2", address(&daemon.url), HALF_UPGRADE).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resumed = tokio::time::timeout(TIMEOUT, daemon.resume(&session))
        .await
        .expect("resumed in time");
    let (output, _) = read_all(&resumed, "p").await;
    assert_eq!(output, b"before\n");
    fresh_session(&daemon).await;
    // The attacker's share stays open (until the upgrade timeout); the excess was closed.
    let open = still_open(attack, Duration::from_secs(1)).await;
    assert_eq!(open, 128, "the default per-peer share");
}

/// `count` half-sent upgrades to `daemon` from `from`, all connecting at once.
async fn half_sent_upgrades(
    daemon: &Daemon,
    from: &str,
    count: usize,
) -> Vec<tokio::net::TcpStream> {
    let to = address(&daemon.url);
    futures::future::join_all((0..count).map(|_| stalled(from, to, HALF_UPGRADE))).await
}

/// Issue 41, item 9: `count` half-sent upgrades from one address, then a client from that same
/// address (behind a NAT or a proxy every client is one peer): it is served within two seconds,
/// the attacker's oldest pending connections closed to make room instead of the newcomer
/// refused; the attacker keeps no more than `share` pending connections.
async fn a_new_client_displaces_half_sent_upgrades(daemon: Daemon, count: usize, share: usize) {
    let attack = half_sent_upgrades(&daemon, "127.0.0.1", count).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let begun = std::time::Instant::now();
    let client = tokio::time::timeout(Duration::from_secs(2), async {
        let client = daemon.client().await;
        client.initialize(None).await.expect("initialize");
        client
    })
    .await
    .expect("a new client from the attacker's address is served within 2 s");
    client
        .call("process/start", start_params("p", &["echo", "in"]))
        .await;
    assert_eq!(output_of(&client.events_until_closed("p").await), b"in\n");
    let served = begun.elapsed();
    let open = still_open(attack, Duration::from_secs(1)).await;
    assert!(
        open <= share,
        "{open} of {count} half-sent upgrades still open"
    );
    eprintln!("served in {served:?}; {open} of {count} half-sent upgrades still pending");
}

#[tokio::test]
async fn half_sent_upgrades_from_one_address_yield_to_a_new_client() {
    // 20,000 descriptors: the default caps, 1024 places, 256 per peer.
    let daemon = daemon_with_fd_limits(&[], 20_000, 20_000);
    a_new_client_displaces_half_sent_upgrades(daemon, 1_200, 256).await;
}

#[tokio::test]
async fn half_sent_upgrades_yield_to_a_new_client_under_1024_descriptors() {
    // 128 places, 32 per peer; 1,100 connections are more than the daemon's descriptors.
    let daemon = daemon_with_fd_limits(&[], 1024, 1024);
    a_new_client_displaces_half_sent_upgrades(daemon, 1_100, 32).await;
}

/// Item 10: once more than half of the places are taken, a stalled connection is closed after a
/// quarter of `--upgrade-timeout`, not the whole.
#[tokio::test]
async fn under_pressure_stalled_connections_get_a_shorter_deadline() {
    // 256 descriptors: 32 places, 8 per peer.
    let daemon = daemon_with_fd_limits(&["--upgrade-timeout", "8s"], 256, 256);
    let mut pressure = Vec::new();
    for peer in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..8 {
            pressure.push(stalled(peer, address(&daemon.url), HALF_UPGRADE).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = stalled("127.0.0.5", address(&daemon.url), HALF_UPGRADE).await;
    let closed = closed_after(late, Duration::from_secs(7)).await;
    assert!(
        closed.is_some_and(|after| after >= Duration::from_secs(1)),
        "closed after {closed:?}: a quarter of 8 s expected"
    );
    // Those admitted before the pressure keep the whole deadline.
    let first = pressure.remove(0);
    assert_eq!(closed_after(first, Duration::from_millis(100)).await, None);
}

/// Item 10 on a Unix socket: places count per uid, so stalled requests of the daemon's own uid
/// lock out no allowed one.
#[tokio::test]
async fn on_a_unix_socket_one_uid_locks_out_no_other() {
    use crate::unix_socket::{ready_as, shared_dir, unix_daemon};
    let (_dir, binary, socket) = shared_dir();
    let daemon = unix_daemon(&socket, &["--allow-uid", "1234"]);
    let mut stalled = Vec::new();
    for _ in 0..300 {
        let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let _ = stream.write_all(HALF_UPGRADE).await;
        stalled.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready_as(&binary, 1234, &daemon.url), 0, "an allowed uid");
}

/// The error of a `process/start` refused by a cap, with its message.
async fn refused_start(client: &Client, id: &str) -> Value {
    let error = client
        .request("process/start", start_params(id, &["sleep", "60"]))
        .await
        .expect_err("refused");
    assert_eq!(error["code"], -32600, "{error}");
    error
}

/// Item 13: one client started processes until the daemon had no descriptors left (here: 256),
/// failing everyone else's starts and connections. Now the caps refuse it first, with an error
/// naming the cap, and the daemon keeps descriptors for connections.
#[tokio::test]
async fn process_caps_keep_descriptors_for_everyone_else() {
    let daemon = daemon_with_fd_limits(&[], 256, 256);
    let mut attackers = Vec::new();
    let mut started = 0;
    'attack: for session in 0..8 {
        let attacker = fresh_session(&daemon).await;
        for n in 0..40 {
            let id = format!("s{session}-{n}");
            match attacker
                .request("process/start", start_params(&id, &["sleep", "60"]))
                .await
            {
                Ok(_) => started += 1,
                Err(error) => {
                    let message = error["message"].as_str().unwrap();
                    assert_eq!(error["code"], -32600, "{error}");
                    if error["data"]["limit"] == "maxProcesses" {
                        assert!(message.contains("--max-processes allows"), "{error}");
                        attackers.push(attacker);
                        break 'attack;
                    }
                    assert_eq!(error["data"]["limit"], "maxProcessesPerSession", "{error}");
                    assert!(
                        message.contains("this session has 4 live processes"),
                        "{error}"
                    );
                    break;
                }
            }
        }
        attackers.push(attacker);
    }
    assert_eq!(started, 16);
    // Everyone else still connects and works; only starting waits for a place.
    let other = fresh_session(&daemon).await;
    let info = other.call("environment/info", json!({})).await;
    // Half of 256 descriptors, eight per process; a quarter of that per session.
    assert_eq!(
        info["limits"],
        json!({"maxProcesses": 16, "maxProcessesPerSession": 4}),
        "{info}"
    );
    let error = refused_start(&other, "x").await;
    assert_eq!(error["data"]["limit"], "maxProcesses", "{error}");
    // A place frees once a process's tree is gone.
    attackers[0]
        .call("process/terminate", json!({"processId": "s0-0"}))
        .await;
    attackers[0].events_until_closed("s0-0").await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while other
        .request("process/start", start_params("y", &["echo", "in"]))
        .await
        .is_err()
    {
        assert!(tokio::time::Instant::now() < deadline, "a place freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(output_of(&other.events_until_closed("y").await), b"in\n");
}

/// Item 13: exited processes kept for reading hold no place; the caps count live ones only.
#[tokio::test]
async fn exited_processes_do_not_count_against_the_caps() {
    let daemon = Daemon::start_with(
        &[
            "--max-processes-per-session",
            "2",
            "--exited-retention",
            "1h",
        ],
        &[],
    );
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", json!({})).await;
    assert_eq!(info["limits"]["maxProcessesPerSession"], 2, "{info}");
    for n in 0..6 {
        let id = format!("t{n}");
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        // The place of the one before frees when its supervisor reports its tree gone, which
        // may come just after its last event.
        while let Err(error) = client
            .request("process/start", start_params(&id, &["true"]))
            .await
        {
            assert!(tokio::time::Instant::now() < deadline, "{error}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        client.events_until_closed(&id).await;
    }
    client
        .call("process/start", start_params("a", &["sleep", "60"]))
        .await;
    client
        .call("process/start", start_params("b", &["sleep", "60"]))
        .await;
    let error = refused_start(&client, "c").await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("--max-processes-per-session"),
        "{error}"
    );
    // Another session has its own share.
    let (other, _) = daemon.session().await;
    other
        .call("process/start", start_params("a", &["sleep", "60"]))
        .await;
}
