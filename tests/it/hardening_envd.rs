//! Attacks on the envd listener's reach (issue 41), each performed against the real binary over
//! loopback: an empty token file, a tenant swapping a link under `--envd-sandbox` listings and
//! stats, watches reaching denied directories, watchers exhausting the user's inotify
//! instances or ignoring the directory budget, stalled request bodies holding descriptors, and
//! the answers to another user and to a planted link.

use crate::common::*;
use crate::hardening_listeners::stalled;
use crate::metrics::free_port;
use crate::sandbox_support::{entry, path, special};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// An HTTP/1.1 request to `address` on a connection of its own; the status and the raw body.
async fn http(address: &str, target: &str, headers: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut reply))
        .await
        .expect("an answer in time")
        .unwrap();
    let status = std::str::from_utf8(&reply[9..12]).unwrap().parse().unwrap();
    let split = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (status, reply[split..].to_vec())
}

/// A unary Connect call in JSON: the answer, or the error's code.
async fn unary(address: &str, method: &str, request: Value) -> Result<Value, String> {
    let headers = "Content-Type: application/json\r\n";
    let (status, body) = http(address, method, headers, request.to_string().as_bytes()).await;
    let answer: Value = serde_json::from_slice(&body).unwrap();
    match status {
        200 => Ok(answer),
        _ => Err(answer["code"].as_str().unwrap().to_owned()),
    }
}

/// A server-streaming Connect call in JSON, as `user`; the whole raw answer, as text.
async fn stream(address: &str, method: &str, user: &str, request: Value) -> String {
    let data = request.to_string();
    let mut body = vec![0];
    body.extend_from_slice(&(data.len() as u32).to_be_bytes());
    body.extend_from_slice(data.as_bytes());
    let basic = b64(format!("{user}:").as_bytes());
    let headers =
        format!("Content-Type: application/connect+json\r\nAuthorization: Basic {basic}\r\n");
    let (_, answer) = http(address, method, &headers, &body).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// A daemon with an envd listener on a free loopback port, and that address.
fn envd_daemon(args: &[&str]) -> (Daemon, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let mut all = vec!["--envd-listen", &address];
    all.extend(args);
    (Daemon::start_with(&all, &[]), address)
}

/// `a/flip` flipped between `a/shown` (holding a file `x`) and the denied `d` (holding a file of
/// 4,242 bytes) as fast as the host can, on a thread of its own, until stopped.
struct LinkFlipper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl LinkFlipper {
    fn start(tenant: &Tenant) -> Self {
        let (shown, denied) = (tenant.at("a/shown"), tenant.at("d"));
        std::fs::create_dir(&shown).unwrap();
        std::fs::write(shown.join("file"), "x").unwrap();
        std::fs::write(denied.join("file"), vec![b's'; 4242]).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stopped, flip, next) = (stop.clone(), tenant.at("a/flip"), tenant.at("a/next"));
        let thread = std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let target = if flips % 2 == 0 { &shown } else { &denied };
                std::os::unix::fs::symlink(target, &next).unwrap();
                std::fs::rename(&next, &flip).unwrap();
                flips += 1;
            }
            flips
        });
        Self { stop, thread }
    }

    /// Stops flipping; the number of flips made.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// A tenant's directories: `a` it may write, `d` it may not see, `profile` the listener's
/// `--envd-sandbox` (read everything, write `a`, deny `d`).
struct Tenant {
    dir: tempfile::TempDir,
}

impl Tenant {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "d"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        let profile = json!({"type": "managed", "network": "restricted", "file_system": {
        "type": "restricted", "entries": [
            entry(special("root"), "read"),
            entry(path(&dir.path().join("a")), "write"),
            entry(path(&dir.path().join("d")), "deny"),
        ]}});
        std::fs::write(dir.path().join("profile.json"), profile.to_string()).unwrap();
        Self { dir }
    }

    fn at(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn daemon(&self) -> (Daemon, String) {
        let profile = self.at("profile.json");
        envd_daemon(&["--envd-sandbox", profile.to_str().unwrap()])
    }
}

