//! codex's own exec-server (the npm package `@openai/codex`, pinned) beside ours in the same
//! run: one plain JSON-RPC client, written here for both so neither gets a better client,
//! interleaving the two daemons run by run. Exec round trips of `true`, sandboxed ones, and
//! streaming output, with the output bytes the `process/output` notifications missed.

use crate::harness::{micros, stats, Results, Size, Workspace, PATH};
use crate::report::Row;
use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::io::BufRead as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// The release measured against, as the tests' referee (tests/it/common/codex_peer.rs).
const CODEX_VERSION: &str = "0.171.0";

/// Bytes each streaming run writes (`head -c`).
const STREAM_BYTES: u64 = 200 << 20;

/// A running `codex exec-server` on a loopback port; its process group is killed on drop (the
/// `codex` command is a node launcher running the native server as its child).
pub(crate) struct CodexServer {
    child: Child,
    pub(crate) url: String,
    binary: PathBuf,
    _home: tempfile::TempDir,
}

impl CodexServer {
    /// [`CodexServer::start`], or None with why noted under `key` for the row named `what`.
    pub(crate) fn start_or_note(r: &mut Results, key: &str, what: &str) -> Option<Self> {
        match Self::start() {
            Ok(codex) => Some(codex),
            Err(why) => {
                eprintln!("bench: skipping {what}: {why}");
                r.note(key, why);
                None
            }
        }
    }

    /// Installs the package with npm under target/ when missing, then starts it.
    pub(crate) fn start() -> Result<Self, String> {
        let prefix = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .join(format!("codex-peer-{CODEX_VERSION}"));
        let binary = prefix.join("node_modules/.bin/codex");
        if !binary.exists() {
            eprintln!("bench: installing @openai/codex@{CODEX_VERSION} with npm");
            let installed = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&prefix)
                .arg(format!("@openai/codex@{CODEX_VERSION}"))
                .stdout(Stdio::null())
                .status()
                .map_err(|err| format!("npm is needed to install codex's exec-server: {err}"))?;
            if !installed.success() {
                return Err("npm install @openai/codex failed".into());
            }
        }
        let home = tempfile::tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
        let mut child = Command::new(&binary)
            .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
            .env("CODEX_HOME", home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|err| format!("cannot start codex exec-server: {err}"))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let url = line.trim().to_owned();
        if !url.starts_with("ws://") {
            return Err(format!("codex exec-server printed {url:?}"));
        }
        Ok(Self {
            child,
            url,
            binary,
            _home: home,
        })
    }

    /// The `codex` launcher, which also runs the agent (`codex exec`).
    pub(crate) fn binary(&self) -> &std::path::Path {
        &self.binary
    }
}

impl Drop for CodexServer {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process group this server leads.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The plain client: text frames, codex's dialect, nothing either daemon adds.
pub(crate) struct Plain {
    ws: Ws,
    next_id: u64,
}

/// What one process did, as its notifications told.
pub(crate) struct Run {
    pub(crate) elapsed: Duration,
    pub(crate) output_bytes: u64,
    /// `process/exited`'s, when it came.
    pub(crate) exit_code: Option<i64>,
}

impl Plain {
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Self> {
        let (ws, _) = tokio_tungstenite::connect_async(url).await?;
        let mut plain = Self { ws, next_id: 1 };
        let id = plain
            .send("initialize", json!({"clientName": "bench"}))
            .await?;
        plain.reply(id).await?;
        let initialized = json!({"method": "initialized", "params": {}});
        plain
            .ws
            .send(Message::text(initialized.to_string()))
            .await?;
        Ok(plain)
    }

