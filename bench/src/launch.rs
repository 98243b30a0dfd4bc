//! The launch family: round trips of `true` through the daemon, plain and sandboxed, beside a
//! local spawn, bubblewrap and ssh; sandboxed launches in a large workspace; small file reads.

use crate::envd;
use crate::harness::{
    alternate, bubblewrap, exec_once, micros, spawn_once, wide_tree, Results, Size, Workspace,
};
use crate::report::Row;
use crate::ssh;
use anyhow::Context as _;
use exec_server_client::{path_uri, Client};
use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

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

/// The exec round trips (plain, local, sandboxed and bwrap interleaved, then sandboxed back to
/// back), and the envd listener's; with `launch_only`, also the fastest tenth of each.
pub(crate) async fn round_trip_rows(
    client: &Client,
    envd: &envd::Envd,
    size: &Size,
    workspace: &Workspace,
    launch_only: bool,
    r: &mut Results,
) -> anyhow::Result<()> {
    let bwrap = bubblewrap();
    eprintln!("bench: exec round trips (plain, local, sandboxed and bwrap, interleaved)");
    let mut trips = round_trips(client, size.exec_runs, workspace, &bwrap).await?;
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
            burst.push(exec_once(client, Some(&workspace.sandbox)).await?);
        }
        r.put_rtt("sandbox_burst", &mut burst);
        r.ratio(
            "sandbox_burst_vs_spawn",
            "sandbox_burst_rtt_us",
            "spawn_rtt_us",
        );
    }
    r.ratio("exec_vs_spawn", "exec_rtt_us", "spawn_rtt_us");
    envd::round_trips(client, envd, size.exec_runs, r).await?;
    if launch_only {
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
    }
    Ok(())
}

/// A login profile as agents' hosts have them: `.bash_profile` reads `.bashrc`, which exports
/// 40 variables, defines 20 functions and looks for 10 tools on `PATH`.
fn login_home() -> anyhow::Result<tempfile::TempDir> {
    let home = tempfile::tempdir()?;
    let mut rc = String::new();
    for i in 0..40 {
        rc.push_str(&format!("export PROFILE_VAR_{i}=value-{i}\n"));
    }
    for i in 0..20 {
        rc.push_str(&format!("helper_{i}() {{ echo \"helper {i}: $*\"; }}\n"));
    }
    for tool in [
        "git", "python3", "node", "cargo", "go", "make", "gcc", "curl", "jq", "rg",
    ] {
        rc.push_str(&format!(
            "command -v {tool} >/dev/null 2>&1 && export HAS_{tool}=1\n"
        ));
    }
    std::fs::write(home.path().join(".bashrc"), rc)?;
    std::fs::write(
        home.path().join(".bash_profile"),
        "[ -r ~/.bashrc ] && . ~/.bashrc\n",
    )?;
    Ok(home)
}

/// `bash -lc true` started plainly (a login shell reading the profile each time) beside the
/// same start with `shellSnapshot` (the profile's state, captured once for the scope, restored
/// before the command), interleaved, µs.
pub(crate) async fn snapshot_starts(
    client: &Client,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
    let home = login_home()?;
    let home = home
        .path()
        .to_str()
        .context("path is not UTF-8")?
        .to_owned();
    let start = |snapshot: bool| {
        let home = home.clone();
        async move {
            let mut cmd = crate::harness::command(&["/bin/bash", "-lc", "true"]).env("HOME", home);
            if snapshot {
                cmd.params_mut().shell_snapshot = Some(serde_json::from_value(json!({
                    "scopeId": "bench", "shell": {"name": "bash", "path": "/bin/bash"}}))?);
            }
            let started = Instant::now();
            let mut process = client.start(cmd).await?;
            crate::harness::finish(&mut process).await?;
            Ok(micros(started.elapsed()))
        }
    };
    let cases = [
        ("login_start_rtt_us", false),
        ("snapshot_start_rtt_us", true),
    ];
    let starts = alternate(size.exec_runs / 3, &cases, start).await?;
    starts.record(r);
    r.ratio(
        "snapshot_vs_login",
        "snapshot_start_rtt_us",
        "login_start_rtt_us",
    );
    Ok(())
}

/// Round trips of `true` over ssh, a new connection each and through a ControlMaster.
pub(crate) fn ssh_round_trips(
    sshd: Option<&ssh::Sshd>,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
    if let Some(sshd) = sshd {
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
    Ok(())
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

/// `fs/readFile` of a 4 KiB file in `workspace`, plain and under its sandbox (where each read
/// runs in a sandbox helper), µs.
pub(crate) async fn small_reads(
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
pub(crate) async fn large_workspace(
    client: &Client,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
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

pub(crate) const ROWS: &[Row] = &[
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
        what: "sandboxed exec round trip, back to back, µs",
        ours: "sandbox_burst_rtt_us",
        baselines: &[("local spawn", "spawn_rtt_us")],
        target: "",
        met: |_| None,
    },
    Row {
        what: "`bash -lc true` with `shellSnapshot` (a profile of 40 exports, 20 functions, 10 tool lookups, captured once), µs",
        ours: "snapshot_start_rtt_us",
        baselines: &[
            ("plain login shell", "login_start_rtt_us"),
            ("× plain", "snapshot_vs_login"),
        ],
        target: "",
        met: |_| None,
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
];
