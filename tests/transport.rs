//! The transport and envelope: HTTP routes, upgrade guards, frames, dialects, batches, limits,
//! stdio mode and shutdown.

mod common;

use common::*;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::io::{BufRead as _, Read as _, Write as _};
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _, Message};

fn http_status(daemon: &Daemon, path: &str) -> u16 {
    let addr = &daemon.url["ws://".len()..];
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn upgrade_status(url: &str, headers: &[(&'static str, &str)]) -> Result<(), u16> {
    let mut request = url.into_client_request().unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => Ok(()),
        Err(tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(other) => panic!("unexpected error {other}"),
    }
}

#[tokio::test]
async fn banner_is_one_ws_line_and_readyz_answers() {
    let daemon = Daemon::start();
    let rest = daemon.url.strip_prefix("ws://127.0.0.1:").unwrap();
    assert!(
        rest.parse::<u16>().unwrap() > 0,
        "port 0 picked a free port"
    );
    assert_eq!(http_status(&daemon, "/readyz"), 200);
}

#[tokio::test]
async fn browser_origins_are_refused() {
    let daemon = Daemon::start();
    assert_eq!(
        upgrade_status(&daemon.url, &[("Origin", "https://evil.example")]).await,
        Err(403)
    );
    assert_eq!(upgrade_status(&daemon.url, &[]).await, Ok(()));
}

#[tokio::test]
async fn the_connection_token_gates_upgrades_only() {
    let daemon = Daemon::start_with(&["--connection-token", "s3cret"], &[]);
    assert_eq!(http_status(&daemon, "/readyz"), 200);
    assert_eq!(upgrade_status(&daemon.url, &[]).await, Err(401));
    assert_eq!(
        upgrade_status(&daemon.url, &[("Authorization", "Bearer wrong")]).await,
        Err(401)
    );
    assert_eq!(
        upgrade_status(&daemon.url, &[("Authorization", "Bearer s3cret")]).await,
        Ok(())
    );
    let codex = Daemon::start_with(&[], &[("CODEX_EXEC_SERVER_CONNECTION_TOKEN", "t")]);
    assert_eq!(upgrade_status(&codex.url, &[]).await, Err(401));
    assert_eq!(
        upgrade_status(&codex.url, &[("Authorization", "Bearer t")]).await,
        Ok(())
    );
}

#[test]
fn an_empty_token_is_a_startup_error() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "ws://127.0.0.1:0", "--connection-token", ""])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("must not be empty"));
    assert!(output.stdout.is_empty());
}

#[test]
fn help_explains_every_flag() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--listen",
        "--connection-token",
        "--session-ttl",
        "--exited-retention",
        "--output-retention-bytes",
        "--log-format",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn bad_listen_urls_are_refused() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "ws://localhost:1"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("expected `ws://IP:PORT`"));
}

#[tokio::test]
async fn binary_frames_and_malformed_json() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    client.send_text("not-json").await;
    let error = client.next_unsolicited().await;
    assert_eq!(error["id"], -1);
    assert_eq!(error["error"]["code"], -32600);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "failed to parse websocket JSON-RPC message from exec-server websocket 127.0.0.1:"
        ),
        "{message}"
    );
    let init = json!({"id": 7, "method": "initialize", "params": {"clientName": "bin"}});
    client
        .send_message(Message::binary(init.to_string().into_bytes()))
        .await;
    let reply = client.next_unsolicited().await;
    assert_eq!(reply["id"], 7);
    assert!(uuid_like(reply["result"]["sessionId"].as_str().unwrap()));
    assert!(
        reply["result"].get("binaryPayloads").is_none(),
        "one message per line: stdio stays text"
    );
    client.send_text(r#"{"id":8,"method":7}"#).await;
    assert_eq!(client.next_unsolicited().await["error"]["code"], -32600);
    client
        .send_text(r#"{"id":{"x":1},"method":"process/read"}"#)
        .await;
    assert_eq!(client.next_unsolicited().await["error"]["code"], -32600);
}

fn uuid_like(text: &str) -> bool {
    text.len() == 36 && text.chars().filter(|&c| c == '-').count() == 4
}

#[tokio::test]
async fn strict_json_rpc_2_clients_get_the_member_back_everywhere() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let reply = client.raw_request(json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {"clientName": "strict"}})).await;
    assert_eq!(reply["jsonrpc"], "2.0");
    client
        .send_text(json!({"jsonrpc": "2.0", "method": "initialized"}).to_string())
        .await;
    let reply = client.raw_request(json!({"jsonrpc": "2.0", "id": 2, "method": "process/start", "params": start_params("p", &["true"])})).await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"processId": "p", "sandboxType": "none"}})
    );
    let notification = client.next_notification().await;
    assert_eq!(notification["jsonrpc"], "2.0");
    let codex = client
        .raw_request(json!({"id": 3, "method": "process/terminate", "params": {"processId": "p"}}))
        .await;
    assert!(
        codex.get("jsonrpc").is_none(),
        "a Codex-dialect request gets a Codex-dialect reply"
    );
    let wrong = client
        .raw_request(json!({"jsonrpc": "1.0", "id": 4, "method": "x"}))
        .await;
    assert_eq!(wrong["error"]["code"], -32600);
}

