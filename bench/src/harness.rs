//! What every family of rows shares: the run's size, the figures and their statistics, the
//! workspace the sandboxed rows launch in, and one exec through the daemon or locally.

use anyhow::{bail, Context as _};
use exec_server_client::{path_uri, Client, Command, ProcessEvent};
use serde_json::{json, Map, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

pub(crate) struct Size {
    pub(crate) exec_runs: usize,
    pub(crate) ssh_runs: usize,
    pub(crate) ssh_master_runs: usize,
    pub(crate) stream_bytes: u64,
    pub(crate) stream_runs: usize,
    pub(crate) file_bytes: u64,
    pub(crate) sessions: usize,
    pub(crate) retained: usize,
    pub(crate) resume_runs: usize,
    pub(crate) restart_runs: usize,
    /// Detached processes that each write [`crate::restart::DETACHED_OUTPUT`].
    pub(crate) detached: usize,
    /// Execs each of the [`crate::fanout::FANOUT_CONNECTIONS`] runs in the fan-out.
    pub(crate) fanout_per_connection: usize,
    /// Launches an aged fan-out daemon serves before it is measured (issue #43: 100,000).
    pub(crate) fanout_aged_launches: usize,
    /// Files in the large workspace.
    pub(crate) large_ws_files: usize,
    /// `codex exec` turns on each exec-server in the agent row.
    pub(crate) agent_turns: usize,
    /// Sandboxed `curl`s through the managed network proxy on each exec-server.
    pub(crate) proxy_runs: usize,
    /// `/execute` round trips each way (direct, routed, the reference) in the fleet's row.
    pub(crate) fleet_round_trips: usize,
    /// Rounds of the fleet's fan-out after the first (fresh connections).
    pub(crate) fleet_fanout_rounds: usize,
}

pub(crate) const QUICK: Size = Size {
    exec_runs: 300,
    ssh_runs: 5,
    ssh_master_runs: 20,
    stream_bytes: 256 << 20,
    stream_runs: 3,
    file_bytes: 256 << 20,
    sessions: 200,
    retained: 1_000,
    resume_runs: 20,
    restart_runs: 5,
    detached: 10,
    fanout_per_connection: 40,
    fanout_aged_launches: 5_000,
    large_ws_files: 20_000,
    agent_turns: 2,
    proxy_runs: 20,
    fleet_round_trips: 200,
    fleet_fanout_rounds: 5,
};

pub(crate) const FULL: Size = Size {
    exec_runs: 2_000,
    ssh_runs: 30,
    ssh_master_runs: 200,
    stream_bytes: 1 << 30,
    stream_runs: 5,
    file_bytes: 1 << 30,
    sessions: 1_000,
    retained: 10_000,
    resume_runs: 100,
    restart_runs: 20,
    detached: 100,
    // Not issue 25's 1,000: 50 × 1,000 plain, sandboxed and through xargs take 3–5 min on
    // 2 cores, 50 × 200 under one.
    fanout_per_connection: 200,
    fanout_aged_launches: 100_000,
    large_ws_files: 200_000,
    agent_turns: 5,
    proxy_runs: 100,
    fleet_round_trips: 1_000,
    fleet_fanout_rounds: 20,
};

pub(crate) const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Median and 99th percentile.
pub(crate) fn stats(samples: &mut [f64]) -> (f64, f64) {
    (percentile(samples, 0.5), percentile(samples, 0.99))
}

/// The sample at quantile `q` (0 to 1) of `samples`, which it sorts.
pub(crate) fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

pub(crate) fn micros(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e6
}

pub(crate) fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

pub(crate) fn command(argv: &[&str]) -> Command {
    Command::new(argv.iter().copied())
        .cwd("/")
        .expect("/ is a valid path")
        .env("PATH", PATH)
}

/// Waits for the last event; returns the output byte count.
pub(crate) async fn finish(process: &mut exec_server_client::Process) -> anyhow::Result<u64> {
    let mut bytes = 0;
    while let Some(event) = process.next_event().await {
        match event {
            ProcessEvent::Output { data, .. } => bytes += data.len() as u64,
            ProcessEvent::Gap { .. } | ProcessEvent::Failed { .. } => bail!("{event:?}"),
            _ => {}
        }
    }
    Ok(bytes)
}

pub(crate) async fn exec_once(client: &Client, sandbox: Option<&Value>) -> anyhow::Result<f64> {
    let mut cmd = command(&["true"]);
    if let Some(sandbox) = sandbox {
        cmd.params_mut().sandbox = Some(serde_json::from_value(sandbox.clone())?);
    }
    let started = Instant::now();
    let mut process = client.start(cmd).await?;
    finish(&mut process).await?;
    Ok(micros(started.elapsed()))
}

/// Spawns `command` and waits for it, its output captured.
pub(crate) fn spawn_once(mut command: std::process::Command) -> anyhow::Result<f64> {
    let started = Instant::now();
    let output = command.stdin(Stdio::null()).output()?;
    anyhow::ensure!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(micros(started.elapsed()))
}

/// A `git init`ed directory, as agents' workspaces are (its `.git` stays read-only inside the
/// write root), and the workspace-write profile over it: read everything, write the workspace.
pub(crate) struct Workspace {
    pub(crate) path: PathBuf,
    pub(crate) sandbox: Value,
    _dir: tempfile::TempDir,
}

impl Workspace {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let status = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .status()?;
        anyhow::ensure!(status.success(), "git init failed");
        let path = dir.path().canonicalize()?;
        let uri = path_uri(path.to_str().context("path is not UTF-8")?)?;
        let sandbox = json!({
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted", "entries": [
                    {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                    {"path": {"type": "special", "value": {"kind": "project_roots"}},
                     "access": "write"}]}},
            "cwd": uri, "workspaceRoots": [uri], "windowsSandboxLevel": "disabled"});
        Ok(Self {
            path,
            sandbox,
            _dir: dir,
        })
    }

    /// bubblewrap's launch of `true` in this workspace: the same confinement in kind (root
    /// read-only, the workspace writable, own pid and network namespaces).
    pub(crate) fn bwrap(&self, bwrap: &Path) -> std::process::Command {
        let mut command = std::process::Command::new(bwrap);
        command
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--bind"])
            .args([&self.path, &self.path])
            .args(["--unshare-pid", "--unshare-net", "--proc", "/proc", "true"]);
        command
    }
}

