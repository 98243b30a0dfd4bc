//! Hostile input of every kind gets a clear JSON-RPC error; the daemon never panics, leaks a
//! process, or leaves a zombie.

use crate::common;

use common::*;
use exec_server_protocol::methods::REQUESTS as METHODS;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn hostile_params() -> Vec<Value> {
    vec![
        Value::Null,
        json!([]),
        json!("string"),
        json!(1e308),
        json!({"processId": 12}),
        json!({"processId": "p", "argv": "sh", "cwd": "file:///", "env": {}, "tty": false}),
        json!({"processId": "p", "argv": ["true"], "cwd": "file:///..%2F..%2Fetc", "env": {}, "tty": false}),
        json!({"processId": "p", "argv": ["true"], "cwd": "file:///tmp?x=1", "env": {}, "tty": false}),
        json!({"processId": "p", "argv": ["true"], "cwd": "file:///tmp", "env": {"A": 1}, "tty": false}),
        json!({"processId": "p", "argv": ["a\u{0}b"], "cwd": "file:///tmp", "env": {}, "tty": false}),
        json!({"processId": "p", "afterSeq": -1}),
        json!({"processId": "p", "afterSeq": u64::MAX, "maxBytes": 0, "waitMs": 0}),
        json!({"processId": "p", "chunk": "====", "writeId": "x"}),
        json!({"processId": "p", "signal": "SIGKILL"}),
        json!({"processId": "p", "rows": 70000, "cols": 1}),
        json!({"processId": "\u{202e}/../../etc", "argv": ["true"], "cwd": "file:///", "env": {}, "tty": false}),
    ]
}

#[tokio::test]
async fn hostile_params_get_errors_and_the_daemon_survives() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut id = 1000;
    for method in METHODS {
        for params in hostile_params() {
            id += 1;
            let reply = client
                .raw_request(json!({"id": id, "method": method, "params": params}))
                .await;
            assert_eq!(reply["id"], id);
            if let Some(error) = reply.get("error") {
                let code = error["code"].as_i64().unwrap();
                assert!(
                    [-32600, -32601, -32602, -32603, -32010].contains(&code),
                    "{method} {params}: {reply}"
                );
                assert!(!error["message"].as_str().unwrap().is_empty());
            }
        }
    }
    // Deep nesting, huge numbers, invalid UTF-8 in a binary frame, and odd envelopes.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    client.send_text(deep).await;
    assert_eq!(client.next_unsolicited().await["id"], -1);
    client
        .send_message(Message::binary(vec![0xff, 0xfe, b'{']))
        .await;
    assert_eq!(client.next_unsolicited().await["error"]["code"], -32600);
    for odd in [
        r#"{"id":1}"#,
        r#"{"id":1.5,"method":"process/read"}"#,
        r#"{"method":null}"#,
        "42",
        r#""text""#,
    ] {
        client.send_text(odd).await;
        assert_eq!(
            client.next_unsolicited().await["error"]["code"],
            -32600,
            "{odd}"
        );
    }
    // Still serving, with no process started by any of the above.
    client
        .call("process/start", start_params("alive", &["true"]))
        .await;
    client.events_until_closed("alive").await;
    // A sandboxed `fs/*` call's helper may still be exiting just after its reply: gone soon,
    // unlike anything a hostile call could have left running.
    eventually("no child left behind", || {
        workload_children_of(daemon.pid()).is_empty()
    })
    .await;
}

#[tokio::test]
async fn finished_processes_leave_no_zombies() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    for i in 0..20 {
        let id = format!("z{i}");
        client
            .call("process/start", start_params(&id, &["sh", "-c", "exit 3"]))
            .await;
    }
    for i in 0..20 {
        client.events_until_closed(&format!("z{i}")).await;
    }
    let mut tty = start_params("pty", &["true"]);
    tty["tty"] = json!(true);
    client.call("process/start", tty).await;
    client.events_until_closed("pty").await;
    eventually("every child is reaped", || {
        workload_children_of(daemon.pid()).is_empty()
    })
    .await;
}