    async fn send(&mut self, method: &str, params: Value) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"id": id, "method": method, "params": params});
        self.ws.send(Message::text(request.to_string())).await?;
        Ok(id)
    }

    async fn next(&mut self) -> anyhow::Result<Value> {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text)?),
                Some(Ok(_)) => continue,
                Some(Err(err)) => return Err(err.into()),
                None => anyhow::bail!("connection closed"),
            }
        }
    }

    /// Skips to the reply to request `id`.
    async fn reply(&mut self, id: u64) -> anyhow::Result<Value> {
        loop {
            let message = self.next().await?;
            if message["id"] == id {
                return Ok(message);
            }
        }
    }

    /// Starts `argv` (under `sandbox`) and follows it to `process/closed`.
    async fn run(
        &mut self,
        id: &str,
        argv: &[&str],
        sandbox: Option<&Value>,
    ) -> anyhow::Result<Run> {
        let mut params = start_params(id, argv);
        if let Some(sandbox) = sandbox {
            params["sandbox"] = sandbox.clone();
        }
        self.run_params(id, params).await
    }

    /// Sends `process/start` with `params` (of process `id`) and follows the process to
    /// `process/closed`.
    pub(crate) async fn run_params(&mut self, id: &str, params: Value) -> anyhow::Result<Run> {
        let started = Instant::now();
        let request = self.send("process/start", params).await?;
        let (mut output_bytes, mut exit_code) = (0, None);
        loop {
            let message = self.next().await?;
            if message["id"] == request {
                if let Some(error) = message.get("error") {
                    anyhow::bail!("process/start failed: {error}");
                }
                continue;
            }
            if message["params"]["processId"] != id {
                continue;
            }
            match message["method"].as_str() {
                Some("process/output") => {
                    let chunk = message["params"]["chunk"].as_str().unwrap_or_default();
                    output_bytes += BASE64.decode(chunk)?.len() as u64;
                }
                Some("process/exited") => exit_code = message["params"]["exitCode"].as_i64(),
                Some("process/closed") => break,
                _ => {}
            }
        }
        Ok(Run {
            elapsed: started.elapsed(),
            output_bytes,
            exit_code,
        })
    }
}

/// `process/start`'s params for `argv` in `/`, unsandboxed, with nothing but `PATH`.
pub(crate) fn start_params(id: &str, argv: &[&str]) -> Value {
    json!({"processId": id, "argv": argv, "cwd": "file:///", "env": {"PATH": PATH}, "tty": false})
}

/// Both daemons' samples of one measure.
#[derive(Default)]
pub(crate) struct Pair {
    pub(crate) ours: Vec<f64>,
    pub(crate) codex: Vec<f64>,
}

/// Measures codex's exec-server beside ours (`ours_url`), or notes why it could not.
pub(crate) async fn compare(ours_url: &str, size: &Size, workspace: &Workspace, r: &mut Results) {
    let Some(codex) = CodexServer::start_or_note(r, "codex_exec_rtt_us", "codex's exec-server")
    else {
        return;
    };
    let outcome = tokio::time::timeout(
        Duration::from_secs(600),
        measure(ours_url, &codex.url, size, workspace, r),
    )
    .await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(err)) => r.note("codex_skipped", format!("{err:#}")),
        Err(_) => r.note("codex_skipped", "did not finish in 10 minutes"),
    }
}

async fn measure(
    ours_url: &str,
    codex_url: &str,
    size: &Size,
    workspace: &Workspace,
    r: &mut Results,
) -> anyhow::Result<()> {
    let mut clients = [
        Plain::connect(ours_url).await?,
        Plain::connect(codex_url).await?,
    ];
    let (mut exec, mut sandboxed) = (Pair::default(), Pair::default());
    let mut sandbox_failed = [None, None];
    let runs = size.exec_runs / 2;
    for run in 0..runs / 10 + runs {
        let counted = run >= runs / 10;
        for (side, client) in clients.iter_mut().enumerate() {
            let sample = micros(
                client
                    .run(&format!("t{run}"), &["true"], None)
                    .await?
                    .elapsed,
            );
            if counted {
                exec.push(side, sample);
            }
            if run % 3 != 0 || sandbox_failed[side].is_some() {
                continue;
            }
            let id = format!("s{run}");
            match client.run(&id, &["true"], Some(&workspace.sandbox)).await {
                Ok(done) if counted => sandboxed.push(side, micros(done.elapsed)),
                Ok(_) => {}
                Err(err) => sandbox_failed[side] = Some(format!("{err:#}")),
            }
        }
    }
    r.put_rtt("exec_beside_codex", &mut exec.ours);
    r.put_rtt("codex_exec", &mut exec.codex);
    r.ratio(
        "exec_vs_codex",
        "exec_beside_codex_rtt_us",
        "codex_exec_rtt_us",
    );
    for (side, name) in [(0, "sandbox_beside_codex"), (1, "codex_sandbox")] {
        match &sandbox_failed[side] {
            Some(why) => r.note(&format!("{name}_rtt_us"), why.clone()),
            None => r.put_rtt(name, sandboxed.side(side)),
        }
    }
    r.ratio(
        "sandbox_vs_codex",
        "sandbox_beside_codex_rtt_us",
        "codex_sandbox_rtt_us",
    );
    stream(&mut clients, size, r).await
}

