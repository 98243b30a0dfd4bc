//! The transport and envelope: HTTP routes, upgrade guards, frames, dialects, batches, limits,
//! stdio mode and shutdown.

use crate::common;

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

/// The stderr of a daemon that must refuse to start with `args`.
fn startup_error(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "ws://127.0.0.1:0"])
        .args(args)
        .env(STATE_DIR_VAR, "none")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_empty_token_is_a_startup_error() {
    assert!(startup_error(&["--connection-token", ""]).contains("must not be empty"));
}

fn token_file(dir: &tempfile::TempDir, text: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.path().join("token");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_token_file_keeps_the_token_off_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = token_file(&dir, "s3cret-in-a-file\n", 0o600);
    let daemon = Daemon::start_with(&["--connection-token-file", &path], &[]);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", daemon.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("s3cret"));
    assert_eq!(upgrade_status(&daemon.url, &[]).await, Err(401));
    let client = Client::connect_with_token(&daemon.url, "s3cret-in-a-file").await;
    client.initialize(None).await.unwrap();
    client
        .call("process/start", start_params("p", &["echo", "hi"]))
        .await;
    assert_eq!(output_of(&client.events_until_closed("p").await), b"hi\n");
}

#[test]
fn token_files_open_to_others_empty_or_missing_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = token_file(&dir, "t", 0o640);
    let error = startup_error(&["--connection-token-file", &path]);
    assert!(
        error.contains(&format!("--connection-token-file {path} has mode 640, so group or others may access it; run `chmod 600 {path}`")),
        "{error}"
    );
    let path = token_file(&dir, "\n", 0o600);
    let error = startup_error(&["--connection-token-file", &path]);
    assert!(
        error.contains(&format!(
            "--connection-token-file {path} holds no token (it is empty or only whitespace)"
        )),
        "{error}"
    );
    let missing = dir.path().join("missing");
    let error = startup_error(&["--connection-token-file", missing.to_str().unwrap()]);
    assert!(
        error.contains("cannot read --connection-token-file"),
        "{error}"
    );
}

#[tokio::test]
async fn a_token_on_the_command_line_is_warned_about() {
    let mut command = Daemon::command(
        env!("CARGO_BIN_EXE_exec-server"),
        &["--connection-token", "t"],
        &[],
    );
    command.stderr(std::process::Stdio::piped());
    let mut daemon = Daemon::launch(command);
    let stderr = daemon.take_stderr().unwrap();
    drop(daemon);
    let mut logs = String::new();
    std::io::BufReader::new(stderr)
        .read_to_string(&mut logs)
        .unwrap();
    assert!(
        logs.contains("use --connection-token-file instead"),
        "{logs}"
    );
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let daemon = Daemon::start_with(&["--connection-token", "s3cret"], &[]);
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let value = format!("{scheme} s3cret");
        assert_eq!(
            upgrade_status(&daemon.url, &[("Authorization", &value)]).await,
            Ok(()),
            "{value}"
        );
    }
    for value in ["Basic s3cret", "bearers3cret", "bearer s3cre"] {
        assert_eq!(
            upgrade_status(&daemon.url, &[("Authorization", value)]).await,
            Err(401),
            "{value}"
        );
    }
}

/// Sets this process's soft limit of open files to its hard limit (many sockets ahead).
fn raise_own_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// Opens a TCP connection that sends half an HTTP upgrade request, then nothing.
async fn half_sent_upgrade(daemon: &Daemon) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let mut stream = tokio::net::TcpStream::connect(&daemon.url["ws://".len()..])
        .await
        .unwrap();
    // The daemon may already have closed it (over the cap): the write may then fail.
    let _ = stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
        .await;
    stream
}