/// Serves one HTTP response of `bytes` zero bytes to every connection, on loopback; the URL
/// (`http://127.0.0.1:PORT/`) and the task serving it.
pub(crate) async fn http_server(
    bytes: usize,
) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    http_server_on(std::net::Ipv4Addr::LOCALHOST.into(), bytes).await
}

/// [`http_server`], listening on `ip`.
pub(crate) async fn http_server_on(
    ip: std::net::IpAddr,
    bytes: usize,
) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let server = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request is small and never read in full: the response does not depend
                // on it.
                let _ = tcp.read(&mut [0; 4096]).await;
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\n\r\n");
                let _ = tcp.write_all(head.as_bytes()).await;
                let block = vec![0u8; (1 << 20).min(bytes)];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(block.len());
                    if tcp.write_all(&block[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    Ok((url, server))
}

/// bubblewrap, installed from the distribution when missing; Err: why it cannot be had.
pub(crate) fn bubblewrap() -> Result<PathBuf, String> {
    crate::packages::ensure(&["bubblewrap"], || {
        crate::packages::which("bwrap").is_some()
    })?;
    crate::packages::which("bwrap").ok_or_else(|| "bwrap is not on PATH".into())
}

/// Samples per figure, recorded as their medians.
#[derive(Default)]
pub(crate) struct Medians(std::collections::BTreeMap<&'static str, Vec<f64>>);

impl Medians {
    pub(crate) fn add(&mut self, key: &'static str, sample: f64) {
        self.0.entry(key).or_default().push(sample);
    }

    pub(crate) fn record(self, r: &mut Results) {
        for (key, mut samples) in self.0 {
            r.put(key, Some(stats(&mut samples).0));
        }
    }
}

pub(crate) struct Results(pub(crate) Map<String, Value>);

impl Results {
    pub(crate) fn put(&mut self, key: &str, value: Option<f64>) {
        let value = value
            .filter(|v| v.is_finite())
            .map(|v| json!((v * 100.0).round() / 100.0))
            .unwrap_or(Value::Null);
        self.0.insert(key.into(), value);
    }

    pub(crate) fn note(&mut self, key: &str, text: impl Into<String>) {
        self.0.insert(key.into(), Value::String(text.into()));
    }

    pub(crate) fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// The median and p99 of round trips in µs, under `{name}_rtt_us` and `{name}_rtt_p99_us`.
    pub(crate) fn put_rtt(&mut self, name: &str, samples: &mut [f64]) {
        let (median, p99) = stats(samples);
        self.put(&format!("{name}_rtt_us"), Some(median));
        self.put(&format!("{name}_rtt_p99_us"), Some(p99));
    }

    /// As [`Self::put_rtt`]; when there are none, why, in the median's place (the table shows it).
    pub(crate) fn put_rtt_or_why(&mut self, name: &str, samples: &mut anyhow::Result<Vec<f64>>) {
        match samples {
            Ok(samples) => self.put_rtt(name, samples),
            Err(err) => {
                eprintln!("bench: no {name} round trips: {err}");
                self.note(&format!("{name}_rtt_us"), err.to_string());
            }
        }
    }

    /// `a / b` under `key`, when both were measured.
    pub(crate) fn ratio(&mut self, key: &str, a: &str, b: &str) {
        let ratio = self.get(a).zip(self.get(b)).map(|(a, b)| a / b);
        self.put(key, ratio);
    }
}

/// Runs `measure` on each case in turn, `runs` times after a tenth as warm-up, so that the
/// machine's drift falls on all alike; each sample under its case's key.
pub(crate) async fn alternate<T: Copy, F: std::future::Future<Output = anyhow::Result<f64>>>(
    runs: usize,
    cases: &[(&'static str, T)],
    mut measure: impl FnMut(T) -> F,
) -> anyhow::Result<Medians> {
    let mut samples = Medians::default();
    for run in 0..runs / 10 + runs {
        for &(key, case) in cases {
            let sample = measure(case).await?;
            if run >= runs / 10 {
                samples.add(key, sample);
            }
        }
    }
    Ok(samples)
}

/// A directory of `dirs` × `files` empty files, for a sandbox glob to walk.
pub(crate) fn wide_tree(root: &Path, dirs: usize, files: usize) -> anyhow::Result<()> {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..files {
            std::fs::File::create(dir.join(format!("f{f}")))?;
        }
    }
    Ok(())
}

pub(crate) fn write_file(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for _ in 0..bytes >> 20 {
        file.write_all(&block)?;
    }
    file.flush()?;
    Ok(())
}
