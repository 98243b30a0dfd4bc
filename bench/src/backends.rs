//! The sandbox backends family: a sandboxed round trip of `true` on each backend the daemon
//! has (docs/sandbox.md, "Backends"), beside bubblewrap in the same workspace, interleaved run
//! by run: Landlock (this kernel's ABI), the mount view chosen on this kernel (Landlock still
//! scoping), and no Landlock at all (`--landlock-abi-max 0`: the mount view, a PID namespace
//! per launch and seccomp, as on gVisor).

use crate::daemon::Daemon;
use crate::harness::{bubblewrap, exec_once, spawn_once, Results, Size, Workspace};
use crate::report::Row;
use exec_server_client::{Client, ClientOptions};
use std::path::Path;

/// The backends measured: key, and the daemon's flags.
const BACKENDS: &[(&str, &[&str])] = &[
    ("landlock", &[]),
    ("mount_view", &["--sandbox-backend", "mount-view"]),
    ("no_landlock", &["--landlock-abi-max", "0"]),
];

pub(crate) async fn measure(
    binary: &Path,
    size: &Size,
    workspace: &Workspace,
    r: &mut Results,
) -> anyhow::Result<()> {
    let mut daemons = Vec::new();
    for (_, args) in BACKENDS {
        let daemon = Daemon::start(binary, args)?;
        let client = Client::connect(ClientOptions::new(daemon.url.clone())).await?;
        daemons.push((daemon, client));
    }
    let bwrap = bubblewrap();
    let runs = size.exec_runs / 3;
    let warmup = runs / 10;
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); BACKENDS.len() + 1];
    for run in 0..warmup + runs {
        for (index, (_, client)) in daemons.iter().enumerate() {
            let sample = exec_once(client, Some(&workspace.sandbox)).await?;
            if run >= warmup {
                samples[index].push(sample);
            }
        }
        if let Ok(bwrap) = &bwrap {
            let sample = spawn_once(workspace.bwrap(bwrap))?;
            if run >= warmup {
                samples[BACKENDS.len()].push(sample);
            }
        }
    }
    let (measured, bwrap_samples) = samples.split_at_mut(BACKENDS.len());
    match &bwrap {
        Ok(_) => r.put_rtt("backend_bwrap", &mut bwrap_samples[0]),
        Err(why) => r.note("backend_bwrap_skipped", why.clone()),
    }
    for ((key, _), samples) in BACKENDS.iter().zip(measured) {
        r.put_rtt(&format!("backend_{key}"), samples);
        r.ratio(
            &format!("backend_{key}_vs_bwrap"),
            &format!("backend_{key}_rtt_us"),
            "backend_bwrap_rtt_us",
        );
    }
    for (daemon, client) in daemons {
        client.close().await;
        drop(daemon);
    }
    Ok(())
}

pub(crate) const ROWS: &[Row] = &[
    Row {
        what: "sandboxed exec round trip on the Landlock backend (workspace-write, interleaved with the other backends and bwrap), µs",
        ours: "backend_landlock_rtt_us",
        baselines: &[
            ("bwrap in the same workspace", "backend_bwrap_rtt_us"),
            ("× bwrap", "backend_landlock_vs_bwrap"),
        ],
        target: "",
        met: |_| None,
    },
    Row {
        what: "the same on the mount-view backend chosen on this kernel (Landlock scopes kept), µs",
        ours: "backend_mount_view_rtt_us",
        baselines: &[("× bwrap", "backend_mount_view_vs_bwrap")],
        target: "",
        met: |_| None,
    },
    Row {
        what: "the same without Landlock (mount view, PID namespace, seccomp: as on gVisor), µs",
        ours: "backend_no_landlock_rtt_us",
        baselines: &[("× bwrap", "backend_no_landlock_vs_bwrap")],
        target: "",
        met: |_| None,
    },
];
