//! The sandboxd REST contract (agent-sandbox KEP-539.2 Core) on the listener, driven over raw
//! HTTP/1.1 (so paths go out exactly as written, dot segments included): files round trip,
//! and attacks, each answered with the contract's `{"code", "message"}`: path traversal (dots,
//! encoded dots and slashes, links out of the root, writes and removals through them),
//! oversized and endless bodies, stalled bodies, malformed parameters, a planted FIFO.

use crate::common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const TOKEN: &str = "sandboxd-test-token-0123456789";
const LIMIT: usize = 100_000;

/// A daemon whose sandboxd root is a fresh directory (a `ws/` in it holding `a.txt`), with a
/// token and a small file limit; the root's parent also holds `outside.txt`, the target of
/// every escape.
struct Fixture {
    daemon: Daemon,
    address: String,
    top: tempfile::TempDir,
}

impl Fixture {
    fn start(extra: &[&str]) -> Self {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("root");
        std::fs::create_dir_all(root.join("ws")).unwrap();
        std::fs::write(root.join("ws/a.txt"), "hello").unwrap();
        std::fs::write(top.path().join("outside.txt"), "secret").unwrap();
        let token = top.path().join("token");
        std::fs::write(&token, TOKEN).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let limit = LIMIT.to_string();
        let mut args = vec![
            "--connection-token-file",
            token.to_str().unwrap(),
            "--sandboxd-root",
            root.to_str().unwrap(),
            "--sandboxd-max-file-bytes",
            &limit,
        ];
        args.extend_from_slice(extra);
        let daemon = Daemon::start_with(&args, &[]);
        let address = daemon.url.trim_start_matches("ws://").to_owned();
        Self {
            daemon,
            address,
            top,
        }
    }

    fn root(&self) -> std::path::PathBuf {
        self.top.path().join("root")
    }

    fn outside(&self) -> std::path::PathBuf {
        self.top.path().join("outside.txt")
    }

    /// One request with the token on a connection of its own: the status, the headers (lower
    /// case) and the body.
    async fn request(&self, method: &str, target: &str, headers: &str, body: &[u8]) -> Reply {
        let auth = format!("Authorization: Bearer {TOKEN}\r\n{headers}");
        send(&self.address, method, target, &auth, body).await
    }

    /// The contract's error of a request that must fail: its status and code.
    async fn refused(&self, method: &str, target: &str, body: &[u8]) -> (u16, String) {
        let reply = self.request(method, target, "", body).await;
        assert!(
            reply.status >= 400,
            "{method} {target} succeeded: {reply:?}"
        );
        (
            reply.status,
            reply.json()["code"].as_str().unwrap().to_owned(),
        )
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {self:?}"))
    }
}

async fn send(address: &str, method: &str, target: &str, headers: &str, body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    read_reply(&mut stream, method == "HEAD").await
}

async fn read_reply(stream: &mut TcpStream, head_only: bool) -> Reply {
    let mut reply = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut reply))
        .await
        .expect("an answer in time")
        .unwrap();
    let split = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&reply[..split]).to_lowercase();
    let status = head[9..12].parse().unwrap();
    let mut body = reply[split..].to_vec();
    if head.contains("transfer-encoding: chunked") && !head_only {
        body = dechunk(&body);
    }
    Reply { status, head, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&data[..line]).unwrap(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line + 2..line + 2 + size]);
        data = &data[line + 4 + size..];
    }
}