#[tokio::test]
async fn the_handshake_is_enforced() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let early = client
        .request("process/read", json!({"processId": "p"}))
        .await
        .unwrap_err();
    assert_eq!(
        early["message"],
        "client must call initialize before using process methods"
    );
    let bad = client
        .request("initialize", json!({"nope": 1}))
        .await
        .unwrap_err();
    assert_eq!(bad["code"], -32602);
    // Unknown notifications are ignored; the connection stays usable.
    client.notify("what/ever", json!({})).await;
    client.initialize(None).await.unwrap();
    client
        .call(
            "process/signal",
            json!({"processId": "x", "signal": "interrupt"}),
        )
        .await;

    let mut early_initialized = daemon.client().await;
    early_initialized.notify("initialized", json!({})).await;
    assert_eq!(
        early_initialized.next_unsolicited().await["error"]["message"],
        "received `initialized` notification before `initialize`"
    );
    early_initialized.wait_closed().await;
}

#[tokio::test]
async fn batches_run_together_and_reply_as_one_array() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client.send_text(json!([
        {"id": 1, "method": "process/terminate", "params": {"processId": "a"}},
        {"id": 2, "method": "process/write", "params": {"processId": "a", "chunk": "", "writeId": "w"}},
        {"method": "initialized"},
        {"id": 3, "method": "nope/nope"}
    ]).to_string()).await;
    let reply = client.next_unsolicited().await;
    assert_eq!(
        reply,
        json!([
            {"id": 1, "result": {"running": false}},
            {"id": 2, "result": {"status": "unknownProcess"}},
            {"id": -1, "error": {"code": -32600, "message": "notifications cannot be sent in a JSON-RPC batch"}},
            {"id": 3, "error": {"code": -32601, "message": "exec-server does not implement `nope/nope`"}}
        ])
    );
    client.send_text("[]").await;
    assert_eq!(
        client.next_unsolicited().await["error"]["message"],
        "JSON-RPC batch must not be empty"
    );
    let huge: Vec<Value> = (0..129)
        .map(|i| json!({"id": i, "method": "process/read", "params": {}}))
        .collect();
    client.send_text(Value::Array(huge).to_string()).await;
    assert_eq!(
        client.next_unsolicited().await["error"]["message"],
        "JSON-RPC batch contains 129 requests; maximum is 128"
    );
}

#[tokio::test]
async fn oversized_messages_get_an_error_then_a_close() {
    let daemon = Daemon::start_with(&["--max-message-bytes", "1000"], &[]);
    let (client, _) = daemon.session().await;
    let padding = "x".repeat(1500);
    client
        .send_text(
            json!({"id": 1, "method": "process/read", "params": {"processId": padding}})
                .to_string(),
        )
        .await;
    let error = client.next_unsolicited().await;
    assert_eq!(
        error["error"]["message"],
        "JSON-RPC message exceeds the limit of 1000 bytes"
    );
    client
        .call(
            "process/signal",
            json!({"processId": "still-alive", "signal": "interrupt"}),
        )
        .await;
    let (mut ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
    ws.send(Message::text("y".repeat(5000))).await.unwrap();
    let mut closed = false;
    while let Some(message) = ws.next().await {
        match message {
            Ok(Message::Close(frame)) => {
                closed = frame.map(|f| u16::from(f.code)) == Some(1009);
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        closed,
        "a message beyond twice the limit closes the WebSocket with 1009"
    );
}

#[tokio::test]
async fn the_daemon_pings() {
    let daemon = Daemon::start_with(&["--ping-interval", "100ms"], &[]);
    let (mut ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
    let ping = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(message)) = ws.next().await {
            if matches!(message, Message::Ping(_)) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ping, Ok(true));
}

#[tokio::test]
async fn sigterm_kills_every_process_and_exits_cleanly() {
    let mut daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("a", &["sh", "-c", "echo $$; sleep 60 & wait"]),
        )
        .await;
    let pid: i32 = String::from_utf8(unb64(&client.next_notification().await["params"]["chunk"]))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (detached, _) = daemon.session().await;
    detached
        .call(
            "process/start",
            start_params("b", &["sh", "-c", "echo $$; exec sleep 60"]),
        )
        .await;
    let other: i32 = String::from_utf8(unb64(
        &detached.next_notification().await["params"]["chunk"],
    ))
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    detached.abort();
    daemon.send_signal(libc::SIGTERM);
    let status = daemon
        .wait_exit(Duration::from_secs(10))
        .expect("daemon exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        !pid_alive(pid) && !pid_alive(other),
        "managed processes die with the daemon"
    );
}

#[test]
fn stdio_mode_serves_one_connection_and_exits_at_eof() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "stdio://"])
        .env("EXEC_SERVER_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(
        stdin,
        "{}",
        json!({"id": 1, "method": "initialize",
            "params": {"clientName": "stdio", "binaryPayloads": true}})
    )
    .unwrap();
    writeln!(stdin).unwrap();
    writeln!(stdin, "{}", json!({"method": "initialized"})).unwrap();
    writeln!(stdin, "{}", json!({"id": 2, "method": "process/start", "params": start_params("s", &["sh", "-c", "echo $$; exec sleep 60"])})).unwrap();
    stdout.read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert!(uuid_like(reply["result"]["sessionId"].as_str().unwrap()));
    assert!(
        reply["result"].get("binaryPayloads").is_none(),
        "one message per line: stdio stays text"
    );
    let mut pid = None;
    while pid.is_none() {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        if value["method"] == "process/output" {
            pid = String::from_utf8(unb64(&value["params"]["chunk"]))
                .unwrap()
                .trim()
                .parse::<i32>()
                .ok();
        }
    }
    writeln!(stdin, "not json").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let error: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(error["id"], -1);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("failed to parse JSON-RPC message from stdio"));
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success());
    assert!(
        !pid_alive(pid.unwrap()),
        "EOF ends the connection and kills its processes"
    );
}
