//! The attacks family: a client that never reads its socket floods the daemon, or leaves
//! requests stuck in flight, while 50 others ask `environment/info`; the daemon's peak RSS,
//! their p99 and the descriptors left behind.

use crate::daemon::Daemon;
use crate::harness::{http_server, stats, wide_tree, write_file, Results, PATH};
use crate::report::Row;
use anyhow::Context as _;
use exec_server_client::{path_uri, Client, ClientOptions};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long each attack runs.
const ATTACK_TIME: Duration = Duration::from_secs(3);

/// Clients asking `environment/info` while an attack runs.
const BYSTANDERS: usize = 50;

/// A WebSocket client that writes requests and never reads its socket (a tiny receive
/// buffer, so the daemon soon cannot write to it either). Frames are written by hand.
struct Flooder(tokio::net::TcpStream);

impl Flooder {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let addr = url.strip_prefix("ws://").context("a ws:// URL")?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_recv_buffer_size(4096)?;
        let mut tcp = socket.connect(addr.parse()?).await?;
        let upgrade = format!(
            "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        tcp.write_all(upgrade.as_bytes()).await?;
        // The 101 response, up to its blank line; nothing is read after it.
        let mut reader = tokio::io::BufReader::with_capacity(1, &mut tcp);
        let mut line = String::new();
        while line != "\r\n" {
            line.clear();
            anyhow::ensure!(reader.read_line(&mut line).await? > 0, "no upgrade");
        }
        let mut flooder = Self(tcp);
        flooder
            .send(&json!({"id": 0, "method": "initialize", "params": {"clientName": "flood"}}))
            .await?;
        flooder.send(&json!({"method": "initialized"})).await?;
        Ok(flooder)
    }

    /// One masked text frame; the mask key is zero (clients must mask, any key will do).
    async fn send(&mut self, message: &Value) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt as _;
        let payload = message.to_string().into_bytes();
        let mut frame = vec![0x81u8];
        match payload.len() {
            len if len < 126 => frame.push(0x80 | len as u8),
            len if len <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend((len as u16).to_be_bytes());
            }
            len => {
                frame.push(0x80 | 127);
                frame.extend((len as u64).to_be_bytes());
            }
        }
        frame.extend([0; 4]);
        frame.extend(payload);
        self.0.write_all(&frame).await
    }

    /// Sends every request, until the daemon stops reading (then this waits for good).
    async fn flood(mut self, requests: impl Iterator<Item = Value>) -> anyhow::Result<()> {
        for request in requests {
            self.send(&request).await?;
        }
        std::future::pending().await
    }
}

/// Accepts every connection and never answers (nor closes): an HTTP server that is stuck.
/// Counts the connections still open, so the bench sees the daemon let go of them.
async fn silent_server() -> anyhow::Result<(String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>)>
{
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let open = Arc::new(AtomicUsize::new(0));
    let counter = open.clone();
    let server = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let open = counter.clone();
            open.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                // Reads (and ignores) until the daemon closes its end.
                while tcp.read(&mut [0; 4096]).await.is_ok_and(|read| read > 0) {}
                open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    Ok((url, open, server))
}

/// Stuck requests in flight at once in each `stuck_*` attack.
const STUCK: usize = 16;

/// The open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// Each attack on a fresh daemon with default flags: its peak RSS, the p99
/// `environment/info` round trip of [`BYSTANDERS`] other clients meanwhile, and the
/// descriptors it still holds beyond its bystanders' once the attacker disconnected.
pub(crate) async fn measure(binary: &Path, r: &mut Results) -> anyhow::Result<()> {
    let targets = Targets::new()?;
    let (http_url, server) = http_server(256 << 20).await?;
    let (silent_url, silent_open, silent) = silent_server().await?;
    walk_alone(binary, &targets, r).await?;
    for (name, requests) in targets.attacks(&http_url, &silent_url) {
        attack(binary, name, requests, r).await?;
    }
    server.abort();
    r.put(
        "attack_stuck_http_server_open",
        Some(silent_open.load(Ordering::Relaxed) as f64),
    );
    silent.abort();
    Ok(())
}

/// What the attacks aim at: a 32 MiB file, a FIFO without a writer, a tree of 90,000 files
/// and a sandbox whose glob walks it, in a directory removed with them.
struct Targets {
    file: String,
    fifo: String,
    tree: String,
    walking_sandbox: Value,
    _dir: tempfile::TempDir,
}