#[tokio::test]
async fn files_round_trip_through_put_get_head_list_and_delete() {
    let fx = Fixture::start(&[]);
    let put = fx
        .request(
            "PUT",
            "/v1/files/ws/new/deep/b.sh?mode=0750",
            "",
            b"echo hi",
        )
        .await;
    assert_eq!(put.status, 204, "{put:?}");
    let written = fx.root().join("ws/new/deep/b.sh");
    assert_eq!(std::fs::read(&written).unwrap(), b"echo hi");
    let mode = std::fs::metadata(&written).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o750);
    // Overwritten whole, and the temporary file gone.
    fx.request("PUT", "/v1/files/ws/new/deep/b.sh", "", b"v2")
        .await;
    assert_eq!(std::fs::read(&written).unwrap(), b"v2");
    let names: Vec<_> = std::fs::read_dir(written.parent().unwrap())
        .unwrap()
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Multipart, as the SDK uploads.
    let form = b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c\"\r\n\r\nform body\r\n--XX--\r\n";
    let headers = "Content-Type: multipart/form-data; boundary=XX\r\n";
    let put = fx.request("PUT", "/v1/files/ws/c.txt", headers, form).await;
    assert_eq!(put.status, 204, "{put:?}");
    assert_eq!(
        std::fs::read(fx.root().join("ws/c.txt")).unwrap(),
        b"form body"
    );

    let get = fx.request("GET", "/v1/files/ws/a.txt", "", b"").await;
    assert_eq!((get.status, get.body.as_slice()), (200, &b"hello"[..]));
    assert!(get.head.contains("content-type: application/octet-stream"));
    let head = fx.request("HEAD", "/v1/files/ws/a.txt", "", b"").await;
    assert_eq!(head.status, 200);
    assert!(head.head.contains("content-length: 5"), "{head:?}");
    assert!(head.body.is_empty());
    assert_eq!(
        fx.request("HEAD", "/v1/files/ws/none", "", b"")
            .await
            .status,
        404
    );

    let listing = fx.request("GET", "/v1/files/ws", "", b"").await.json();
    assert_eq!(listing["path"], "/ws");
    let entries = listing["entries"].as_array().unwrap();
    let names: Vec<_> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "c.txt", "new"]);
    assert_eq!(entries[0]["size"], 5);
    assert_eq!(entries[0]["type"], "file");
    assert_eq!(entries[0]["mode"], "0644");
    assert_eq!(entries[2]["type"], "directory");
    assert!(entries[0]["modified_at"].as_str().unwrap().ends_with('Z'));

    let (status, code) = fx.refused("DELETE", "/v1/files/ws/new", b"").await;
    assert_eq!((status, code.as_str()), (409, "FAILED_PRECONDITION"));
    let gone = fx
        .request("DELETE", "/v1/files/ws/new?recursive=true", "", b"")
        .await;
    assert_eq!(gone.status, 204);
    assert!(!fx.root().join("ws/new").exists());
    assert_eq!(
        fx.request("DELETE", "/v1/files/ws/a.txt", "", b"")
            .await
            .status,
        204
    );
    let (status, code) = fx.refused("GET", "/v1/files/ws/a.txt", b"").await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
}

#[tokio::test]
async fn path_traversal_is_refused_by_dots_encoded_dots_and_links_out_of_the_root() {
    let fx = Fixture::start(&[]);
    let ws = fx.root().join("ws");
    // Links a tenant could plant: to a file outside, to the root's parent, a /proc magic link.
    std::os::unix::fs::symlink(fx.outside(), ws.join("abs")).unwrap();
    std::os::unix::fs::symlink(fx.top.path(), ws.join("updir")).unwrap();
    std::os::unix::fs::symlink("/proc/self/root", ws.join("magic")).unwrap();
    // Through dots (plain, percent-encoded, with encoded slashes) and through links.
    for target in [
        "/v1/files/../outside.txt",
        "/v1/files/ws/../../outside.txt",
        "/v1/files/ws/%2e%2e/%2e%2e/outside.txt",
        "/v1/files/ws%2f..%2f..%2foutside.txt",
        "/v1/files/ws/updir/outside.txt",
        "/v1/files/ws/magic/etc/passwd",
        "/v1/files/ws/abs/x",
    ] {
        for method in ["GET", "HEAD", "PUT", "DELETE"] {
            let reply = fx.request(method, target, "", b"pwned").await;
            assert_eq!(reply.status, 403, "{method} {target}: {reply:?}");
            if method != "HEAD" {
                assert_eq!(
                    reply.json()["code"],
                    "PERMISSION_DENIED",
                    "{method} {target}"
                );
            }
        }
    }
    // A write through a linked directory makes nothing outside, not even a parent.
    let reply = fx
        .request("PUT", "/v1/files/ws/updir/made/x", "", b"x")
        .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(!fx.top.path().join("made").exists());
    assert_eq!(std::fs::read(fx.outside()).unwrap(), b"secret");
    // The listing describes the links themselves, never what is outside.
    let listing = fx.request("GET", "/v1/files/ws", "", b"").await.json();
    let updir = (listing["entries"].as_array().unwrap().iter())
        .find(|e| e["name"] == "updir")
        .unwrap();
    assert_eq!(updir["type"], "file");
    assert_eq!(updir["size"], fx.top.path().as_os_str().len());
    // A link that stays beneath the root is followed.
    std::os::unix::fs::symlink("a.txt", ws.join("inside")).unwrap();
    let inside = fx.request("GET", "/v1/files/ws/inside", "", b"").await;
    assert_eq!(
        (inside.status, inside.body.as_slice()),
        (200, &b"hello"[..])
    );
    // Removing a link removes the link, never its target.
    let reply = fx
        .request("DELETE", "/v1/files/ws/updir?recursive=true", "", b"")
        .await;
    assert_eq!(reply.status, 204, "{reply:?}");
    assert_eq!(std::fs::read(fx.outside()).unwrap(), b"secret");
    // The root itself cannot be removed.
    let (status, _) = fx.refused("DELETE", "/v1/files/?recursive=true", b"").await;
    assert!(status == 403 || status == 404, "{status}");
    assert!(fx.root().join("ws/a.txt").exists());
}

