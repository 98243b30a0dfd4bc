//! Hostile input of every kind gets a clear JSON-RPC error; the daemon never panics, leaks a
//! process, or leaves a zombie.

mod common;

use common::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const METHODS: &[&str] = &[
    "initialize",
    "process/start",
    "process/read",
    "process/write",
    "process/signal",
    "process/terminate",
    "process/resize",
    "process/closeStdin",
];

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
    assert_eq!(children_of(daemon.pid()).len(), 0, "no child left behind");
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
        children_of(daemon.pid()).is_empty()
    })
    .await;
}
