//! The memory family: the daemon's RSS idle, per session, per live process and per retained
//! exited process.

use crate::daemon::Daemon;
use crate::harness::{command, finish, Results, Size};
use crate::report::Row;
use exec_server_client::{Client, ClientOptions};
use std::path::Path;
use std::time::Duration;

/// Idle RSS, then many sessions, each then with a live process, then many retained exited
/// processes, all on a fresh daemon.
pub(crate) async fn measure(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
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

pub(crate) const ROWS: &[Row] = &[
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
];