#[tokio::test]
async fn a_link_as_the_last_name_is_never_read_through_only_replaced_or_removed() {
    let fx = Fixture::start(&[]);
    let ws = fx.root().join("ws");
    std::os::unix::fs::symlink(fx.outside(), ws.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../outside.txt", ws.join("rel")).unwrap();
    // A link as the last component: not read through; a write replaces the link itself (the
    // file is renamed into place) and a removal removes the link, never the target.
    for target in ["/v1/files/ws/abs", "/v1/files/ws/rel"] {
        for method in ["GET", "HEAD"] {
            let reply = fx.request(method, target, "", b"").await;
            assert_eq!(reply.status, 403, "{method} {target}: {reply:?}");
        }
    }
    assert_eq!(
        fx.request("PUT", "/v1/files/ws/abs", "", b"mine")
            .await
            .status,
        204
    );
    assert_eq!(std::fs::read(ws.join("abs")).unwrap(), b"mine");
    assert_eq!(
        fx.request("DELETE", "/v1/files/ws/rel", "", b"")
            .await
            .status,
        204
    );
    assert_eq!(std::fs::read(fx.outside()).unwrap(), b"secret");
}

#[tokio::test]
async fn oversized_endless_and_stalled_bodies_are_refused_and_leave_no_file() {
    let fx = Fixture::start(&["--upgrade-timeout", "2s"]);
    // Declared too large: refused before a byte of the body is read.
    let mut stream = TcpStream::connect(&fx.address).await.unwrap();
    let head = format!(
        "PUT /v1/files/ws/big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        1u64 << 40
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let reply = read_reply(&mut stream, false).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.json()["code"], "RESOURCE_EXHAUSTED");

    // Chunked and endless: refused once past the limit, while the client is still sending.
    let mut stream = TcpStream::connect(&fx.address).await.unwrap();
    let head = format!(
        "PUT /v1/files/ws/endless HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let sender = tokio::spawn(async move {
        let chunk = format!("4000\r\n{}\r\n", "z".repeat(0x4000));
        let mut sent = 0usize;
        while writer.write_all(chunk.as_bytes()).await.is_ok() {
            sent += 0x4000;
            if sent > 64 * LIMIT {
                break;
            }
        }
        sent
    });
    let mut reply = Vec::new();
    tokio::time::timeout(TIMEOUT, reader.read_to_end(&mut reply))
        .await
        .expect("an answer in time")
        .ok();
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("RESOURCE_EXHAUSTED"), "{text}");
    let sent = sender.await.unwrap();
    assert!(
        sent < 64 * LIMIT,
        "the daemon read {sent} bytes before refusing"
    );

    // Stalled half-way: the listener's deadline closes it; nothing is left behind.
    let mut stream = TcpStream::connect(&fx.address).await.unwrap();
    let head = format!(
        "PUT /v1/files/ws/stalled HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: 1000\r\n\r\nhalf"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut rest)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The request's task is dropped with its connection, its temporary file with it.
    let left = || -> Vec<_> {
        (std::fs::read_dir(fx.root().join("ws")).unwrap())
            .map(|e| e.unwrap().file_name())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while left() != ["a.txt"] {
        assert!(
            Instant::now() < deadline,
            "files left by refused uploads: {:?}",
            left()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn malformed_requests_get_the_contracts_error_and_a_fifo_does_not_hang_a_read() {
    let fx = Fixture::start(&[]);
    for (method, target, body, status) in [
        ("PUT", "/v1/files/ws/m?mode=999", &b"x"[..], 400),
        ("PUT", "/v1/files/ws/m?mode=0o644", b"x", 400),
        ("PUT", "/v1/files/ws/m?mode=01777", b"x", 400),
        ("DELETE", "/v1/files/ws/a.txt?recursive=yes", b"", 400),
        ("GET", "/v1/files/ws/a%00b", b"", 400),
        ("PUT", "/v1/files/ws", b"x", 400),
    ] {
        let reply = fx.request(method, target, "", body).await;
        assert_eq!(reply.status, status, "{method} {target}: {reply:?}");
        assert_eq!(
            reply.json()["code"],
            "INVALID_ARGUMENT",
            "{method} {target}"
        );
    }
    let broken = b"--XX\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--XX--\r\n";
    let headers = "Content-Type: multipart/form-data; boundary=XX\r\n";
    let reply = fx.request("PUT", "/v1/files/ws/m", headers, broken).await;
    assert_eq!(reply.status, 400, "{reply:?}");
    let reply = fx
        .request("PUT", "/v1/files/ws/m", headers, b"--XX\r\ngarbage")
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(!fx.root().join("ws/m").exists());
    // A FIFO (a tenant's, with no writer) is refused at once, never read.
    nix::unistd::mkfifo(&fx.root().join("ws/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let started = Instant::now();
    let reply = fx.request("GET", "/v1/files/ws/fifo", "", b"").await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(fx.daemon);
}

#[tokio::test]
async fn files_and_metadata_need_the_token_and_health_does_not() {
    let fx = Fixture::start(&[]);
    for target in ["/v1/files/ws/a.txt", "/v1/metadata"] {
        let reply = send(&fx.address, "GET", target, "", b"").await;
        assert_eq!(reply.status, 401, "{target}: {reply:?}");
        let wrong = "Authorization: Bearer wrong\r\n";
        assert_eq!(
            send(&fx.address, "GET", target, wrong, b"").await.status,
            401
        );
    }
    let reply = send(&fx.address, "PUT", "/v1/files/ws/x", "", b"x").await;
    assert_eq!(reply.status, 401);
    assert!(!fx.root().join("ws/x").exists());
    let health = send(&fx.address, "GET", "/v1/health", "", b"").await;
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(health.json()["status"], "ok");
    assert!(health.json()["uptime_seconds"].is_u64());
    let metadata = fx.request("GET", "/v1/metadata", "", b"").await.json();
    let root = fx.root();
    assert_eq!(metadata["env"]["SANDBOX_ROOT"], root.to_str().unwrap());
    assert!(!metadata.to_string().contains(TOKEN));
    assert!(Path::new(&root).exists());
}

/// A lookup through `..` while the host renames: openat2 answers EAGAIN when any rename or
/// mount on the host races it (every sandboxed launch mounts), which must be tried again, not
/// turned into a 500.
#[tokio::test(flavor = "multi_thread")]
async fn a_lookup_through_dots_holds_while_the_host_renames() {
    let fx = Fixture::start(&[]);
    let ws = fx.root().join("ws");
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("in.txt"), "in").unwrap();
    // Dots in the request are refused before any lookup; in a link they are the kernel's.
    std::os::unix::fs::symlink("sub/..", ws.join("back")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renamer = {
        let (stop, dir) = (stop.clone(), tempfile::tempdir().unwrap());
        std::thread::spawn(move || {
            let (a, b) = (dir.path().join("a"), dir.path().join("b"));
            std::fs::write(&a, "").unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(&a, &b).unwrap();
                std::fs::rename(&b, &a).unwrap();
            }
        })
    };
    for _ in 0..300 {
        let reply = fx.request("GET", "/v1/files/ws/back/in.txt", "", b"").await;
        assert_eq!(
            (reply.status, reply.body.as_slice()),
            (200, &b"in"[..]),
            "{reply:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    renamer.join().unwrap();
}