/// Whether the daemon closes `stream` within `wait`.
async fn closed_within(mut stream: tokio::net::TcpStream, wait: Duration) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buffer = [0; 1024];
    tokio::time::timeout(wait, async {
        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
            let _ = n;
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn half_sent_upgrades_are_closed_after_the_upgrade_timeout() {
    raise_own_fd_limit();
    // Soft and hard limit alike, so only the daemon's own caps keep it from running out.
    let daemon = daemon_with_fd_limits(&["--upgrade-timeout", "2s"], 1024, 1024);
    let (client, _) = daemon.session().await;
    let mut stalled = Vec::new();
    for _ in 0..1000 {
        stalled.push(half_sent_upgrade(&daemon).await);
    }
    client
        .call("process/start", start_params("p", &["echo", "hi"]))
        .await;
    assert_eq!(output_of(&client.events_until_closed("p").await), b"hi\n");
    let closed = futures::future::join_all(
        stalled
            .into_iter()
            .map(|stream| closed_within(stream, Duration::from_secs(10))),
    )
    .await;
    assert!(closed.iter().all(|&closed| closed), "all closed in time");
    let (fresh, _) = daemon.session().await;
    fresh
        .call("process/start", start_params("q", &["true"]))
        .await;
}

/// Past the cap, the oldest pending connection makes room for the new one (issue 41, item 9):
/// the places stay 4, and the newcomer keeps its own.
#[tokio::test]
async fn connections_beyond_the_pending_cap_close_the_oldest_at_once() {
    let daemon = Daemon::start_with(
        &[
            "--max-pending-connections",
            "4",
            "--max-pending-connections-per-peer",
            "4",
            "--upgrade-timeout",
            "60s",
        ],
        &[],
    );
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(half_sent_upgrade(&daemon).await);
    }
    let newest = half_sent_upgrade(&daemon).await;
    let oldest = stalled.remove(0);
    assert!(closed_within(oldest, Duration::from_secs(5)).await);
    for held in stalled.into_iter().chain([newest]) {
        assert!(!closed_within(held, Duration::from_millis(200)).await);
    }
    // And a new client is served.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while upgrade_status_or_closed(&daemon.url).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether an upgrade succeeds; Err when the daemon closed the connection instead.
async fn upgrade_status_or_closed(url: &str) -> Result<(), tungstenite::Error> {
    tokio_tungstenite::connect_async(url).await.map(|_| ())
}

#[tokio::test]
async fn the_daemon_raises_its_open_file_limit_to_the_hard_limit() {
    let daemon = daemon_with_fd_limits(&[], 256, 4096);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.pid())).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["4096", "4096"], "{line}");
}

#[tokio::test]
async fn request_ids_in_flight_must_be_unique() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call("process/start", start_params("p", &["sleep", "30"]))
        .await;
    let read = json!({"id": 7, "method": "process/read",
        "params": {"processId": "p", "afterSeq": 0, "waitMs": 1000}});
    for _ in 0..3 {
        client.send_text(read.to_string()).await;
    }
    let duplicate = json!({"id": 7, "error": {"code": -32600,
        "message": "request id 7 is already in flight on this connection"}});
    assert_eq!(client.next_unsolicited().await, duplicate);
    assert_eq!(client.next_unsolicited().await, duplicate);
    let first = client.next_unsolicited().await;
    assert_eq!(first["id"], 7);
    assert!(first["result"]["chunks"].is_array(), "{first}");
    // Answered, the id is free again; a (JSON-RPC 2.0) batch is held to the same rule.
    let mut read = read;
    read["jsonrpc"] = json!("2.0");
    client.send_text(json!([read, read]).to_string()).await;
    let batch = client.next_unsolicited().await;
    assert!(batch[0]["result"]["chunks"].is_array(), "{batch}");
    assert_eq!(batch[1]["error"], duplicate["error"]);
    client
        .call("process/terminate", json!({"processId": "p"}))
        .await;
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
        "--connection-token-file",
        "--connection-token",
        "--upgrade-timeout",
        "--max-pending-connections",
        "--max-pending-connections-per-peer",
        "--max-processes",
        "--max-processes-per-session",
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
        "client must call initialize before using exec methods"
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
    // Batches belong to JSON-RPC 2.0: in the Codex dialect, as upstream, an array is no message.
    let codex_dialect =
        json!([{"id": 1, "method": "process/terminate", "params": {"processId": "a"}}]);
    client.send_text(codex_dialect.to_string()).await;
    let refused = client.next_unsolicited().await;
    assert_eq!(refused["id"], -1);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with(": expected a JSON-RPC object"),
        "{refused}"
    );
    client.send_text(json!([
        {"jsonrpc": "2.0", "id": 1, "method": "process/terminate", "params": {"processId": "a"}},
        {"jsonrpc": "2.0", "id": 2, "method": "process/write", "params": {"processId": "a", "chunk": "", "writeId": "w"}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 3, "method": "nope/nope"}
    ]).to_string()).await;
    let reply = client.next_unsolicited().await;
    assert_eq!(
        reply,
        json!([
            {"jsonrpc": "2.0", "id": 1, "result": {"running": false}},
            {"jsonrpc": "2.0", "id": 2, "result": {"status": "unknownProcess"}},
            {"id": -1, "error": {"code": -32600, "message": "notifications cannot be sent in a JSON-RPC batch"}},
            {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "exec-server stub does not implement `nope/nope` yet"}}
        ])
    );
    client.send_text("[]").await;
    assert_eq!(
        client.next_unsolicited().await["error"]["message"],
        "JSON-RPC batch must not be empty"
    );
    let huge: Vec<Value> = (0..129)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "process/read", "params": {}}))
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

