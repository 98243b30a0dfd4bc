//! Attacks on the envd listener, against the real binary over loopback sockets: slow and silent
//! connections (slowloris), one peer holding every place, a sandbox on the host network
//! reaching the listener. Its HTTP phase is bounded as a WebSocket listener's is.

use crate::common::*;
use crate::hardening_listeners::{closed_after, stalled};
use crate::metrics::free_port;
use crate::sandbox_support::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const LIST: &[u8] = b"POST /process.Process/List HTTP/1.1\r\nHost: x\r\n\
Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/// A daemon with an envd listener on a free loopback port, and that port's address.
fn envd_daemon(args: &[&str]) -> (Daemon, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let mut all = vec!["--envd-listen", &address];
    all.extend(args);
    (Daemon::start_with(&all, &[]), address)
}

/// `LIST` sent on a new connection from `from`: whether it was answered 200 in time.
async fn listed(from: &str, address: &str) -> bool {
    let mut stream = stalled(from, address, LIST).await;
    let mut reply = [0; 12];
    let read = tokio::time::timeout(TIMEOUT, stream.read_exact(&mut reply)).await;
    matches!(read, Ok(Ok(_))) && reply.ends_with(b"200")
}

#[tokio::test]
async fn slow_and_silent_connections_block_no_one_and_are_closed() {
    let (_daemon, address) = envd_daemon(&["--upgrade-timeout", "2s"]);
    let slow = stalled(
        "127.0.0.1",
        &address,
        b"POST /process.Process/List HTTP/1.1\r\nHo",
    )
    .await;
    let silent = stalled("127.0.0.1", &address, b"").await;
    let h2 = stalled("127.0.0.1", &address, b"PRI * HTTP/2.0\r\n").await;
    // Meanwhile, the others are served.
    assert!(listed("127.0.0.2", &address).await);
    assert!(listed("127.0.0.1", &address).await);
    // Each is closed at its deadline, not before.
    let names = ["slow", "silent", "h2 preface"];
    let closed = futures::future::join_all(
        [slow, silent, h2].map(|stream| closed_after(stream, Duration::from_secs(6))),
    )
    .await;
    for (name, closed) in names.iter().zip(closed) {
        assert!(
            closed.is_some_and(|after| after >= Duration::from_secs(1)),
            "{name}: closed after {closed:?}, 2 s after it opened expected"
        );
    }
    // A keep-alive connection whose second request stalls gets the same deadline.
    let mut kept = stalled("127.0.0.1", &address, LIST).await;
    let mut reply = [0; 12];
    kept.read_exact(&mut reply).await.unwrap();
    assert!(reply.ends_with(b"200"));
    kept.write_all(b"POST /process.Process/List HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let closed = closed_after(kept, Duration::from_secs(6)).await;
    assert!(closed.is_some(), "the stalled second request is closed");
}

#[tokio::test]
async fn one_peer_holds_no_more_than_its_share_of_places() {
    let (_daemon, address) = envd_daemon(&[
        "--max-pending-connections",
        "8",
        "--max-pending-connections-per-peer",
        "2",
    ]);
    let mut attack = Vec::new();
    for _ in 0..6 {
        attack.push(stalled("127.0.0.2", &address, b"POST / HTTP/1.1\r\n").await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        listed("127.0.0.3", &address).await,
        "another peer is served"
    );
    let closed = futures::future::join_all(
        (attack.into_iter()).map(|stream| closed_after(stream, Duration::from_millis(500))),
    )
    .await;
    let open = closed.iter().filter(|closed| closed.is_none()).count();
    assert_eq!(open, 2, "the attacker keeps its share only");
    // A connection past its first request holds no place: a peer's long streams never
    // lock it out.
    let mut served = Vec::new();
    for _ in 0..4 {
        let mut stream = stalled("127.0.0.4", &address, LIST).await;
        let mut reply = [0; 12];
        stream.read_exact(&mut reply).await.unwrap();
        served.push(stream);
    }
    assert!(listed("127.0.0.4", &address).await);
}

/// A sandbox on the host network must not run commands outside it through the envd listener,
/// which would run them unsandboxed, as root.
#[tokio::test]
async fn a_network_enabled_sandbox_cannot_drive_the_envd_listener() {
    let (daemon, address) = envd_daemon(&[]);
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let target = d.out("pwned");
    let port = address.rsplit(':').next().unwrap();
    let body = format!(
        r#"
import ctypes, errno, json, os, socket, struct
{PY_ATTEMPT}
def attack():
    message = json.dumps({{"process": {{"cmd": "/bin/sh", "args": ["-c", "echo x > {target}"]}}}}).encode()
    body = b'\x00' + struct.pack('>I', len(message)) + message
    head = ("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n" % len(body))
    s = socket.create_connection(('127.0.0.1', {port}), timeout=5)
    s.sendall(head.encode() + body)
    reply = b''
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        reply += chunk
    print('reply', reply[:80])
attempt('envd', attack)
"#,
        target = target.display(),
    );
    let sandbox = workspace_write(&d.ws, "enabled");
    let outcome = py(&client, "envd", &d.ws, &sandbox, &body).await;
    assert!(!outcome.output.contains("200 OK"), "{outcome:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!target.exists(), "the daemon ran the sandbox's command");
    d.assert_outside_untouched();
    // The host is still served.
    assert!(listed("127.0.0.1", &address).await);
}