/// Item 1: an empty token file (or one of whitespace) satisfied "beyond loopback needs a
/// token", and a request without `X-Access-Token` was served. Each is refused at start.
#[tokio::test]
async fn an_empty_envd_token_file_is_refused_at_start() {
    for content in ["", "\n", " \t\r\n"] {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, content).unwrap();
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let port = free_port();
        let listen = format!("0.0.0.0:{port}");
        let args = ["--envd-listen", &listen, "--envd-access-token-file"];
        let mut command = Daemon::command(
            env!("CARGO_BIN_EXE_exec-server"),
            &args,
            &[(STATE_DIR_VAR, "none")],
        );
        command.arg(&token).stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        let begun = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() && begun.elapsed() < TIMEOUT {
            let address = format!("127.0.0.1:{port}");
            if tokio::net::TcpStream::connect(&address).await.is_ok()
                && unary(&address, "/process.Process/List", json!({}))
                    .await
                    .is_ok()
            {
                child.kill().unwrap();
                panic!("token file {content:?}: a request without a token was served");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{content:?}: {stderr}");
        assert!(stderr.contains("holds no token"), "{content:?}: {stderr}");
    }
}

/// Item 2: under `--envd-sandbox`, the helper checked `a/flip` and the daemon then listed (and
/// stat'ed) it again itself: flipped meanwhile to the denied `d`, the answer was d's. Many
/// concurrent calls race a link flipped as fast as the host can; none may show d's entries.
#[tokio::test]
async fn listings_and_stats_racing_a_link_swap_never_show_a_denied_directory() {
    let tenant = Tenant::new();
    let (_daemon, address) = tenant.daemon();
    std::fs::write(tenant.at("d/secret"), "s").unwrap();
    let flipper = LinkFlipper::start(&tenant);
    let flip = tenant.at("a/flip").display().to_string();
    let calls = (0..8).map(|_| {
        let (address, flip) = (address.clone(), flip.clone());
        tokio::spawn(async move {
            let (mut leaks, mut listed_shown) = (Vec::new(), 0);
            for _ in 0..60 {
                let listing = unary(
                    &address,
                    "/filesystem.Filesystem/ListDir",
                    json!({"path": flip, "depth": 1}),
                )
                .await;
                if let Ok(listing) = listing {
                    let text = listing.to_string();
                    listed_shown += usize::from(text.contains("/flip/file"));
                    if text.contains("secret") || text.contains("4242") {
                        leaks.push(text);
                    }
                }
                let stat = unary(
                    &address,
                    "/filesystem.Filesystem/Stat",
                    json!({"path": format!("{flip}/file")}),
                )
                .await;
                if let Ok(stat) = stat {
                    if stat["entry"]["size"] == "4242" {
                        leaks.push(stat.to_string());
                    }
                }
            }
            (leaks, listed_shown)
        })
    });
    let outcomes = futures::future::join_all(calls).await;
    let flips = flipper.stop();
    let leaks: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.as_ref().unwrap().0.clone())
        .collect();
    let listed_shown: usize = outcomes.iter().map(|o| o.as_ref().unwrap().1).sum();
    assert!(
        flips > 100 && listed_shown > 0,
        "no race: {flips} flips, {listed_shown} listed"
    );
    assert!(
        leaks.is_empty(),
        "{} of 960 calls showed d: {:?}",
        leaks.len(),
        leaks.first()
    );
}

