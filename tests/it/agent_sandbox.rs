//! The daemon as agent-sandbox's runtime image (issue #45): the token in `X-Access-Token` (the
//! router drops `Authorization`) on every listener that takes one, the `X-Sandbox-ID` check, and
//! the health routes, spoken over real sockets to the real binary.

use crate::common::*;
use crate::unix_socket::unix_daemon;
use std::io::{Read as _, Write as _};

/// Sends `method path` with `headers` on `stream` and returns the status and the body.
fn exchange(
    stream: impl std::io::Read + std::io::Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    try_exchange(stream, method, path, headers).expect("an answer")
}

/// `exchange`, or None when the connection ends with no answer.
fn try_exchange(
    mut stream: impl std::io::Read + std::io::Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, String)> {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: sandbox\r\n");
    if !headers.iter().any(|(name, _)| *name == "Connection") {
        request.push_str("Connection: close\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    // Up to the end of the answer: an upgraded or kept-alive connection stays open.
    while let Ok(read @ 1..) = stream.read(&mut chunk) {
        response.extend_from_slice(&chunk[..read]);
        if answer_complete(&response) {
            break;
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Some((status, body.to_owned()))
}

/// Whether `response` holds a whole answer: its head, and as much body as it announced.
fn answer_complete(response: &[u8]) -> bool {
    let text = String::from_utf8_lossy(response);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let head = head.to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|length| length.trim().parse::<usize>().ok());
    head.starts_with("http/1.1 101") || length.is_some_and(|length| body.len() >= length)
}

fn tcp(daemon: &Daemon) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(&daemon.url["ws://".len()..]).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    stream
}

const UPGRADE: [(&str, &str); 4] = [
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
];

/// The status of an upgrade sent on `stream` with `headers` besides the upgrade's own.
fn upgrade_status(stream: impl std::io::Read + std::io::Write, headers: &[(&str, &str)]) -> u16 {
    let all: Vec<_> = UPGRADE.iter().chain(headers).copied().collect();
    exchange(stream, "GET", "/", &all).0
}

/// Every way a token can be presented, right or wrong, against what `status_of` answers.
fn assert_token_headers(status_of: impl Fn(&[(&str, &str)]) -> u16, passed: u16) {
    assert_eq!(status_of(&[]), 401, "no token");
    assert_eq!(status_of(&[("X-Access-Token", "wrong")]), 401);
    assert_eq!(status_of(&[("X-Access-Token", "")]), 401);
    assert_eq!(status_of(&[("X-Access-Token", "s3cret")]), passed);
    assert_eq!(status_of(&[("Authorization", "Bearer s3cret")]), passed);
    // Each header present must hold: a wrong one beside a right one is refused.
    assert_eq!(
        status_of(&[
            ("X-Access-Token", "s3cret"),
            ("Authorization", "Bearer wrong")
        ]),
        401
    );
    assert_eq!(
        status_of(&[
            ("X-Access-Token", "wrong"),
            ("Authorization", "Bearer s3cret")
        ]),
        401
    );
}

#[test]
fn the_token_is_taken_in_x_access_token_on_tcp() {
    let daemon = Daemon::start_with(&["--connection-token", "s3cret"], &[]);
    assert_token_headers(|headers| upgrade_status(tcp(&daemon), headers), 101);
    assert_token_headers(
        |headers| exchange(tcp(&daemon), "GET", "/metrics", headers).0,
        200,
    );
}

#[test]
fn the_token_is_taken_in_x_access_token_on_a_unix_socket() {
    let dir = private_tempdir();
    let socket = dir.path().join("exec.sock");
    let _daemon = unix_daemon(&socket, &["--connection-token", "s3cret"]);
    let connect = || {
        let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        stream
    };
    assert_token_headers(|headers| upgrade_status(connect(), headers), 101);
    assert_token_headers(
        |headers| exchange(connect(), "GET", "/metrics", headers).0,
        200,
    );
}

#[test]
fn a_request_routed_for_another_sandbox_is_refused() {
    let daemon = Daemon::start_with(
        &["--connection-token", "s3cret"],
        &[("EXEC_SERVER_SANDBOX_ID", "sandbox-a")],
    );
    let token = ("X-Access-Token", "s3cret");
    // A stale route: the right token, but the request was meant for another pod.
    let (status, body) = exchange(
        tcp(&daemon),
        "GET",
        "/",
        &[UPGRADE.as_slice(), &[token, ("X-Sandbox-ID", "sandbox-b")]].concat(),
    );
    assert_eq!(status, 421);
    assert!(body.contains("\"sandbox-b\""), "{body}");
    assert_eq!(
        exchange(
            tcp(&daemon),
            "GET",
            "/metrics",
            &[token, ("X-Sandbox-ID", "sandbox-b")]
        )
        .0,
        421
    );
    // A prefix of the name is another name.
    assert_eq!(
        upgrade_status(tcp(&daemon), &[token, ("X-Sandbox-ID", "sandbox-")]),
        421
    );
    assert_eq!(
        upgrade_status(tcp(&daemon), &[token, ("X-Sandbox-ID", "sandbox-a")]),
        101
    );
    // Straight to the pod, naming no sandbox.
    assert_eq!(upgrade_status(tcp(&daemon), &[token]), 101);
}

pub(crate) fn json_of(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|err| panic!("{err}: {body}"))
}

#[test]
fn every_health_route_answers_on_the_serving_port_without_the_token() {
    let daemon = Daemon::start_with(&["--connection-token", "s3cret"], &[]);
    let (status, body) = exchange(tcp(&daemon), "GET", "/", &[]);
    assert_eq!(status, 200);
    assert_eq!(json_of(&body)["status"], "ok");
    let (status, body) = exchange(tcp(&daemon), "GET", "/v1/health", &[]);
    assert_eq!(status, 200);
    let health = json_of(&body);
    assert_eq!(health["status"], "ok");
    assert!(health["uptime_seconds"].is_u64(), "{health}");
    assert_eq!(exchange(tcp(&daemon), "GET", "/health", &[]).0, 204);
    let (status, body) = exchange(tcp(&daemon), "GET", "/readyz", &[]);
    assert_eq!(status, 200);
    let ready = json_of(&body);
    assert_eq!(ready["status"], "ready");
    assert!(ready["sandbox"].is_object(), "{ready}");
}

/// A client that started a loud process and stopped reading: the drain waits (bounded) for it
/// to take its processes' last events, which keeps the daemon draining long enough to probe.
async fn frozen_client(url: &str) -> impl Sized {
    use futures::SinkExt as _;
    use tokio_tungstenite::tungstenite::Message;
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let initialize =
        serde_json::json!({"id": 1, "method": "initialize", "params": {"clientName": "frozen"}});
    let start = serde_json::json!({"id": 2, "method": "process/start", "params": start_params("loud", &["yes"])});
    for message in [
        initialize,
        serde_json::json!({"method": "initialized", "params": {}}),
        start,
    ] {
        socket
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    socket
}

#[tokio::test]
async fn from_sigterm_until_exit_the_health_routes_answer_503() {
    let mut daemon = Daemon::start();
    let _frozen = frozen_client(&daemon.url).await;
    let addr = daemon.url["ws://".len()..].to_owned();
    daemon.send_signal(libc::SIGTERM);
    let probes = tokio::task::spawn_blocking(move || {
        let mut answers = Vec::new();
        for path in HEALTH_PATHS.iter().cycle() {
            // Until the daemon is gone (no connection, or no answer).
            let probe = |path: &str, headers: &[(&str, &str)]| {
                let stream = std::net::TcpStream::connect(&addr).ok()?;
                try_exchange(stream, "GET", path, headers).map(|(status, _)| status)
            };
            let Some(status) = probe(path, &[]) else {
                break;
            };
            answers.push((*path, status));
            // And a new connection is refused its upgrade.
            let Some(status) = probe("/", &UPGRADE) else {
                break;
            };
            answers.push(("upgrade", status));
        }
        answers
    })
    .await
    .unwrap();
    assert!(daemon
        .wait_exit(std::time::Duration::from_secs(10))
        .is_some());
    // Answers may precede the signal's handling; from the first 503 on, every one is 503.
    let draining: Vec<_> = probes
        .iter()
        .skip_while(|(_, status)| *status != 503)
        .collect();
    for path in HEALTH_PATHS.iter().chain(&["upgrade"]) {
        assert!(
            draining.iter().any(|(probed, _)| probed == path),
            "{path} never probed while draining: {:?}",
            &probes[..probes.len().min(20)]
        );
    }
    let passed: Vec<_> = draining
        .iter()
        .filter(|(_, status)| *status != 503)
        .collect();
    assert!(passed.is_empty(), "answered while draining: {passed:?}");
}

const HEALTH_PATHS: [&str; 4] = ["/", "/v1/health", "/health", "/readyz"];

/// A daemon serving the legacy runtime API on `base`, behind the token `s3cret`.
pub(crate) fn runtime_daemon(base: &std::path::Path, extra: &[&str]) -> Daemon {
    let base = base.to_str().unwrap();
    let args = [
        &["--connection-token", "s3cret", "--runtime-base-dir", base],
        extra,
    ]
    .concat();
    Daemon::start_with(&args, &[])
}

const TOKEN: (&str, &str) = ("X-Access-Token", "s3cret");

/// Sends `body` to `path` with `headers` and the token; the status and the body.
pub(crate) fn send(
    daemon: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    send_to(tcp(daemon), method, path, headers, body)
}

/// `send` on `stream`.
pub(crate) fn send_to(
    mut stream: std::net::TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let length = body.len().to_string();
    let all = [headers, &[TOKEN, ("Content-Length", &length)]].concat();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n");
    for (name, value) in &all {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    // The daemon may answer (and close) before taking a refused body whole.
    let _ = stream.write_all(&bytes);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body.to_owned())
}

fn execute(daemon: &Daemon, request: serde_json::Value) -> serde_json::Value {
    let (status, body) = send(
        daemon,
        "POST",
        "/execute",
        &[("Content-Type", "application/json")],
        request.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    json_of(&body)
}

#[test]
fn execute_runs_a_split_command_with_no_shell_in_the_base_dir() {
    let base = scratch_dir();
    let daemon = runtime_daemon(base.path(), &[]);
    let answer = execute(
        &daemon,
        serde_json::json!({"command": "echo 'hello world' $HOME ; ls"}),
    );
    assert_eq!(answer["stdout"], "hello world $HOME ; ls\n", "{answer}");
    assert_eq!(answer["exit_code"], 0);
    assert_eq!(answer["timed_out"], false);
    let answer = execute(&daemon, serde_json::json!({"command": "pwd"}));
    let pwd = std::fs::canonicalize(base.path()).unwrap();
    assert_eq!(answer["stdout"], format!("{}\n", pwd.display()));
    let answer = execute(
        &daemon,
        serde_json::json!({"command": "sh -c 'echo out; echo err >&2; exit 3'"}),
    );
    assert_eq!(
        (
            answer["stdout"].as_str(),
            answer["stderr"].as_str(),
            answer["exit_code"].as_i64()
        ),
        (Some("out\n"), Some("err\n"), Some(3))
    );
    let answer = execute(
        &daemon,
        serde_json::json!({"command": "no-such-program-here"}),
    );
    assert_eq!(answer["exit_code"], 1);
    assert!(
        answer["stderr"]
            .as_str()
            .unwrap()
            .starts_with("Failed to execute command: "),
        "{answer}"
    );
    let answer = execute(&daemon, serde_json::json!({"command": "echo 'unclosed"}));
    assert_eq!(answer["exit_code"], 1);
    // Without the token, nothing runs.
    let mut stream = tcp(&daemon);
    let body = r#"{"command": "touch ran"}"#;
    write!(stream, "POST /execute HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");
    assert!(!base.path().join("ran").exists());
}

#[test]
fn execute_timeout_kills_the_whole_tree() {
    let base = scratch_dir();
    let daemon = runtime_daemon(base.path(), &["--runtime-exec-timeout-seconds", "1"]);
    let started = std::time::Instant::now();
    let answer = execute(
        &daemon,
        serde_json::json!({"command": "sh -c 'setsid sleep 1000 & echo $! > pid; sleep 1000'", "timeout_seconds": 60}),
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(answer["timed_out"], true, "{answer}");
    assert_ne!(answer["exit_code"], 0);
    let pid: i32 = std::fs::read_to_string(base.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Even the one that left the process group.
    assert!(!pid_alive(pid), "the detached grandchild survived");
}

pub(crate) fn multipart(name: &str, content: &[u8]) -> (String, Vec<u8>) {
    let boundary = "XyZzY";
    let mut body = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub(crate) fn upload(daemon: &Daemon, name: &str, content: &[u8]) -> (u16, String) {
    let (content_type, body) = multipart(name, content);
    send(
        daemon,
        "POST",
        "/upload",
        &[("Content-Type", &content_type)],
        &body,
    )
}

#[test]
fn oversized_and_endless_bodies_are_refused() {
    let base = scratch_dir();
    let daemon = runtime_daemon(
        base.path(),
        &[
            "--runtime-max-upload-bytes",
            "1024",
            "--upgrade-timeout",
            "2s",
        ],
    );
    assert_eq!(upload(&daemon, "big", &[b'x'; 4096]).0, 413);
    assert!(
        !base.path().join("big").exists()
            || std::fs::metadata(base.path().join("big")).unwrap().len() <= 1024
    );
    let command = format!(r#"{{"command": "echo {}"}}"#, "x".repeat(2 << 20));
    assert_eq!(
        send(
            &daemon,
            "POST",
            "/execute",
            &[("Content-Type", "application/json")],
            command.as_bytes()
        )
        .0,
        413
    );
    assert_eq!(
        send(
            &daemon,
            "POST",
            "/execute",
            &[("Content-Type", "application/json")],
            b"{not json"
        )
        .0,
        400
    );
    // A body announced and never sent: refused at the deadline, not held forever.
    let mut stream = tcp(&daemon);
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let (content_type, body) = multipart("stalled", b"partial");
    write!(stream, "POST /upload HTTP/1.1\r\nHost: x\r\nX-Access-Token: s3cret\r\nContent-Type: {content_type}\r\nContent-Length: 1000000\r\n\r\n").unwrap();
    stream.write_all(&body[..body.len() - 10]).unwrap();
    let started = std::time::Instant::now();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "held {:?}",
        started.elapsed()
    );
    assert!(!response.starts_with("HTTP/1.1 200"), "{response}");
}

#[test]
fn the_runtime_sandbox_profile_confines_execute() {
    use crate::sandbox_support::{entry, path, special};
    let dir = scratch_dir();
    let (base, outside) = (dir.path().join("app"), dir.path().join("outside"));
    for made in [&base, &outside] {
        std::fs::create_dir(made).unwrap();
    }
    let profile = serde_json::json!({"type": "managed", "network": "restricted", "file_system": {
    "type": "restricted", "entries": [
        entry(special("root"), "read"),
        entry(path(&base), "write"),
    ]}});
    let profile_path = dir.path().join("profile.json");
    std::fs::write(&profile_path, profile.to_string()).unwrap();
    let daemon = runtime_daemon(
        &base,
        &["--runtime-sandbox", profile_path.to_str().unwrap()],
    );
    let planted = outside.join("planted");
    let answer = execute(
        &daemon,
        serde_json::json!({"command": format!("sh -c 'touch inside && touch {}'", planted.display())}),
    );
    assert_ne!(answer["exit_code"], 0, "{answer}");
    assert!(base.join("inside").exists(), "{answer}");
    assert!(!planted.exists(), "the profile did not apply to /execute");
}

#[test]
fn a_command_outlasting_the_http_phase_deadline_completes() {
    let base = scratch_dir();
    let daemon = runtime_daemon(base.path(), &["--upgrade-timeout", "1s"]);
    let answer = execute(
        &daemon,
        serde_json::json!({"command": "sh -c 'sleep 3; echo done'"}),
    );
    assert_eq!(answer["stdout"], "done\n", "{answer}");
}
