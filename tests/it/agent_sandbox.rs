//! The daemon as agent-sandbox's runtime image (issue #45): the token in `X-Access-Token` (the
//! router drops `Authorization`) on every listener that takes one, the `X-Sandbox-ID` check, and
//! the health routes, spoken over real sockets to the real binary.

use crate::common::*;
use crate::unix_socket::unix_daemon;
use std::io::{Read as _, Write as _};

/// Sends `method path` with `headers` on `stream` and returns the status and the body.
fn exchange(
    mut stream: impl std::io::Read + std::io::Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: sandbox\r\n");
    if !headers.iter().any(|(name, _)| *name == "Connection") {
        request.push_str("Connection: close\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    // Up to the end (Connection: close), or the head of a 101: an upgraded connection stays open.
    while let Ok(read @ 1..) = stream.read(&mut chunk) {
        response.extend_from_slice(&chunk[..read]);
        if response.starts_with(b"HTTP/1.1 101") && response.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body.to_owned())
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