/// Item 3: a recursive watch of `a` reported the events of the denied `d` through a link in
/// `a`. Under a restricting `--envd-sandbox` watches are refused, as `fs/watch` refuses them.
#[tokio::test]
async fn watches_under_a_restricting_envd_sandbox_are_refused() {
    let tenant = Tenant::new();
    std::os::unix::fs::symlink(tenant.at("d"), tenant.at("a/dlink")).unwrap();
    let (_daemon, address) = tenant.daemon();
    let request = json!({"path": tenant.at("a"), "recursive": true, "includeEntry": true});
    let created = unary(
        &address,
        "/filesystem.Filesystem/CreateWatcher",
        request.clone(),
    )
    .await;
    if let Ok(created) = &created {
        std::fs::write(tenant.at("d/secret"), "s").unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let events = unary(
            &address,
            "/filesystem.Filesystem/GetWatcherEvents",
            created.clone(),
        )
        .await;
        panic!("a watch ran unconfined; its events: {events:?}");
    }
    assert_eq!(created.unwrap_err(), "failed_precondition");
    let streamed = stream(&address, "/filesystem.Filesystem/WatchDir", "root", request).await;
    assert!(streamed.contains("failed_precondition"), "{streamed}");
}

/// Item 3, unconfined: a recursive watch does not follow a link out of its tree.
#[tokio::test]
async fn a_recursive_envd_watch_does_not_follow_links() {
    let dir = tempfile::tempdir().unwrap();
    let (watched, elsewhere) = (dir.path().join("watched"), dir.path().join("elsewhere"));
    std::fs::create_dir(&watched).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, watched.join("link")).unwrap();
    let (_daemon, address) = envd_daemon(&[]);
    let request = json!({"path": watched, "recursive": true});
    let id = unary(&address, "/filesystem.Filesystem/CreateWatcher", request)
        .await
        .unwrap();
    std::fs::write(elsewhere.join("outside"), "o").unwrap();
    std::fs::write(watched.join("inside"), "i").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = unary(&address, "/filesystem.Filesystem/GetWatcherEvents", id)
        .await
        .unwrap()
        .to_string();
    assert!(
        events.contains("inside") && !events.contains("outside"),
        "{events}"
    );
}

/// Item 4: 128 `CreateWatcher`s (from many connections at once) took every inotify instance of
/// the uid, and `fs/watch` then failed with errno 24. The listener has a connection's share of
/// the daemon's one watch budget, and the WebSocket's `fs/watch` still works.
#[tokio::test]
async fn envd_watchers_are_counted_in_the_daemons_one_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, address) = envd_daemon(&[]);
    use futures::StreamExt as _;
    let calls = (0..128).map(|_| {
        let (address, request) = (address.clone(), json!({"path": dir.path()}));
        async move { unary(&address, "/filesystem.Filesystem/CreateWatcher", request).await }
    });
    let outcomes: Vec<_> = futures::stream::iter(calls)
        .buffer_unordered(16)
        .collect()
        .await;
    let made = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = (outcomes.iter())
        .filter(|o| o.as_ref().err().map(String::as_str) == Some("resource_exhausted"))
        .count();
    assert_eq!((made, refused), (32, 96));
    assert!(inotify_instances(daemon.pid()) <= 32 + 1);
    let (client, _) = daemon.session().await;
    let uri = format!("file://{}", dir.path().display());
    client
        .call("fs/watch", json!({"watchId": "w", "path": uri}))
        .await;
}

/// Item 5: a recursive envd watch held 316 directories under `--max-watched-directories 64`.
#[tokio::test]
async fn a_recursive_envd_watch_honours_the_directory_budget() {
    let dir = tempfile::tempdir().unwrap();
    for index in 0..100 {
        std::fs::create_dir_all(dir.path().join(format!("{index}/sub"))).unwrap();
    }
    let (_daemon, address) = envd_daemon(&["--max-watched-directories", "64"]);
    let request = json!({"path": dir.path(), "recursive": true});
    let created = unary(
        &address,
        "/filesystem.Filesystem/CreateWatcher",
        request.clone(),
    )
    .await;
    assert_eq!(created.unwrap_err(), "resource_exhausted");
    let streamed = stream(&address, "/filesystem.Filesystem/WatchDir", "root", request).await;
    assert!(
        streamed.contains("limit of 64 watched directories"),
        "{streamed}"
    );
}