/// `head -c` of [`STREAM_BYTES`] per run, alternating; MB/s, and what the notifications missed
/// over all runs together.
async fn stream(clients: &mut [Plain; 2], size: &Size, r: &mut Results) -> anyhow::Result<()> {
    let bytes = STREAM_BYTES.to_string();
    let argv = ["head", "-c", &bytes, "/dev/zero"];
    let mut rates = Pair::default();
    let mut missing = [0u64; 2];
    for run in 0..size.stream_runs {
        for (side, client) in clients.iter_mut().enumerate() {
            let done = client.run(&format!("z{run}"), &argv, None).await?;
            rates.push(
                side,
                crate::harness::mb_per_s(done.output_bytes, done.elapsed),
            );
            missing[side] += STREAM_BYTES.saturating_sub(done.output_bytes);
        }
    }
    let total = STREAM_BYTES * size.stream_runs as u64;
    r.put("stream_beside_codex_mb_s", Some(stats(&mut rates.ours).0));
    r.put("codex_stream_mb_s", Some(stats(&mut rates.codex).0));
    r.ratio(
        "stream_vs_codex",
        "stream_beside_codex_mb_s",
        "codex_stream_mb_s",
    );
    r.put(
        "stream_beside_codex_missing_mb",
        Some(missing[0] as f64 / 1e6),
    );
    r.put("codex_stream_missing_mb", Some(missing[1] as f64 / 1e6));
    r.put("codex_streamed_mb", Some(total as f64 / 1e6));
    Ok(())
}

impl Pair {
    pub(crate) fn push(&mut self, side: usize, sample: f64) {
        self.side(side).push(sample);
    }

    fn side(&mut self, side: usize) -> &mut Vec<f64> {
        if side == 0 {
            &mut self.ours
        } else {
            &mut self.codex
        }
    }
}

pub(crate) const ROWS: &[Row] = &[
    Row {
        what: "beside codex's exec-server 0.171.0 (one plain client, interleaved): exec round trip of `true`, µs",
        ours: "exec_beside_codex_rtt_us",
        baselines: &[("codex", "codex_exec_rtt_us"), ("× codex", "exec_vs_codex")],
        target: "≤ codex",
        met: |r| Some(r.get("exec_vs_codex")? <= 1.0),
    },
    Row {
        what: "beside codex: sandboxed exec round trip (workspace-write, one launch in three), µs",
        ours: "sandbox_beside_codex_rtt_us",
        baselines: &[("codex", "codex_sandbox_rtt_us"), ("× codex", "sandbox_vs_codex")],
        target: "≤ codex",
        met: |r| Some(r.get("sandbox_vs_codex")? <= 1.0),
    },
    Row {
        what: "beside codex: streaming `head -c 200M /dev/zero` through process/output, MB/s",
        ours: "stream_beside_codex_mb_s",
        baselines: &[("codex", "codex_stream_mb_s"), ("× codex", "stream_vs_codex")],
        target: "≥ codex",
        met: |r| Some(r.get("stream_vs_codex")? >= 1.0),
    },
    Row {
        what: "beside codex: output bytes the process/output notifications missed, MB (of codex_streamed_mb each)",
        ours: "stream_beside_codex_missing_mb",
        baselines: &[("codex", "codex_stream_missing_mb")],
        target: "0",
        met: |r| Some(r.get("stream_beside_codex_missing_mb")? == 0.0),
    },
];
