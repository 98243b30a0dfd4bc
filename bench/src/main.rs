//! exec-server benchmark: each figure beside its local or OpenSSH baseline, measured in the
//! same run. `--quick` is a smaller run (under a minute); the full run also writes
//! docs/benchmarks.md. The last line printed is one JSON object with every figure.
//!
//! Usage: `cargo run --release -p exec-server-bench -- [--quick] [--launch-only] [--daemon PATH]`
//! (`--launch-only`: the exec round trips alone, for work on the launch path; `--fleet-only`:
//! agent-sandbox's fleet alone; `--proxy-only`: the managed network proxy's row alone)
//!
//! A module per family of rows, each with the code that measures its figures and its `ROWS`
//! (a row's figure key, e.g. `fanout_disk_per_s`, is found in its family's module): `launch`,
//! `fanout`, `streaming`, `memory`, `attacks`, `restart`, and beside codex (`codex`, `proxy`,
//! `agent`), E2B (`envd`) and agent-sandbox (`fleet`). `harness` and `daemon` are what they share;
//! `report` makes the table.

mod agent;
mod attacks;
mod backends;
mod codex;
mod daemon;
mod envd;
mod fanout;
mod fleet;
mod harness;
mod launch;
mod memory;
mod packages;
mod proxy;
mod remote;
mod report;
mod restart;
mod ssh;
mod streaming;
mod streams;

use anyhow::Context as _;
use daemon::Daemon;
use exec_server_client::{Client, ClientOptions};
use harness::{Results, Size, Workspace, FULL, QUICK};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

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
    /// agent-sandbox's fleet alone: 50 daemons as pods behind nginx as the router, beside the
    /// reference FastAPI runtime.
    #[arg(long, conflicts_with_all = ["launch_only", "fanout_only", "stream_only", "agent_only"])]
    fleet_only: bool,
    /// The managed network proxy's row alone: a sandboxed `curl` through it, on this daemon
    /// and on codex's exec-server.
    #[arg(long, conflicts_with_all = ["launch_only", "fanout_only", "stream_only", "agent_only", "fleet_only"])]
    proxy_only: bool,
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
        fleet_only,
        proxy_only,
        daemon,
    } = clap::Parser::parse();
    let size = if quick { &QUICK } else { &FULL };
    let binary = daemon_binary(daemon)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let results = runtime.block_on(async {
        if fanout_only {
            let mut r = Results(Map::new());
            fanout::measure(&binary, size, &Workspace::new()?, &mut r).await?;
            return Ok(r.0);
        }
        if fleet_only {
            let mut r = Results(Map::new());
            fleet::measure(&binary, size, &mut r).await?;
            return Ok(r.0);
        }
        if proxy_only {
            let mut r = Results(Map::new());
            let daemon = Daemon::start(&binary, &[])?;
            proxy::compare(&daemon.url, size, &Workspace::new()?, &mut r).await;
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
    let table = report::report(&results);
    println!("{table}");
    let only = launch_only || fanout_only || stream_only || agent_only || fleet_only || proxy_only;
    if !quick && !only {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md");
        std::fs::write(&path, report::markdown(&table, &results))?;
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
        streaming::measure(&daemon, &client, &envd, sshd.as_ref(), size, &mut r).await?;
        return Ok(r.0);
    }
    let workspace = Workspace::new()?;
    launch::round_trip_rows(
        &client,
        &envd,
        size,
        &workspace,
        part == Part::Launch,
        &mut r,
    )
    .await?;
    eprintln!("bench: shell-snapshot starts beside plain login shells (interleaved)");
    launch::snapshot_starts(&client, size, &mut r).await?;
    eprintln!("bench: sandboxed round trips on each backend, beside bwrap (interleaved)");
    backends::measure(binary, size, &workspace, &mut r).await?;
    if part == Part::Launch {
        return Ok(r.0);
    }
    eprintln!("bench: codex's exec-server beside ours (one plain client, interleaved)");
    codex::compare(&daemon.url, size, &workspace, &mut r).await;
    eprintln!("bench: a sandboxed curl through the managed network proxy, ours beside codex's");
    proxy::compare(&daemon.url, size, &workspace, &mut r).await;
    eprintln!("bench: the codex agent's turn, on our exec-server and on codex's");
    agent::compare(&daemon.url, size.agent_turns, &mut r).await;
    launch::ssh_round_trips(sshd.as_ref(), size, &mut r)?;

    streaming::measure(&daemon, &client, &envd, sshd.as_ref(), size, &mut r).await?;

    eprintln!("bench: small file reads, plain and sandboxed");
    launch::small_reads(&client, &workspace, size.exec_runs, &mut r).await?;

    eprintln!("bench: sandboxed launches in a large workspace and an empty one");
    launch::large_workspace(&client, size, &mut r).await?;

    eprintln!("bench: resume after a dropped connection");
    restart::resume(&client, size, &mut r).await?;
    client.close().await;
    drop(daemon);

    eprintln!(
        "bench: fan-out over {} connections (state on tmpfs, on disk and off), beside xargs",
        fanout::FANOUT_CONNECTIONS
    );
    fanout::measure(binary, size, &workspace, &mut r).await?;

    eprintln!("bench: restart of the daemon");
    restart::measure(binary, size, &mut r).await?;

    eprintln!("bench: memory at scale");
    memory::measure(binary, size, &mut r).await?;

    eprintln!("bench: exhaustion attacks by a client that never reads");
    attacks::measure(binary, &mut r).await?;

    eprintln!("bench: agent-sandbox's fleet behind a router, beside the reference runtime");
    fleet::measure(binary, size, &mut r).await?;
    Ok(r.0)
}