/// VmHWM (peak resident set) of `pid`, in MiB.
/// A memory figure of `/proc/PID/status` (`VmHWM`, `VmRSS`), in MiB.
fn status_mib(pid: i32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// A client that floods the daemon with requests whose replies it never reads: large
/// `fs/readFile` replies, then many small requests. The daemon holds no more than its
/// outbound budget for it and stops reading it, so its memory stays bounded, and another
/// client is answered promptly meanwhile. When the client leaves, the memory is returned.
#[tokio::test]
async fn a_client_that_never_reads_its_replies_cannot_grow_the_daemon() {
    use futures::SinkExt as _;
    let daemon = Daemon::start();
    let (other, _) = daemon.session().await;
    let before = status_mib(daemon.pid(), "VmRSS");
    let dir = scratch_dir();
    let file = dir.path().join("eight-mib");
    std::fs::write(&file, vec![7u8; 8 << 20]).unwrap();
    let addr: std::net::SocketAddr = daemon.url["ws://".len()..].parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(daemon.url.as_str(), tcp)
        .await
        .unwrap();
    // The reading half is never polled.
    let (mut sink, never_read) = futures::StreamExt::split(ws);
    let path = file_uri(&file);
    let attacker = tokio::spawn(async move {
        let mut messages = vec![
            json!({"id": 0, "method": "initialize", "params": {"clientName": "flood"}}),
            json!({"method": "initialized", "params": {}}),
        ];
        messages.extend(
            (1..=40).map(|id| json!({"id": id, "method": "fs/readFile", "params": {"path": path}})),
        );
        messages.extend(
            (100..40_000).map(|id| json!({"id": id, "method": "environment/info", "params": {}})),
        );
        for message in messages {
            // Blocks for good once the daemon stops reading this connection.
            if sink.send(Message::text(message.to_string())).await.is_err() {
                return;
            }
        }
    });
    let started = std::time::Instant::now();
    let mut slowest = std::time::Duration::ZERO;
    while started.elapsed() < std::time::Duration::from_secs(4) {
        let asked = std::time::Instant::now();
        other.call("environment/info", json!({})).await;
        slowest = slowest.max(asked.elapsed());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let peak = status_mib(daemon.pid(), "VmHWM");
    attacker.abort();
    eprintln!("peak RSS {peak:.0} MiB; slowest environment/info {slowest:?}");
    assert!(peak < 150.0, "the daemon peaked at {peak:.0} MiB");
    assert!(
        slowest < std::time::Duration::from_secs(1),
        "environment/info took {slowest:?} meanwhile"
    );
    let _ = attacker.await;
    drop(never_read);
    // Back within half of what the attack added.
    let returned = |rss: f64| rss < before + (peak - before) / 2.0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut rss = status_mib(daemon.pid(), "VmRSS");
    while !returned(rss) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        rss = status_mib(daemon.pid(), "VmRSS");
    }
    eprintln!("RSS before {before:.0} MiB, after the client left {rss:.0} MiB");
    assert!(
        returned(rss),
        "{rss:.0} MiB still resident after the client left (peak {peak:.0})"
    );
}

#[tokio::test]
async fn over_long_ids_are_invalid_params() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let long = "p".repeat(1 << 20);
    let mut start = start_params(&long, &["true"]);
    let error = client
        .request("process/start", start.clone())
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32602, "{error}");
    assert_eq!(
        error["message"],
        "processId is 1048576 bytes long; the limit is 256 bytes"
    );
    let just_fits = "p".repeat(256);
    start["processId"] = json!(just_fits);
    client.call("process/start", start).await;
    client.events_until_closed(&just_fits).await;
    for (method, params) in [
        ("process/read", json!({"processId": long})),
        (
            "process/write",
            json!({"processId": "p", "writeId": long, "chunk": ""}),
        ),
        (
            "fs/readBlock",
            json!({"handleId": long, "offset": 0, "len": 1}),
        ),
        ("fs/unwatch", json!({"watchId": long})),
        (
            "http/request",
            json!({"method": "GET", "url": "http://127.0.0.1:1/", "requestId": long}),
        ),
    ] {
        let error = client.request(method, params).await.unwrap_err();
        assert_eq!(error["code"], -32602, "{method}: {error}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .ends_with("the limit is 256 bytes"),
            "{method}: {error}"
        );
    }
}