/// The descriptors `pid` holds.
fn descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Item 6: 460 requests that sent a head and stalled their body, at once, under a 400-fd limit,
/// kept 388 descriptors past 6 s and locked new WebSocket clients out. Each body now has a
/// deadline (`--upgrade-timeout`), past which its connection closes.
#[tokio::test]
async fn stalled_request_bodies_are_closed_at_their_deadline() {
    let address = format!("127.0.0.1:{}", free_port());
    let args = ["--envd-listen", &address, "--upgrade-timeout", "2s"];
    let daemon = daemon_with_fd_limits(&args, 400, 400);
    let head = b"POST /process.Process/List HTTP/1.1\r\nHost: x\r\n\
        Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
    // From ten peers, in waves of 20 whose heads are in before the next: none is refused as
    // one peer's share of the HTTP phase, as many at once would be.
    let mut stalled_bodies = Vec::new();
    for wave in 0..23 {
        let peer = format!("127.0.0.{}", 1 + wave % 10);
        let connections = (0..20).map(|_| stalled(&peer, &address, head));
        stalled_bodies.extend(futures::future::join_all(connections).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = descriptors(daemon.pid());
    assert!(
        held < 100,
        "{held} descriptors held 5 s after 460 stalled bodies"
    );
    let client = tokio::time::timeout(TIMEOUT, daemon.client())
        .await
        .expect("a new WebSocket client is served");
    client.initialize(None).await.unwrap();
    drop(stalled_bodies);
}

/// Item 11: under `--envd-sandbox`, a command as another user was `internal`; the documented
/// answer is `permission_denied`.
#[tokio::test]
async fn another_user_under_the_envd_sandbox_is_permission_denied() {
    let tenant = Tenant::new();
    let (_daemon, address) = tenant.daemon();
    let start = json!({"process": {"cmd": "/bin/true", "cwd": tenant.at("a")}});
    let answer = stream(&address, "/process.Process/Start", "nobody", start).await;
    assert!(answer.contains("permission_denied"), "{answer}");
}

/// Item 11: `Stat` of a link planted in `a` reported its target's type, mode and path resolved
/// inside the denied `d` (through a link there). It now reports what the sandbox resolves:
/// nothing of `d`.
#[tokio::test]
async fn stat_of_a_planted_link_reveals_nothing_of_a_denied_target() {
    let tenant = Tenant::new();
    let secret = tenant.at("d/secret-file");
    std::fs::write(&secret, "s").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink(&secret, tenant.at("d/inner")).unwrap();
    std::os::unix::fs::symlink(tenant.at("d/inner"), tenant.at("a/plant")).unwrap();
    let (_daemon, address) = tenant.daemon();
    let stat = unary(
        &address,
        "/filesystem.Filesystem/Stat",
        json!({"path": tenant.at("a/plant")}),
    )
    .await
    .unwrap();
    let entry = &stat["entry"];
    assert_ne!(entry["mode"], json!(0o640), "{stat}");
    assert_ne!(entry["type"], json!("FILE_TYPE_FILE"), "{stat}");
    assert!(
        !entry["symlinkTarget"].to_string().contains("secret-file"),
        "{stat}"
    );
}

/// Item 2, the same check-then-look elsewhere: `MakeDir` looked at the path itself first, so it
/// told a directory in the denied `d` (`already_exists`) from a missing one. Both now answer as
/// the sandbox sees them.
#[tokio::test]
async fn make_dir_in_a_denied_directory_answers_alike_whatever_is_there() {
    let tenant = Tenant::new();
    std::fs::create_dir(tenant.at("d/existing")).unwrap();
    let (_daemon, address) = tenant.daemon();
    let mut codes = Vec::new();
    for name in ["d/existing", "d/missing"] {
        let made = unary(
            &address,
            "/filesystem.Filesystem/MakeDir",
            json!({"path": tenant.at(name)}),
        )
        .await;
        codes.push(made.unwrap_err());
    }
    assert_eq!(codes, ["permission_denied", "permission_denied"]);
    assert!(!tenant.at("d/missing").exists());
}

/// A `GET /files` on a new connection; the raw answer, headers and body, as text.
async fn download(address: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request =
        format!("GET /files?path={path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut reply)).await;
    String::from_utf8_lossy(&reply).into_owned()
}

/// Item 2, `GET /files`: the daemon took the length from the path itself, then served the file
/// the sandbox opened: racing a link swap, the denied file's length came out as the header.
#[tokio::test]
async fn downloads_racing_a_link_swap_never_show_a_denied_file() {
    let tenant = Tenant::new();
    let (_daemon, address) = tenant.daemon();
    let flipper = LinkFlipper::start(&tenant);
    let file = format!("{}/file", tenant.at("a/flip").display());
    let calls = (0..8).map(|_| {
        let (address, file) = (address.clone(), file.clone());
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for _ in 0..60 {
                answers.push(download(&address, &file).await);
            }
            answers
        })
    });
    let answers: Vec<String> = (futures::future::join_all(calls).await.into_iter())
        .flat_map(Result::unwrap)
        .collect();
    let flips = flipper.stop();
    let served = answers.iter().filter(|a| a.ends_with("\r\n\r\nx")).count();
    let leaks: Vec<_> = answers
        .iter()
        .filter(|a| a.contains("4242") || a.contains("sss"))
        .collect();
    assert!(
        flips > 100 && served > 0,
        "no race: {flips} flips, {served} served"
    );
    assert!(
        leaks.is_empty(),
        "{} of 480 showed d: {:?}",
        leaks.len(),
        leaks.first()
    );
}

/// Item 4, daemon-wide: listeners and connections together hold at most half the uid's inotify
/// instances, so envd tenants filling every listener leave the rest to the host's processes;
/// the WebSocket's `fs/watch` is then refused by the same budget, not by the kernel.
#[tokio::test]
async fn watchers_of_every_listener_stop_at_half_the_users_inotify_instances() {
    use futures::StreamExt as _;
    let instances: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let limit = instances / 2;
    let addresses: Vec<String> = (0..limit / 32 + 1)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut args = Vec::new();
    for address in &addresses {
        args.extend(["--envd-listen", address.as_str()]);
    }
    let daemon = Daemon::start_with(&args, &[]);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let calls = (addresses.iter()).flat_map(|address| {
        (0..32).map(move |_| {
            let request = json!({"path": dir});
            async move { unary(address, "/filesystem.Filesystem/CreateWatcher", request).await }
        })
    });
    let outcomes: Vec<_> = futures::stream::iter(calls)
        .buffer_unordered(16)
        .collect()
        .await;
    let made = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(made, limit, "{outcomes:?}");
    assert!(inotify_instances(daemon.pid()) <= limit + 1);
    let (client, _) = daemon.session().await;
    let uri = format!("file://{}", dir.display());
    let error = (client
        .request("fs/watch", json!({"watchId": "w", "path": uri}))
        .await)
        .unwrap_err();
    let expected = format!("at most {limit} watches may be open for the daemon");
    assert_eq!(error["message"], json!(expected), "{error}");
}

/// Item 9 on the envd listener: 600 half-sent request heads from one address, then a request
/// from that same address (behind a NAT or a proxy every client is one peer) is answered within
/// two seconds: the attacker's oldest pending connections are closed to make room, instead of
/// the newcomer, and no more than the per-peer share (256) stays open.
#[tokio::test]
async fn half_sent_requests_to_envd_yield_to_a_new_one() {
    let (_daemon, address) = envd_daemon(&[]);
    let head = b"POST /health HTTP/1.1\r\nHost: x\r\n";
    let attack =
        futures::future::join_all((0..600).map(|_| stalled("127.0.0.1", &address, head))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) =
        tokio::time::timeout(Duration::from_secs(2), http(&address, "/health", "", b""))
            .await
            .expect("a new request from the attacker's address is answered within 2 s");
    assert_eq!(
        status, 405,
        "/health takes GET; what matters is that it was answered"
    );
    let open = crate::hardening_listeners::still_open(attack, Duration::from_secs(1)).await;
    assert!(open <= 256, "{open} of 600 half-sent requests still open");
}
