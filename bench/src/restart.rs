//! The restart family: resuming after a dropped connection, a successor taking over from a
//! killed daemon, and the memory detached processes' retained output costs.

use crate::daemon::Daemon;
use crate::harness::{command, stats, Results, Size, PATH};
use crate::report::Row;
use anyhow::{bail, Context as _};
use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use exec_server_client::protocol::process::OutputStream;
use exec_server_client::{Client, ClientOptions, ProcessEvent};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// The time from a dropped connection to its client resumed and caught up, ms.
pub(crate) async fn resume(client: &Client, size: &Size, r: &mut Results) -> anyhow::Result<()> {
    let (resume, resume_p99) = stats(&mut resume_times(client, size.resume_runs).await?);
    r.put("resume_ms", Some(resume));
    r.put("resume_p99_ms", Some(resume_p99));
    Ok(())
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

/// Bytes each detached process writes, all retained (the default retention is 64 MiB).
pub(crate) const DETACHED_OUTPUT: u64 = 50 << 20;

/// The daemon killed (SIGKILL) while a process streams numbered lines: the time from the kill
/// to a successor serving and its resumed client caught up with the output (the lines must
/// stay complete); then the RSS of detached processes' retained output.
pub(crate) async fn measure(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
    crash_restarts(binary, size, r).await?;
    detached_output(binary, size, r).await
}

/// Restarts from a SIGKILL while a process streams: `restart_ms`.
async fn crash_restarts(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
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
        let state = daemon.crash()?;
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
    Ok(())
}

/// The RSS of [`DETACHED_OUTPUT`] retained from each of `size.detached` detached processes.
async fn detached_output(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
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

pub(crate) const ROWS: &[Row] = &[
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
