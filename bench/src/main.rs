//! exec-server benchmark: each figure beside its local or OpenSSH baseline, measured in the
//! same run. `--quick` is a smaller run (under a minute); the full run also writes
//! docs/benchmarks.md. The last line printed is one JSON object with every figure.
//!
//! Usage: `cargo run --release -p exec-server-bench -- [--quick] [--launch-only] [--daemon PATH]`
//! (`--launch-only`: the exec round trips alone, for work on the launch path)

mod agent;
mod codex;
mod envd;
mod packages;
mod remote;
mod ssh;
mod streams;

use anyhow::{bail, Context as _};
use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use exec_server_client::protocol::process::OutputStream;
use exec_server_client::protocol::PathUri;
use exec_server_client::{path_uri, Client, ClientOptions, Command, ProcessEvent};
use serde_json::{json, Map, Value};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Size {
    exec_runs: usize,
    ssh_runs: usize,
    ssh_master_runs: usize,
    stream_bytes: u64,
    stream_runs: usize,
    file_bytes: u64,
    sessions: usize,
    retained: usize,
    resume_runs: usize,
    restart_runs: usize,
    /// Detached processes that each write [`DETACHED_OUTPUT`].
    detached: usize,
    /// Execs each of the [`FANOUT_CONNECTIONS`] runs in the fan-out.
    fanout_per_connection: usize,
    /// Files in the large workspace.
    large_ws_files: usize,
    /// `codex exec` turns on each exec-server in the agent row.
    agent_turns: usize,
}

const QUICK: Size = Size {
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
    large_ws_files: 20_000,
    agent_turns: 2,
};

const FULL: Size = Size {
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
    large_ws_files: 200_000,
    agent_turns: 5,
};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// exec-server benchmark: each figure beside its local or OpenSSH baseline, measured in the
/// same run. The last line printed is one JSON object with every figure.
#[derive(clap::Parser)]
#[command(name = "exec-server-bench", version)]
struct BenchArgs {
    /// A smaller run (under a minute) that writes no docs.
    #[arg(long)]
    quick: bool,
    /// The exec round trips alone, for work on the launch path.
    #[arg(long)]
    launch_only: bool,
    /// The fan-outs alone (direct, sandboxed, through remote mode, xargs).
    #[arg(long, conflicts_with = "launch_only")]
    fanout_only: bool,
    /// Output and file streaming alone, beside their pipe, `cat` and ssh baselines.
    #[arg(long, conflicts_with_all = ["launch_only", "fanout_only"])]
    stream_only: bool,
    /// The codex agent row alone: `codex exec` turns on this daemon and on codex's exec-server.
    #[arg(long, conflicts_with_all = ["launch_only", "fanout_only", "stream_only"])]
    agent_only: bool,
    /// The exec-server binary to measure; default: the one next to this executable (built
    /// first when run through cargo).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let BenchArgs {
        quick,
        launch_only,
        fanout_only,
        stream_only,
        agent_only,
        daemon,
    } = clap::Parser::parse();
    let size = if quick { &QUICK } else { &FULL };
    let binary = daemon_binary(daemon)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(async {
        if fanout_only {
            let mut r = Results(Map::new());
            fanout(&binary, size, &Workspace::new()?, &mut r).await?;
            return Ok(r.0);
        }
        if agent_only {
            let mut r = Results(Map::new());
            let daemon = Daemon::start(&binary, &[])?;
            agent::compare(&daemon.url, size.agent_turns, &mut r).await;
            return Ok(r.0);
        }
        let part = match (launch_only, stream_only) {
            (true, _) => Part::Launch,
            (_, true) => Part::Stream,
            _ => Part::All,
        };
        run(size, part, &binary).await
    })?;
    let table = report(&results);
    println!("{table}");
    if !quick && !launch_only && !fanout_only && !stream_only && !agent_only {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md");
        std::fs::write(&path, markdown(&table, &results))?;
        eprintln!("bench: wrote {}", path.display());
    }
    println!("{}", Value::Object(results));
    Ok(())
}

/// The daemon next to this executable, built first when run through cargo.
fn daemon_binary(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path);
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("executable has no directory")?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--bin", "exec-server"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        anyhow::ensure!(build.status()?.success(), "building exec-server failed");
    }
    let path = dir.join("exec-server");
    anyhow::ensure!(
        path.exists(),
        "{} not found: run `cargo build --release --bin exec-server` first, or pass --daemon",
        path.display()
    );
    Ok(path)
}

struct Daemon {
    child: std::process::Child,
    url: String,
    /// Its own state dir: measured as deployed (keeping state, on tmpfs), and never the host's default,
    /// which a daemon of the host may hold; a successor gets the same one.
    state_dir: std::sync::Arc<tempfile::TempDir>,
}

impl Daemon {
    fn start(binary: &Path, args: &[&str]) -> anyhow::Result<Self> {
        // On tmpfs, as the default state dir is (/run, $XDG_RUNTIME_DIR), when there is one.
        let tmpfs = PathBuf::from("/dev/shm");
        let parent = if tmpfs.is_dir() {
            tmpfs
        } else {
            std::env::temp_dir()
        };
        let state_dir = tempfile::Builder::new()
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(parent)?;
        Self::start_on(binary, args, std::sync::Arc::new(state_dir))
    }

    /// A daemon on `state_dir`, a predecessor's.
    fn start_on(
        binary: &Path,
        args: &[&str],
        state_dir: std::sync::Arc<tempfile::TempDir>,
    ) -> anyhow::Result<Self> {
        let mut child = std::process::Command::new(binary)
            .args(["--listen", "ws://127.0.0.1:0", "--log", "warn"])
            .args(args)
            // Not the flag: a `--daemon` older than it ignores the variable.
            .env("EXEC_SERVER_STATE_DIR", state_dir.path())
            .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line)?;
        Ok(Self {
            child,
            url: line.trim().to_owned(),
            state_dir,
        })
    }

    /// SIGKILL, as a crash or the OOM killer; returns its state dir for a successor.
    fn crash(mut self) -> std::sync::Arc<tempfile::TempDir> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.state_dir.clone()
    }

    fn rss_kib(&self) -> f64 {
        self.status_kib("VmRSS:")
    }

    /// The peak resident set since the daemon started.
    fn peak_rss_kib(&self) -> f64 {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(f64::NAN)
    }
}