/// A client's Close is answered at once with the daemon's, as RFC 6455 asks, also while the
/// session keeps a process running; a client that closes cleanly sees code 1000, not 1006.
#[tokio::test]
async fn a_close_from_the_client_is_answered_with_a_close() {
    let daemon = Daemon::start();
    let (mut ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
    let request = |id: u64, method: &str, params: Value| {
        Message::text(json!({"id": id, "method": method, "params": params}).to_string())
    };
    let reply_to = async |ws: &mut tokio_tungstenite::WebSocketStream<_>, message| {
        ws.send(message).await.unwrap();
        loop {
            let Some(Ok(Message::Text(text))) = ws.next().await else {
                panic!("the connection ended");
            };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply.get("id").is_some() {
                assert!(reply.get("result").is_some(), "{reply}");
                return;
            }
        }
    };
    reply_to(
        &mut ws,
        request(1, "initialize", json!({"clientName": "t"})),
    )
    .await;
    let initialized = json!({"method": "initialized", "params": {}}).to_string();
    ws.send(Message::text(initialized)).await.unwrap();
    let start = start_params("sleeper", &["sleep", "30"]);
    reply_to(&mut ws, request(2, "process/start", start)).await;
    let normal = tungstenite::protocol::CloseFrame {
        code: tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    };
    ws.send(Message::Close(Some(normal))).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(message) = ws.next().await {
            if let Ok(Message::Close(_)) = message {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        answered,
        Ok(true),
        "the daemon answers a Close with its own"
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
fn stdio_answers_every_request_read_before_eof() {
    let (mut child, mut stdin, mut stdout) = stdio_daemon();
    let reply_id = |line: &str| {
        serde_json::from_str::<Value>(line)
            .unwrap()
            .get("id")
            .cloned()
    };
    let mut send = |lines: &[Value]| {
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
    };
    send(&[
        json!({"id": 1, "method": "initialize", "params": {"clientName": "eof"}}),
        json!({"method": "initialized"}),
        json!({"id": 2, "method": "process/start", "params": start_params("s", &["sleep", "30"])}),
    ]);
    let mut ids = Vec::new();
    while ids.len() < 2 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        ids.extend(reply_id(&line));
    }
    // Then two requests and the end of input at once: the long-poll is surely still running
    // when the daemon reads EOF.
    send(&[
        json!({"id": 3, "method": "environment/info", "params": {}}),
        json!({"id": 4, "method": "process/read",
            "params": {"processId": "s", "afterSeq": 0, "waitMs": 500}}),
    ]);
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    ids.extend(rest.lines().filter_map(reply_id));
    assert!(child.wait().unwrap().success());
    assert_eq!(ids, [json!(1), json!(2), json!(3), json!(4)]);
}

#[tokio::test]
async fn session_ids_are_logged_only_as_digests() {
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &[], &[]);
    command
        .env("EXEC_SERVER_LOG", "info")
        .stderr(std::process::Stdio::piped());
    let mut daemon = Daemon::launch(command);
    let stderr = daemon.take_stderr().unwrap();
    let (_client, session) = daemon.session().await;
    let digest = ring::digest::digest(&ring::digest::SHA256, session.as_bytes());
    let digest: String = digest.as_ref()[..4]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let mut reader = std::io::BufReader::new(stderr);
    let mut line = String::new();
    while !line.contains("session created") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the log ended");
        assert!(!line.contains(&session), "{line}");
    }
    assert!(line.contains(&digest), "{line}");
}

#[test]
fn stdio_mode_serves_one_connection_and_exits_at_eof() {
    let (mut child, mut stdin, mut stdout) = stdio_daemon();
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
    // The start's reply comes before any event of its process, though the shell writes at once.
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let started: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(started["id"], 2, "{started}");
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

/// The daemon serving one JSON-RPC connection on its stdin and stdout.
fn stdio_daemon() -> (
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "stdio://"])
        .env("EXEC_SERVER_LOG", "warn")
        .env(STATE_DIR_VAR, "none")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

/// A service manager's reload sends SIGHUP: a daemon with nothing to reload goes on serving.
#[tokio::test]
async fn sighup_does_not_stop_the_daemon() {
    let mut daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    daemon.send_signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        daemon.wait_exit(Duration::from_millis(10)).is_none(),
        "the daemon exited on SIGHUP"
    );
    client.call("environment/info", json!({})).await;
}