impl Targets {
    fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("32mib.bin");
        write_file(&file, 32 << 20)?;
        let file = path_uri(file.to_str().context("path is not UTF-8")?)?.to_string();
        let fifo = dir.path().join("fifo");
        anyhow::ensure!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()?
                .success(),
            "mkfifo failed"
        );
        let fifo = path_uri(fifo.to_str().context("path is not UTF-8")?)?.to_string();
        let tree = dir.path().join("tree");
        wide_tree(&tree, 90, 1000)?;
        let tree = path_uri(tree.to_str().context("path is not UTF-8")?)?.to_string();
        // Reads everything, and hides `**/*.env` under the tree: the start walks its 90,090 entries
        // (twice each: for `**` and for `*.env`) until the glob's bound of 100,000 visits refuses
        // it, the longest walk a start can make.
        let walking_sandbox = json!({
            "permissions": {"type": "managed", "network": "enabled", "file_system": {
                "type": "restricted", "entries": [
                    {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                    {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"}]}},
            "cwd": tree, "workspaceRoots": [tree], "windowsSandboxLevel": "disabled"});
        Ok(Self {
            file,
            fifo,
            tree,
            walking_sandbox,
            _dir: dir,
        })
    }

    /// Each attack's name and the requests its attacker sends.
    fn attacks(&self, http_url: &str, silent_url: &str) -> [(&'static str, Vec<Value>); 7] {
        let Self {
            file,
            fifo,
            tree,
            walking_sandbox,
            ..
        } = self;
        let long_id = "p".repeat(1 << 20);
        [
            (
                "flood",
                (1..=40_000)
                    .map(|id| json!({"id": id, "method": "environment/info", "params": {}}))
                    .collect(),
            ),
            (
                "readfile",
                (1..=24)
                    .map(|id| json!({"id": id, "method": "fs/readFile", "params": {"path": file}}))
                    .collect(),
            ),
            (
                "process_id",
                vec![json!({"id": 1, "method": "process/start", "params": {
                    "processId": long_id, "cwd": "file:///", "env": {"PATH": PATH}, "tty": false,
                    "argv": ["timeout", "10", "sh", "-c", "while :; do echo x; done"]}})],
            ),
            (
                "http_body",
                vec![json!({"id": 1, "method": "http/request",
                    "params": {"method": "GET", "url": http_url, "requestId": "r"}})],
            ),
            (
                "stuck_fifo",
                (1..=STUCK)
                    .map(|id| json!({"id": id, "method": "fs/readFile", "params": {"path": fifo}}))
                    .collect(),
            ),
            (
                "stuck_http",
                (1..=STUCK)
                    .map(|id| {
                        json!({"id": id, "method": "http/request", "params": {
                        "method": "GET", "url": silent_url, "requestId": format!("r{id}")}})
                    })
                    .collect(),
            ),
            (
                "stuck_walk",
                (1..=STUCK)
                    .map(|id| {
                        json!({"id": id, "method": "process/start", "params": {
                        "processId": format!("walk{id}"), "cwd": tree, "env": {"PATH": PATH},
                        "tty": false, "argv": ["true"], "sandbox": walking_sandbox}})
                    })
                    .collect(),
            ),
        ]
    }
}

/// What one walking start costs alone, and proof that it walks to the bound.
async fn walk_alone(binary: &Path, targets: &Targets, r: &mut Results) -> anyhow::Result<()> {
    let Targets {
        tree,
        walking_sandbox,
        ..
    } = targets;
    let daemon = Daemon::start(binary, &[])?;
    let client = Client::connect(ClientOptions::new(daemon.url.clone())).await?;
    let started = Instant::now();
    let refused = client
        .call(
            "process/start",
            json!({"processId": "walk", "cwd": tree, "env": {"PATH": PATH}, "tty": false,
                   "argv": ["true"], "sandbox": walking_sandbox}),
        )
        .await;
    r.put("walk_start_ms", Some(started.elapsed().as_secs_f64() * 1e3));
    anyhow::ensure!(
        refused
            .as_ref()
            .is_err_and(|err| err.to_string().contains("visits more than")),
        "the walk did not reach the bound: {refused:?}"
    );
    Ok(())
}

/// `requests` from a client that never reads, on a fresh daemon, while [`BYSTANDERS`] others
/// ask `environment/info`.
async fn attack(
    binary: &Path,
    name: &str,
    requests: Vec<Value>,
    r: &mut Results,
) -> anyhow::Result<()> {
    let daemon = Daemon::start(binary, &[])?;
    let mut bystanders = Vec::with_capacity(BYSTANDERS);
    for _ in 0..BYSTANDERS {
        bystanders.push(Client::connect(ClientOptions::new(daemon.url.clone())).await?);
    }
    let fds_before = open_fds(daemon.child.id());
    let attack = tokio::spawn(
        Flooder::connect(&daemon.url)
            .await?
            .flood(requests.into_iter()),
    );
    let until = Instant::now() + ATTACK_TIME;
    let rounds = bystanders.iter().map(|client| async move {
        let mut samples = Vec::new();
        while Instant::now() < until {
            let started = Instant::now();
            client.call("environment/info", json!({})).await?;
            samples.push(started.elapsed().as_secs_f64() * 1e3);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(samples)
    });
    let mut samples = Vec::new();
    for outcome in futures::future::join_all(rounds).await {
        samples.extend(outcome?);
    }
    let peak = daemon.peak_rss_kib() / 1024.0;
    attack.abort();
    // Its requests are cancelled with the connection (work already on a blocking thread,
    // such as a walk, runs to its end first).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fds_left = open_fds(daemon.child.id()).saturating_sub(fds_before);
    r.put(&format!("attack_{name}_fds_left"), Some(fds_left as f64));
    r.put(&format!("attack_{name}_rss_mib"), Some(peak));
    r.put(
        &format!("attack_{name}_info_p99_ms"),
        Some(stats(&mut samples).1),
    );
    Ok(())
}

pub(crate) const ROWS: &[Row] = &[
    Row {
        what: "peak RSS, MiB, while a client that never reads sends 40,000 `environment/info`",
        ours: "attack_flood_rss_mib",
        baselines: &[("p99 `environment/info` of 50 others, ms", "attack_flood_info_p99_ms")],
        target: "≤ 256 MiB, p99 ≤ 50 ms",
        met: |r| Some(
            r.get("attack_flood_rss_mib")? <= 256.0 && r.get("attack_flood_info_p99_ms")? <= 50.0
        ),
    },
    Row {
        what: "peak RSS, MiB, while a client that never reads sends 24 `fs/readFile` of 32 MiB",
        ours: "attack_readfile_rss_mib",
        baselines: &[("p99 `environment/info` of 50 others, ms", "attack_readfile_info_p99_ms")],
        target: "≤ 256 MiB, p99 ≤ 50 ms",
        met: |r| Some(
            r.get("attack_readfile_rss_mib")? <= 256.0 && r.get("attack_readfile_info_p99_ms")? <= 50.0
        ),
    },
    Row {
        what: "peak RSS, MiB, while a client that never reads starts a process with a 1 MiB `processId`",
        ours: "attack_process_id_rss_mib",
        baselines: &[("p99 `environment/info` of 50 others, ms", "attack_process_id_info_p99_ms")],
        target: "≤ 256 MiB, p99 ≤ 50 ms",
        met: |r| Some(
            r.get("attack_process_id_rss_mib")? <= 256.0 && r.get("attack_process_id_info_p99_ms")? <= 50.0
        ),
    },
    Row {
        what: "peak RSS, MiB, while a client that never reads asks a buffered `http/request` of a 256 MiB body",
        ours: "attack_http_body_rss_mib",
        baselines: &[("p99 `environment/info` of 50 others, ms", "attack_http_body_info_p99_ms")],
        target: "≤ 256 MiB, p99 ≤ 50 ms",
        met: |r| Some(
            r.get("attack_http_body_rss_mib")? <= 256.0 && r.get("attack_http_body_info_p99_ms")? <= 50.0
        ),
    },
    Row {
        what: "p99 `environment/info` of 50 others, ms, while 16 `fs/readFile` of a FIFO with no writer are in flight",
        ours: "attack_stuck_fifo_info_p99_ms",
        baselines: &[("descriptors left after the attacker left", "attack_stuck_fifo_fds_left")],
        target: "p99 ≤ 50 ms, 0 left",
        met: |r| Some(
            r.get("attack_stuck_fifo_info_p99_ms")? <= 50.0 && r.get("attack_stuck_fifo_fds_left")? == 0.0
        ),
    },
    Row {
        what: "p99 `environment/info` of 50 others, ms, while 16 `http/request` to a server that never answers are in flight",
        ours: "attack_stuck_http_info_p99_ms",
        baselines: &[
            ("descriptors left after the attacker left", "attack_stuck_http_fds_left"),
            ("server connections still open", "attack_stuck_http_server_open"),
        ],
        target: "p99 ≤ 50 ms, 0 left",
        met: |r| Some(
            r.get("attack_stuck_http_info_p99_ms")? <= 50.0
                && r.get("attack_stuck_http_fds_left")? == 0.0
                && r.get("attack_stuck_http_server_open")? == 0.0
        ),
    },
    Row {
        what: "p99 `environment/info` of 50 others, ms, while 16 sandboxed `process/start` each walk 100,000 entries for a glob",
        ours: "attack_stuck_walk_info_p99_ms",
        baselines: &[
            ("one such start alone (refused at the bound), ms", "walk_start_ms"),
            ("descriptors left after the attacker left", "attack_stuck_walk_fds_left"),
        ],
        target: "p99 ≤ 50 ms, 0 left",
        met: |r| Some(
            r.get("attack_stuck_walk_info_p99_ms")? <= 50.0 && r.get("attack_stuck_walk_fds_left")? == 0.0
        ),
    },
];