impl Drop for Daemon {
    /// A shutdown (SIGTERM) ends the daemon's processes; a SIGKILL would leave them running
    /// for a successor on its state dir. SIGKILL only for a daemon that does not stop.
    fn drop(&mut self) {
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Median and 99th percentile.
fn stats(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn micros(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e6
}

fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

fn command(argv: &[&str]) -> Command {
    Command::new(argv.iter().copied())
        .cwd("/")
        .expect("/ is a valid path")
        .env("PATH", PATH)
}

/// Waits for the last event; returns the output byte count.
async fn finish(process: &mut exec_server_client::Process) -> anyhow::Result<u64> {
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

/// Round trips of `true`, in µs: through the daemon, spawned and waited for locally (the
/// physical limit), and every third run through the daemon in `workspace` and under bubblewrap
/// in it (Err: why that could not run). They alternate run by run, so that the machine's drift
/// in speed (large on a shared VM) falls on all of them alike and their ratios stay fair; the
/// first tenth warms up.
struct RoundTrips {
    exec: Vec<f64>,
    spawn: Vec<f64>,
    sandboxed: anyhow::Result<Vec<f64>>,
    bwrap: anyhow::Result<Vec<f64>>,
}

async fn round_trips(
    client: &Client,
    runs: usize,
    workspace: &Workspace,
    bwrap: &Result<PathBuf, String>,
) -> anyhow::Result<RoundTrips> {
    let warmup = runs / 10;
    let mut trips = RoundTrips {
        exec: Vec::with_capacity(runs),
        spawn: Vec::with_capacity(runs),
        sandboxed: Ok(Vec::with_capacity(runs / 3)),
        bwrap: bwrap
            .as_ref()
            .map(|_| Vec::with_capacity(runs / 3))
            .map_err(|why| anyhow::anyhow!("{why}")),
    };
    // The first failure of a sandboxed kind stands for all its runs.
    let keep = |samples: &mut anyhow::Result<Vec<f64>>, sample, counted| match (samples, sample) {
        (Ok(samples), Ok(sample)) if counted => samples.push(sample),
        (Ok(_), Ok(_)) | (Err(_), _) => {}
        (samples, Err(err)) => *samples = Err(err),
    };
    for run in 0..warmup + runs {
        let exec = exec_once(client, None).await?;
        let spawn = spawn_once(std::process::Command::new("true"))?;
        if run >= warmup {
            trips.exec.push(exec);
            trips.spawn.push(spawn);
        }
        if run % 3 != 0 {
            continue;
        }
        if trips.sandboxed.is_ok() {
            let sample = exec_once(client, Some(&workspace.sandbox)).await;
            keep(&mut trips.sandboxed, sample, run >= warmup);
        }
        if let (Ok(bwrap), Ok(_)) = (bwrap, &trips.bwrap) {
            let sample = spawn_once(workspace.bwrap(bwrap));
            keep(&mut trips.bwrap, sample, run >= warmup);
        }
    }
    Ok(trips)
}

/// `true` through the envd listener as the E2B SDKs call it, interleaved with the same through
/// the WebSocket (the first tenth warms up): `envd_exec_rtt_us`, and `envd_vs_ws_rtt`, the
/// ratio of the two medians.
async fn envd_round_trips(
    client: &Client,
    envd: &envd::Envd,
    runs: usize,
    r: &mut Results,
) -> anyhow::Result<()> {
    eprintln!("bench: envd round trips (interleaved with the WebSocket's)");
    let (mut ws, mut ours) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for run in 0..runs / 10 + runs {
        let (a, b) = (exec_once(client, None).await?, envd.exec_once().await?);
        if run >= runs / 10 {
            ws.push(a);
            ours.push(b);
        }
    }
    r.put_rtt("envd_exec", &mut ours);
    r.put(
        "envd_vs_ws_rtt",
        Some(stats(&mut ours).0 / stats(&mut ws).0),
    );
    Ok(())
}

async fn exec_once(client: &Client, sandbox: Option<&Value>) -> anyhow::Result<f64> {
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
fn spawn_once(mut command: std::process::Command) -> anyhow::Result<f64> {
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
struct Workspace {
    path: PathBuf,
    sandbox: Value,
    _dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> anyhow::Result<Self> {
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
    fn bwrap(&self, bwrap: &Path) -> std::process::Command {
        let mut command = std::process::Command::new(bwrap);
        command
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--bind"])
            .args([&self.path, &self.path])
            .args(["--unshare-pid", "--unshare-net", "--proc", "/proc", "true"]);
        command
    }
}

/// bubblewrap, installed from the distribution when missing; Err: why it cannot be had.
fn bubblewrap() -> Result<PathBuf, String> {
    packages::ensure(&["bubblewrap"], || packages::which("bwrap").is_some())?;
    packages::which("bwrap").ok_or_else(|| "bwrap is not on PATH".into())
}

fn command_rtt(
    runs: usize,
    mut make: impl FnMut() -> std::process::Command,
) -> anyhow::Result<Vec<f64>> {
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            let status = make().stdout(Stdio::null()).status()?;
            anyhow::ensure!(status.success(), "command failed");
            Ok(micros(started.elapsed()))
        })
        .collect()
}

/// MB/s of a command's stdout read to the end through a pipe.
fn pipe_rate(mut command: std::process::Command, expected: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut child = command.stdout(Stdio::piped()).spawn()?;
    let mut stdout = child.stdout.take().unwrap();
    let mut buffer = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = stdout.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    child.wait()?;
    let elapsed = started.elapsed();
    anyhow::ensure!(total == expected, "read {total} bytes, expected {expected}");
    Ok(mb_per_s(total, elapsed))
}

/// Samples per figure, recorded as their medians.
#[derive(Default)]
struct Medians(std::collections::BTreeMap<&'static str, Vec<f64>>);

impl Medians {
    fn add(&mut self, key: &'static str, sample: f64) {
        self.0.entry(key).or_default().push(sample);
    }

    fn record(self, r: &mut Results) {
        for (key, mut samples) in self.0 {
            r.put(key, Some(stats(&mut samples).0));
        }
    }
}

struct Results(Map<String, Value>);

impl Results {
    fn put(&mut self, key: &str, value: Option<f64>) {
        let value = value
            .filter(|v| v.is_finite())
            .map(|v| json!((v * 100.0).round() / 100.0))
            .unwrap_or(Value::Null);
        self.0.insert(key.into(), value);
    }

    fn note(&mut self, key: &str, text: impl Into<String>) {
        self.0.insert(key.into(), Value::String(text.into()));
    }

    fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// The median and p99 of round trips in µs, under `{name}_rtt_us` and `{name}_rtt_p99_us`.
    fn put_rtt(&mut self, name: &str, samples: &mut [f64]) {
        let (median, p99) = stats(samples);
        self.put(&format!("{name}_rtt_us"), Some(median));
        self.put(&format!("{name}_rtt_p99_us"), Some(p99));
    }

    /// As [`Self::put_rtt`]; when there are none, why, in the median's place (the table shows it).
    fn put_rtt_or_why(&mut self, name: &str, samples: &mut anyhow::Result<Vec<f64>>) {
        match samples {
            Ok(samples) => self.put_rtt(name, samples),
            Err(err) => {
                eprintln!("bench: no {name} round trips: {err}");
                self.note(&format!("{name}_rtt_us"), err.to_string());
            }
        }
    }

    /// `a / b` under `key`, when both were measured.
    fn ratio(&mut self, key: &str, a: &str, b: &str) {
        let ratio = self.get(a).zip(self.get(b)).map(|(a, b)| a / b);
        self.put(key, ratio);
    }
}

/// What `run` measures.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    All,
    Launch,
    Stream,
}

async fn run(size: &Size, part: Part, binary: &Path) -> anyhow::Result<Map<String, Value>> {
    let mut r = Results(Map::new());
    let envd_addr = envd::free_addr()?;
    let daemon = Daemon::start(binary, &["--envd-listen", &envd_addr])?;
    let client = Client::connect(ClientOptions::new(daemon.url.clone())).await?;
    let envd = envd::Envd::new(&envd_addr)?;
    let sshd = match ssh::Sshd::start() {
        _ if part == Part::Launch => None,
        Ok(sshd) => Some(sshd),
        Err(why) => {
            eprintln!("bench: skipping the ssh baselines: {why}");
            r.note("ssh_skipped", why);
            None
        }
    };

    if part == Part::Stream {
        streaming(&daemon, &client, &envd, sshd.as_ref(), size, &mut r).await?;
        return Ok(r.0);
    }
    let bwrap = bubblewrap();
    let workspace = Workspace::new()?;
    eprintln!("bench: exec round trips (plain, local, sandboxed and bwrap, interleaved)");
    let mut trips = round_trips(&client, size.exec_runs, &workspace, &bwrap).await?;
    r.put_rtt("exec", &mut trips.exec);
    r.put_rtt("spawn", &mut trips.spawn);
    r.put_rtt_or_why("sandbox", &mut trips.sandboxed);
    r.put_rtt_or_why("bwrap", &mut trips.bwrap);
    r.ratio("sandbox_vs_spawn", "sandbox_rtt_us", "spawn_rtt_us");
    r.ratio("sandbox_vs_bwrap", "sandbox_rtt_us", "bwrap_rtt_us");
    // The same launches back to back, each finding what the one before left in progress (its
    // replacement helper, its namespaces' teardown): information, beside the interleaved figure.
    if trips.sandboxed.is_ok() {
        let mut burst = Vec::with_capacity(size.exec_runs / 3);
        for _ in 0..size.exec_runs / 3 {
            burst.push(exec_once(&client, Some(&workspace.sandbox)).await?);
        }
        r.put_rtt("sandbox_burst", &mut burst);
        r.ratio(
            "sandbox_burst_vs_spawn",
            "sandbox_burst_rtt_us",
            "spawn_rtt_us",
        );
    }
    r.ratio("exec_vs_spawn", "exec_rtt_us", "spawn_rtt_us");
    envd_round_trips(&client, &envd, size.exec_runs, &mut r).await?;
    if part == Part::Launch {
        // The fastest tenth: what a launch costs when nothing else on the machine is in its
        // way, which a busy machine's medians hide.
        let tenth = |samples: &[f64]| samples.get(samples.len() / 10).copied();
        r.put("exec_rtt_p10_us", tenth(&trips.exec));
        r.put("spawn_rtt_p10_us", tenth(&trips.spawn));
        if let Ok(samples) = &trips.sandboxed {
            r.put("sandbox_rtt_p10_us", tenth(samples));
        }
        r.ratio("exec_vs_spawn_p10", "exec_rtt_p10_us", "spawn_rtt_p10_us");
        r.ratio(
            "sandbox_vs_spawn_p10",
            "sandbox_rtt_p10_us",
            "spawn_rtt_p10_us",
        );
        return Ok(r.0);
    }
    eprintln!("bench: codex's exec-server beside ours (one plain client, interleaved)");
    codex::compare(&daemon.url, size, &workspace, &mut r).await;
    eprintln!("bench: the codex agent's turn, on our exec-server and on codex's");
    agent::compare(&daemon.url, size.agent_turns, &mut r).await;
    if let Some(sshd) = &sshd {
        let mut ssh = command_rtt(size.ssh_runs, || sshd.command("true", false))?;
        r.put_rtt("ssh", &mut ssh);
        command_rtt(1, || sshd.command("true", true))?;
        let mut cm = command_rtt(size.ssh_master_runs, || sshd.command("true", true))?;
        r.put_rtt("ssh_cm", &mut cm);
    } else {
        r.put("ssh_rtt_us", None);
        r.put("ssh_cm_rtt_us", None);
    }
    r.ratio("ssh_vs_exec", "ssh_rtt_us", "exec_rtt_us");
    r.ratio("ssh_cm_vs_exec", "ssh_cm_rtt_us", "exec_rtt_us");

    streaming(&daemon, &client, &envd, sshd.as_ref(), size, &mut r).await?;

    eprintln!("bench: small file reads, plain and sandboxed");
    small_reads(&client, &workspace, size.exec_runs, &mut r).await?;

    eprintln!("bench: sandboxed launches in a large workspace and an empty one");
    large_workspace(&client, size, &mut r).await?;

    eprintln!("bench: resume after a dropped connection");
    let (resume, resume_p99) = stats(&mut resume_times(&client, size.resume_runs).await?);
    r.put("resume_ms", Some(resume));
    r.put("resume_p99_ms", Some(resume_p99));
    client.close().await;
    drop(daemon);

    eprintln!("bench: fan-out over {FANOUT_CONNECTIONS} connections, beside xargs");
    fanout(binary, size, &workspace, &mut r).await?;

    eprintln!("bench: restart of the daemon");
    restarts(binary, size, &mut r).await?;

    eprintln!("bench: memory at scale");
    scale(binary, size, &mut r).await?;

    eprintln!("bench: exhaustion attacks by a client that never reads");
    attacks(binary, &mut r).await?;
    Ok(r.0)
}

/// Output streaming and file streaming, each beside its local and ssh baselines.
async fn streaming(
    daemon: &Daemon,
    client: &Client,
    envd: &envd::Envd,
    sshd: Option<&ssh::Sshd>,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
    // The same transfers through a client that declines binary payloads: base64 in JSON text,
    // as a Codex-dialect client without this daemon's addition gets them.
    let mut text_options = ClientOptions::new(daemon.url.clone());
    text_options.binary_payloads = false;
    let text_client = Client::connect(text_options).await?;

    // Each round moves the same bytes every way once, so drift falls on all alike.
    eprintln!("bench: output streaming");
    let head = format!("head -c {} /dev/zero", size.stream_bytes);
    let mut rates = Medians::default();
    for _ in 0..size.stream_runs {
        // A new command (a new process id) each time.
        let plain = || command(&["sh", "-c", &head]);
        rates.add("stream_mb_s", stream_once(client, plain(), size).await?);
        rates.add(
            "stream_text_mb_s",
            stream_once(&text_client, plain(), size).await?,
        );
        rates.add(
            "envd_stream_mb_s",
            envd.stream_once(size.stream_bytes).await?,
        );
        // Lossless: the child is held back rather than output evicted.
        let pausing = plain().pause_when_retention_full();
        rates.add(
            "stream_block_mb_s",
            stream_once(client, pausing, size).await?,
        );
        // Beside a session whose client reads nothing.
        let stalled = streams::Stalled::start(&daemon.url).await?;
        let beside = stream_once(client, plain(), size).await;
        stalled.stop().await?;
        rates.add("stream_slow_neighbour_mb_s", beside?);
        let mut local = std::process::Command::new("sh");
        local.args(["-c", &head]);
        rates.add("pipe_mb_s", pipe_rate(local, size.stream_bytes)?);
        if let Some(sshd) = sshd {
            let over_ssh = sshd.command(&head, true);
            rates.add("ssh_stream_mb_s", pipe_rate(over_ssh, size.stream_bytes)?);
        }
    }
    rates.record(r);
    r.ratio("stream_vs_pipe", "stream_mb_s", "pipe_mb_s");
    r.ratio("stream_vs_ssh", "stream_mb_s", "ssh_stream_mb_s");
    r.ratio("stream_block_vs_pipe", "stream_block_mb_s", "pipe_mb_s");
    r.ratio(
        "stream_slow_neighbour_vs_alone",
        "stream_slow_neighbour_mb_s",
        "stream_mb_s",
    );

    eprintln!("bench: file streaming");
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("big.bin");
    write_file(&file, size.file_bytes)?;
    let cat = format!("cat {} | cat > /dev/null", file.display());
    let uri = path_uri(file.to_str().context("path is not UTF-8")?)?;
    let mut rates = Medians::default();
    for _ in 0..size.stream_runs {
        let started = Instant::now();
        let status = std::process::Command::new("sh")
            .args(["-c", &cat])
            .status()?;
        anyhow::ensure!(status.success());
        rates.add("cat_mb_s", mb_per_s(size.file_bytes, started.elapsed()));
        rates.add(
            "readblock_mb_s",
            read_blocks_once(client, &uri, size).await?,
        );
        rates.add(
            "readblock_text_mb_s",
            read_blocks_once(&text_client, &uri, size).await?,
        );
        if let Some(sshd) = sshd {
            let over_ssh = sshd.command(&format!("cat {}", file.display()), true);
            rates.add("ssh_file_mb_s", pipe_rate(over_ssh, size.file_bytes)?);
        }
    }
    rates.record(r);
    text_client.close().await;
    drop(dir);
    r.ratio("readblock_vs_cat", "readblock_mb_s", "cat_mb_s");
    r.ratio("readblock_vs_ssh", "readblock_mb_s", "ssh_file_mb_s");
    Ok(())
}

/// Runs `measure` on each case in turn, `runs` times after a tenth as warm-up, so that the
/// machine's drift falls on all alike; each sample under its case's key.
async fn alternate<T: Copy, F: std::future::Future<Output = anyhow::Result<f64>>>(
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

/// `fs/readFile` of a 4 KiB file in `workspace`, plain and under its sandbox (where each read
/// runs in a sandbox helper), µs.
async fn small_reads(
    client: &Client,
    workspace: &Workspace,
    runs: usize,
    r: &mut Results,
) -> anyhow::Result<()> {
    let file = workspace.path.join("small.bin");
    std::fs::write(&file, [b'x'; 4096])?;
    let plain = json!({"path": path_uri(file.to_str().context("path is not UTF-8")?)?.to_string()});
    let mut sandboxed = plain.clone();
    sandboxed["sandbox"] = workspace.sandbox.clone();
    let cases = [
        ("fs_read_small_us", &plain),
        ("fs_read_small_sandboxed_us", &sandboxed),
    ];
    let reads = alternate(runs, &cases, |params| {
        let params = params.clone();
        async move {
            let started = Instant::now();
            client.call("fs/readFile", params).await?;
            Ok(micros(started.elapsed()))
        }
    })
    .await?;
    reads.record(r);
    r.ratio(
        "fs_read_small_sandboxed_vs_plain",
        "fs_read_small_sandboxed_us",
        "fs_read_small_us",
    );
    Ok(())
}

/// Sandboxed launches (workspace-write) in a workspace of many files beside ones in an empty
/// workspace: a launch must not cost more with the size of its write root (the daemon once
/// walked it on each launch).
async fn large_workspace(client: &Client, size: &Size, r: &mut Results) -> anyhow::Result<()> {
    let empty = Workspace::new()?;
    let large = Workspace::new()?;
    let started = Instant::now();
    wide_tree(&large.path, size.large_ws_files / 1000, 1000)?;
    eprintln!(
        "bench: {} files made in {:?}",
        size.large_ws_files,
        started.elapsed()
    );
    r.put("large_ws_files", Some(size.large_ws_files as f64));
    let cases = [
        ("sandbox_empty_ws_rtt_us", &empty),
        ("sandbox_large_ws_rtt_us", &large),
    ];
    let launches = alternate(size.exec_runs / 3, &cases, |workspace| {
        exec_once(client, Some(&workspace.sandbox))
    })
    .await?;
    launches.record(r);
    // Launch rates: the large workspace's relative to the empty one's.
    r.ratio(
        "sandbox_large_ws_vs_empty",
        "sandbox_empty_ws_rtt_us",
        "sandbox_large_ws_rtt_us",
    );
    Ok(())
}

/// Connections the fan-out runs its execs over at once.
const FANOUT_CONNECTIONS: usize = 50;

/// Rounds the fan-out is split into, each running the plain, the sandboxed and the `xargs`
/// share in turn, so that the machine's drift falls on all alike.
const FANOUT_ROUNDS: usize = 4;

/// Execs of `true` over [`FANOUT_CONNECTIONS`] connections to a fresh daemon at once, each
/// running its share back to back, plain and under `workspace`'s sandbox (all in that one
/// workspace), beside a local `xargs -P50` of as many `true`.
async fn fanout(
    binary: &Path,
    size: &Size,
    workspace: &Workspace,
    r: &mut Results,
) -> anyhow::Result<()> {
    let daemon = Daemon::start(binary, &[])?;
    let mut clients = Vec::with_capacity(FANOUT_CONNECTIONS);
    for _ in 0..FANOUT_CONNECTIONS {
        clients.push(Client::connect(ClientOptions::new(daemon.url.clone())).await?);
    }
    let per_round = size.fanout_per_connection / FANOUT_ROUNDS;
    let round_execs = FANOUT_CONNECTIONS * per_round;
    let xargs_script = format!("seq {round_execs} | xargs -P{FANOUT_CONNECTIONS} -n1 true");
    let (mut plain, mut sandboxed) = (Fanout::default(), Fanout::default());
    // The same fan-out over the one socket a daemon in remote mode dialed to the bench.
    let remote = remote::Remote::start(binary).await?;
    let remote_clients = vec![remote.client.clone(); FANOUT_CONNECTIONS];
    let mut through_remote = Fanout::default();
    let mut xargs = Duration::ZERO;
    for _ in 0..FANOUT_ROUNDS {
        plain.round(&clients, per_round, None).await;
        through_remote.round(&remote_clients, per_round, None).await;
        sandboxed
            .round(&clients, per_round, Some(&workspace.sandbox))
            .await;
        let started = Instant::now();
        let status = std::process::Command::new("sh")
            .args(["-c", &xargs_script])
            .status()?;
        anyhow::ensure!(status.success(), "`{xargs_script}` failed");
        xargs += started.elapsed();
    }
    let execs = (round_execs * FANOUT_ROUNDS) as f64;
    r.put("fanout_execs", Some(execs));
    plain.record("fanout", r);
    sandboxed.record("fanout_sandboxed", r);
    through_remote.record("remote_fanout", r);
    r.ratio(
        "remote_fanout_vs_direct",
        "remote_fanout_per_s",
        "fanout_per_s",
    );
    r.put("xargs_per_s", Some(execs / xargs.as_secs_f64()));
    r.ratio("fanout_vs_xargs", "fanout_per_s", "xargs_per_s");
    r.ratio(
        "fanout_sandboxed_vs_fanout",
        "fanout_sandboxed_per_s",
        "fanout_per_s",
    );
    for client in clients {
        client.close().await;
    }
    Ok(())
}

/// A fan-out's latencies per exec (ms), time and failed execs, over its rounds.
#[derive(Default)]
struct Fanout {
    latencies: Vec<f64>,
    elapsed: Duration,
    errors: usize,
    first_error: Option<String>,
}

impl Fanout {
    /// `execs` back to back on each client, all clients at once.
    async fn round(&mut self, clients: &[Client], execs: usize, sandbox: Option<&Value>) {
        let started = Instant::now();
        let runs = clients.iter().map(|client| async move {
            let mut outcomes = Vec::with_capacity(execs);
            for _ in 0..execs {
                outcomes.push(exec_once(client, sandbox).await);
            }
            outcomes
        });
        let outcomes = futures::future::join_all(runs).await;
        self.elapsed += started.elapsed();
        for outcome in outcomes.into_iter().flatten() {
            match outcome {
                Ok(rtt) => self.latencies.push(rtt / 1e3),
                Err(err) => {
                    self.errors += 1;
                    self.first_error.get_or_insert_with(|| format!("{err:#}"));
                }
            }
        }
    }

    /// Completed execs per second, their p99 and the failed ones, under `{name}_per_s`,
    /// `{name}_p99_ms` and `{name}_errors` (the first failure's text under `{name}_error`).
    fn record(mut self, name: &str, r: &mut Results) {
        let done = self.latencies.len() as f64;
        r.put(
            &format!("{name}_per_s"),
            Some(done / self.elapsed.as_secs_f64()),
        );
        let p99 = (!self.latencies.is_empty()).then(|| stats(&mut self.latencies).1);
        r.put(&format!("{name}_p99_ms"), p99);
        r.put(&format!("{name}_errors"), Some(self.errors as f64));
        if let Some(err) = self.first_error {
            eprintln!(
                "bench: {} {name} execs failed, the first: {err}",
                self.errors
            );
            r.note(&format!("{name}_error"), err);
        }
    }
}

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

/// Serves one HTTP response of `bytes` zero bytes to every connection, on loopback.
async fn big_body_server(bytes: usize) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let server = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request is small and never read in full: the response does not depend
                // on it.
                let _ = tcp.read(&mut [0; 4096]).await;
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\n\r\n");
                let _ = tcp.write_all(head.as_bytes()).await;
                let block = vec![0u8; 1 << 20];
                for _ in 0..bytes.div_ceil(block.len()) {
                    if tcp.write_all(&block).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((url, server))
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

/// A directory of `dirs` × `files` empty files, for a sandbox glob to walk.
fn wide_tree(root: &Path, dirs: usize, files: usize) -> anyhow::Result<()> {
    for d in 0..dirs {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..files {
            std::fs::File::create(dir.join(format!("f{f}")))?;
        }
    }
    Ok(())
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
async fn attacks(binary: &Path, r: &mut Results) -> anyhow::Result<()> {
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
    let (http_url, server) = big_body_server(256 << 20).await?;
    let (silent_url, silent_open, silent) = silent_server().await?;
    let long_id = "p".repeat(1 << 20);
    // Reads everything, and hides `**/*.env` under the tree: the start walks its 90,090 entries
    // (twice each: for `**` and for `*.env`) until the glob's bound of 100,000 visits refuses
    // it, the longest walk a start can make.
    let walking_sandbox = json!({
        "permissions": {"type": "managed", "network": "enabled", "file_system": {
            "type": "restricted", "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"}]}},
        "cwd": tree, "workspaceRoots": [tree], "windowsSandboxLevel": "disabled"});
    // What one such start costs alone, and proof that it walks to the bound.
    {
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
    }
    let attacks: [(&str, Vec<Value>); 7] = [
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
    ];
    for (name, requests) in attacks {
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
    }
    server.abort();
    r.put(
        "attack_stuck_http_server_open",
        Some(silent_open.load(Ordering::Relaxed) as f64),
    );
    silent.abort();
    Ok(())
}

/// MB/s of `script`'s output delivered as `process/output` notifications.
async fn stream_once(client: &Client, command: Command, size: &Size) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut process = client.start(command).await?;
    let bytes = finish(&mut process).await?;
    anyhow::ensure!(bytes == size.stream_bytes, "streamed {bytes} bytes");
    Ok(mb_per_s(bytes, started.elapsed()))
}

fn write_file(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for _ in 0..bytes >> 20 {
        file.write_all(&block)?;
    }
    file.flush()?;
    Ok(())
}

/// MB/s of reading the file at `uri` whole with pipelined `fs/readBlock`.
async fn read_blocks_once(client: &Client, uri: &PathUri, size: &Size) -> anyhow::Result<f64> {
    let started = Instant::now();
    let reader = client.open(uri).await?;
    let total = reader.read_all(|_| Ok(())).await?;
    let elapsed = started.elapsed();
    reader.close().await?;
    anyhow::ensure!(total == size.file_bytes, "read {total} bytes");
    Ok(mb_per_s(total, elapsed))
}

/// Drops the connection while a process streams numbered lines; each sample is the time from
/// the drop to the end of the recovery (resumed and caught up). The lines must stay complete.
async fn resume_times(client: &Client, runs: usize) -> anyhow::Result<Vec<f64>> {
    let script = "i=0; while :; do i=$((i+1)); echo $i; sleep 0.001; done";
    let mut process = client.start(command(&["sh", "-c", script])).await?;
    let handle = process.handle();
    let checker = tokio::spawn(async move {
        let mut text = Vec::new();
        while let Some(event) = process.next_event().await {
            match event {
                ProcessEvent::Output {
                    data,
                    stream: OutputStream::Stdout,
                    ..
                } => text.extend_from_slice(&data),
                ProcessEvent::Gap { .. } | ProcessEvent::Failed { .. } => bail!("{event:?}"),
                _ => {}
            }
        }
        let text = String::from_utf8(text)?;
        for (expected, line) in (1u64..).zip(text.lines()) {
            anyhow::ensure!(line == expected.to_string(), "line {expected} is `{line}`");
        }
        Ok(())
    });
    let mut recoveries = client.recoveries();
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let before = *recoveries.borrow_and_update();
        let started = Instant::now();
        client.drop_connection();
        recoveries.wait_for(|n| *n > before).await?;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    handle.terminate().await?;
    checker.await??;
    Ok(samples)
}

/// Idle RSS, then many sessions, each then with a live process, then many retained exited
/// processes, all on a fresh daemon.
/// Bytes each detached process writes, all retained (the default retention is 64 MiB).
const DETACHED_OUTPUT: u64 = 50 << 20;

/// The daemon killed (SIGKILL) while a process streams numbered lines: the time from the kill
/// to a successor serving and its resumed client caught up with the output (the lines must
/// stay complete); then the RSS of detached processes' retained output.
async fn restarts(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
    let mut daemon = Daemon::start(binary, &["--session-ttl", "1h"])?;
    let client = Client::connect(ClientOptions::new(daemon.url.clone())).await?;
    let session = client.session_id().to_owned();
    let script = "i=0; while :; do i=$((i+1)); echo $i; sleep 0.001; done";
    client
        .call(
            "process/start",
            json!({"processId": "lines", "argv": ["sh", "-c", script], "cwd": "file:///",
                   "env": {"PATH": PATH}, "tty": false}),
        )
        .await?;
    let (mut text, mut after) = (Vec::new(), 0u64);
    let read = |client: &Client, after: u64, wait: u64| {
        let params = json!({"processId": "lines", "afterSeq": after, "waitMs": wait});
        let client = client.clone();
        async move { client.call("process/read", params).await }
    };
    let mut times = Vec::new();
    let mut client = client;
    for _ in 0..size.restart_runs {
        // Some output first, then the crash mid-stream.
        while text.len() < 1000 * (times.len() + 1) {
            let result = read(&client, after, 1000).await?;
            for chunk in result["chunks"].as_array().context("chunks")? {
                text.extend(BASE64.decode(chunk["chunk"].as_str().context("chunk")?)?);
            }
            after = result["nextSeq"].as_u64().context("nextSeq")? - 1;
        }
        client.close().await;
        let state = daemon.crash();
        let killed = Instant::now();
        daemon = Daemon::start_on(binary, &["--session-ttl", "1h"], state)?;
        let mut options = ClientOptions::new(daemon.url.clone());
        options.resume_session_id = Some(session.clone());
        client = Client::connect(options).await?;
        loop {
            let result = read(&client, after, 0).await?;
            let chunks = result["chunks"].as_array().context("chunks")?;
            for chunk in chunks {
                text.extend(BASE64.decode(chunk["chunk"].as_str().context("chunk")?)?);
            }
            after = result["nextSeq"].as_u64().context("nextSeq")? - 1;
            if chunks.is_empty() {
                break;
            }
        }
        times.push(killed.elapsed().as_secs_f64() * 1e3);
    }
    let text = String::from_utf8(text)?;
    let complete = text.lines().zip(1..).all(|(line, n)| line == n.to_string());
    anyhow::ensure!(complete, "lines lost or repeated across restarts");
    let (median, p99) = stats(&mut times);
    r.put("restart_ms", Some(median));
    r.put("restart_p99_ms", Some(p99));
    client
        .call("process/terminate", json!({"processId": "lines"}))
        .await?;
    client.close().await;
    drop(daemon);

    let daemon = Daemon::start(binary, &["--session-ttl", "1h"])?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = daemon.rss_kib();
    let client = Client::connect(ClientOptions::new(daemon.url.clone())).await?;
    let session = client.session_id().to_owned();
    let write = format!("head -c {DETACHED_OUTPUT} /dev/zero");
    for n in 0..size.detached {
        client
            .call(
                "process/start",
                json!({"processId": format!("w{n}"), "argv": ["sh", "-c", &write],
                       "cwd": "file:///", "env": {"PATH": PATH}, "tty": false}),
            )
            .await?;
    }
    client.close().await;
    // Detached, until every process closed (all its output taken in).
    let mut options = ClientOptions::new(daemon.url.clone());
    options.resume_session_id = Some(session);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let probe = Client::connect(options.clone()).await?;
        let list = probe.call("process/list", json!({})).await?;
        probe.close().await;
        let processes = list["processes"].as_array().context("processes")?;
        if processes.iter().all(|p| p["state"] == "closed") {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the writers did not finish");
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let after_rss = daemon.rss_kib();
    let retained_mib = (size.detached as u64 * DETACHED_OUTPUT) as f64 / (1 << 20) as f64;
    r.put("detached_processes", Some(size.detached as f64));
    r.put("rss_detached_output_mib", Some(after_rss / 1024.0));
    r.put(
        "rss_per_retained_output_mib_kib",
        Some((after_rss - before).max(0.0) / retained_mib),
    );
    Ok(())
}

async fn scale(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
    let daemon = Daemon::start(binary, &["--exited-retention", "1h", "--session-ttl", "1h"])?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = daemon.rss_kib();
    r.put("idle_rss_mib", Some(idle / 1024.0));
    let mut clients = Vec::with_capacity(size.sessions);
    for _ in 0..size.sessions {
        clients.push(Client::connect(ClientOptions::new(daemon.url.clone())).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let with_sessions = daemon.rss_kib();
    r.put(
        "rss_per_idle_session_kib",
        Some((with_sessions - idle) / size.sessions as f64),
    );
    let mut sleepers = Vec::with_capacity(size.sessions);
    for client in &clients {
        sleepers.push(client.start(command(&["sleep", "3600"])).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let loaded = daemon.rss_kib();
    r.put("sessions", Some(size.sessions as f64));
    r.put("rss_loaded_mib", Some(loaded / 1024.0));
    r.put(
        "rss_per_live_session_kib",
        Some((loaded - idle) / size.sessions as f64),
    );
    let before = daemon.rss_kib();
    let client = &clients[0];
    let mut done = 0;
    while done < size.retained {
        let batch = (size.retained - done).min(16);
        let starts = (0..batch).map(|_| async {
            let mut process = client.start(command(&["true"])).await?;
            finish(&mut process).await
        });
        for outcome in futures::future::join_all(starts).await {
            outcome?;
        }
        done += batch;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retained = daemon.rss_kib();
    r.put("retained_processes", Some(size.retained as f64));
    r.put("rss_retained_mib", Some(retained / 1024.0));
    r.put(
        "rss_per_retained_process_kib",
        Some((retained - before) / size.retained as f64),
    );
    for sleeper in &sleepers {
        sleeper.terminate().await?;
    }
    Ok(())
}

struct Row {
    what: &'static str,
    ours: &'static str,
    baselines: &'static [(&'static str, &'static str)],
    target: &'static str,
    met: fn(&Results) -> Option<bool>,
}

const ROWS: &[Row] = &[
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
    Row {
        what: "the codex agent (`codex exec`, scripted model): a workspace-write turn of 20 commands and 5 patches, wall time, ms",
        ours: "codex_agent_turn_ms",
        baselines: &[("on codex's exec-server", "codex_agent_turn_codex_ms"), ("× codex", "codex_agent_turn_vs_codex")],
        target: "≤ 0.9× codex",
        met: |r| Some(r.get("codex_agent_turn_vs_codex")? <= 0.9),
    },
    Row {
        what: "exec round trip of `true` through the envd listener (Connect JSON, as the E2B SDKs call it), µs",
        ours: "envd_exec_rtt_us",
        baselines: &[("× the WebSocket's, interleaved", "envd_vs_ws_rtt")],
        target: "≤ 1.2× the WebSocket's",
        met: |r| Some(r.get("envd_vs_ws_rtt")? <= 1.2),
    },
    Row {
        what: "stdout of `head -c` streamed through the envd listener (base64 data events), MB/s",
        ours: "envd_stream_mb_s",
        baselines: &[("the WebSocket's", "stream_mb_s")],
        target: "",
        met: |_| None,
    },
    Row {
        what: "exec round trip of `true`, µs (median; interleaved with local spawns)",
        ours: "exec_rtt_us",
        baselines: &[
            ("local spawn", "spawn_rtt_us"),
            ("ssh", "ssh_rtt_us"),
            ("ssh ControlMaster", "ssh_cm_rtt_us"),
        ],
        target: "≤ 1.5× spawn, ≥ 50× faster than ssh",
        met: |r| Some(r.get("exec_vs_spawn")? <= 1.5 && r.get("ssh_vs_exec")? >= 50.0),
    },
    Row {
        what: "sandboxed exec round trip, workspace-write in a `git init`ed workspace (one launch in three), µs",
        ours: "sandbox_rtt_us",
        baselines: &[
            ("local spawn", "spawn_rtt_us"),
            ("× spawn", "sandbox_vs_spawn"),
            ("bwrap in the same workspace", "bwrap_rtt_us"),
            ("× bwrap", "sandbox_vs_bwrap"),
        ],
        target: "≤ 0.35× bwrap",
        met: |r| Some(r.get("sandbox_vs_bwrap")? <= 0.35),
    },
    Row {
        what: "sandboxed exec round trip in a workspace of many files (workspace-write), µs",
        ours: "sandbox_large_ws_rtt_us",
        baselines: &[
            ("files", "large_ws_files"),
            ("empty workspace", "sandbox_empty_ws_rtt_us"),
            ("rate × empty", "sandbox_large_ws_vs_empty"),
        ],
        target: "the empty one's rate (≥ 0.9×)",
        met: |r| Some(r.get("sandbox_large_ws_vs_empty")? >= 0.9),
    },
    Row {
        what: "fan-out: execs of `true` per s over 50 connections at once, each exec's p99 ms",
        ours: "fanout_per_s",
        baselines: &[
            ("execs", "fanout_execs"),
            ("`xargs -P50`", "xargs_per_s"),
            ("× xargs", "fanout_vs_xargs"),
            ("p99 ms", "fanout_p99_ms"),
            ("failed", "fanout_errors"),
        ],
        target: "p99 ≤ 100 ms, none failed",
        met: |r| Some(r.get("fanout_p99_ms")? <= 100.0 && r.get("fanout_errors")? == 0.0),
    },
    Row {
        what: "fan-out through remote mode: the same execs over the one socket the daemon dialed \
               to the bench (registry and rendezvous), execs per s",
        ours: "remote_fanout_per_s",
        baselines: &[
            ("over 50 connections", "fanout_per_s"),
            ("× direct", "remote_fanout_vs_direct"),
            ("p99 ms", "remote_fanout_p99_ms"),
            ("failed", "remote_fanout_errors"),
        ],
        target: "≥ 0.9× direct, none failed",
        met: |r| Some(
            r.get("remote_fanout_vs_direct")? >= 0.9 && r.get("remote_fanout_errors")? == 0.0
        ),
    },
    Row {
        what: "sandboxed fan-out (workspace-write, one `git init`ed workspace for all), execs per s",
        ours: "fanout_sandboxed_per_s",
        baselines: &[
            ("unsandboxed", "fanout_per_s"),
            ("× unsandboxed", "fanout_sandboxed_vs_fanout"),
            ("p99 ms", "fanout_sandboxed_p99_ms"),
            ("failed", "fanout_sandboxed_errors"),
        ],
        target: "≥ 0.8× unsandboxed, none failed",
        met: |r| Some(
            r.get("fanout_sandboxed_vs_fanout")? >= 0.8 && r.get("fanout_sandboxed_errors")? == 0.0
        ),
    },
    Row {
        what: "sandboxed exec round trip, back to back, µs",
        ours: "sandbox_burst_rtt_us",
        baselines: &[("local spawn", "spawn_rtt_us")],
        target: "",
        met: |_| None,
    },
    Row {
        what: "output streaming, MB/s",
        ours: "stream_mb_s",
        baselines: &[("local pipe", "pipe_mb_s"), ("ssh", "ssh_stream_mb_s")],
        target: "≥ 0.8× pipe, ≥ 2× ssh",
        met: |r| Some(r.get("stream_vs_pipe")? >= 0.8 && r.get("stream_vs_ssh")? >= 2.0),
    },
    Row {
        what: "output streaming, `onRetentionFull: \"pause\"`, MB/s",
        ours: "stream_block_mb_s",
        baselines: &[("local pipe", "pipe_mb_s")],
        target: "≥ 0.7× pipe",
        met: |r| Some(r.get("stream_block_vs_pipe")? >= 0.7),
    },
    Row {
        what: "output streaming beside a session that reads nothing, MB/s",
        ours: "stream_slow_neighbour_mb_s",
        baselines: &[("alone", "stream_mb_s")],
        target: "≥ 0.9× alone",
        met: |r| Some(r.get("stream_slow_neighbour_vs_alone")? >= 0.9),
    },
    Row {
        what: "file streaming (fs/readBlock), MB/s",
        ours: "readblock_mb_s",
        baselines: &[("`cat` pipe", "cat_mb_s"), ("ssh cat", "ssh_file_mb_s")],
        target: "≥ 1× cat, ≥ 2× ssh",
        met: |r| Some(r.get("readblock_vs_cat")? >= 1.0 && r.get("readblock_vs_ssh")? >= 2.0),
    },
    Row {
        what: "`fs/readFile` of 4 KiB under the workspace-write sandbox, µs",
        ours: "fs_read_small_sandboxed_us",
        baselines: &[
            ("unsandboxed", "fs_read_small_us"),
            ("× unsandboxed", "fs_read_small_sandboxed_vs_plain"),
        ],
        target: "≤ 2× unsandboxed",
        met: |r| Some(r.get("fs_read_small_sandboxed_vs_plain")? <= 2.0),
    },
    Row {
        what: "output streaming as base64 in JSON text (no binary payloads), MB/s",
        ours: "stream_text_mb_s",
        baselines: &[],
        target: "",
        met: |_| None,
    },
    Row {
        what: "fs/readBlock as base64 in JSON text (no binary payloads), MB/s",
        ours: "readblock_text_mb_s",
        baselines: &[],
        target: "",
        met: |_| None,
    },
    Row {
        what: "idle RSS, MiB",
        ours: "idle_rss_mib",
        baselines: &[],
        target: "≤ 15 MiB",
        met: |r| Some(r.get("idle_rss_mib")? <= 15.0),
    },
    Row {
        what: "RSS per idle session, KiB",
        ours: "rss_per_idle_session_kib",
        baselines: &[],
        target: "≤ 64 KiB",
        met: |r| Some(r.get("rss_per_idle_session_kib")? <= 64.0),
    },
    Row {
        what: "RSS per session with a live `sleep`, KiB",
        ours: "rss_per_live_session_kib",
        baselines: &[],
        target: "",
        met: |_| None,
    },
    Row {
        what: "RSS with every session holding a live process, MiB",
        ours: "rss_loaded_mib",
        baselines: &[],
        target: "",
        met: |_| None,
    },
    Row {
        what: "RSS per retained exited process, KiB",
        ours: "rss_per_retained_process_kib",
        baselines: &[],
        target: "",
        met: |_| None,
    },
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
    Row {
        what: "resume to caught-up output, ms (median)",
        ours: "resume_ms",
        baselines: &[],
        target: "≤ 5 ms",
        met: |r| Some(r.get("resume_ms")? <= 5.0),
    },
    Row {
        what: "daemon killed (SIGKILL) to a successor's resumed client caught up, ms (median)",
        ours: "restart_ms",
        baselines: &[],
        target: "",
        met: |_| None,
    },
    Row {
        what: "RSS with detached processes that each wrote 50 MiB, all retained, MiB",
        ours: "rss_detached_output_mib",
        baselines: &[("processes", "detached_processes")],
        target: "< 64 MiB (100 processes)",
        met: |r| Some(r.get("rss_detached_output_mib")? < 64.0),
    },
    Row {
        what: "RSS per retained MiB of output, KiB",
        ours: "rss_per_retained_output_mib_kib",
        baselines: &[],
        target: "",
        met: |_| None,
    },
];

/// A figure, or why it is missing when the run said so in its place.
fn show(r: &Results, key: &str) -> String {
    match r.0.get(key) {
        Some(Value::String(why)) => format!("n/a ({why})"),
        _ => r.get(key).map_or("n/a".into(), |v| format!("{v}")),
    }
}

/// A Markdown table of every row.
fn report(results: &Map<String, Value>) -> String {
    let r = Results(results.clone());
    let mut out = String::from(
        "| measure | exec-server | baselines | target | met |\n|---|---|---|---|---|\n",
    );
    for row in ROWS {
        let baselines: Vec<String> = row
            .baselines
            .iter()
            .map(|(name, key)| format!("{name}: {}", show(&r, key)))
            .collect();
        let met = match (row.met)(&r) {
            Some(true) => "yes",
            Some(false) => "**no**",
            None if row.target.is_empty() => "",
            None => "n/a",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {met} |\n",
            row.what,
            show(&r, row.ours),
            baselines.join("; "),
            row.target
        ));
    }
    out
}

fn markdown(table: &str, results: &Map<String, Value>) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or("unknown".into(), |kib| {
            format!("{:.0} GiB", kib / 1024.0 / 1024.0)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kernel = kernel.trim();
    format!(
        "# Benchmarks\n\n\
         Measured by `exec-server-bench` (bench/), every figure beside its baseline from the same run,\n\
         on loopback: the daemon and the client share the machine. Round trips are medians (p99 in\n\
         the JSON); the daemon's, the local spawn's, the sandboxed and bubblewrap's (every third run)\n\
         alternate run by run, so the machine's drift in speed falls on all alike. Rates are\n\
         medians of whole transfers, MB = 10^6 bytes. Sandboxed rows use the workspace-write\n\
         profile (read everything, write one `git init`ed workspace). The fan-out runs 50 × 200\n\
         execs each way, not issue 25's 50 × 1,000, which take 3–5 min on 2 cores. Dated A/B\n\
         runs of single changes, which a full run does not rewrite:\n\
         [benchmark-history.md](benchmark-history.md).\n\n\
         {table}\n\
         ## Machine\n\n{cpu}, {cores} cores, {memory}, Linux {kernel}\n\n\
         ## How to rerun\n\n\
         ```sh\ncargo run --release -p exec-server-bench            # full run, rewrites this file\n\
         cargo run --release -p exec-server-bench -- --quick # < 1 min, prints the JSON only\n```\n\n\
         The bench builds and starts the release daemon itself, and a throwaway sshd on a loopback\n\
         port with throwaway keys (installing openssh-server, and bubblewrap for the bwrap baseline,\n\
         with apt-get when they are missing), and codex's own exec-server (npm `@openai/codex`\n\
         0.171.0, installed under target/ with npm when missing; skipped with a note without npm),\n\
         measured beside ours by one plain JSON-RPC client written for both, run by run.\n\n\
         ## All figures\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(results).unwrap_or_default()
    )
}
