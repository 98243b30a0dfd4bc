//! The streaming family: a process's output and a file's bytes delivered to the client, each
//! beside its local pipe, `cat` and ssh baselines, in binary frames and as base64 in JSON text.

use crate::daemon::Daemon;
use crate::envd::Envd;
use crate::harness::{command, finish, mb_per_s, write_file, Medians, Results, Size};
use crate::report::Row;
use crate::{ssh, streams};
use anyhow::Context as _;
use exec_server_client::protocol::PathUri;
use exec_server_client::{path_uri, Client, ClientOptions, Command};
use std::io::Read as _;
use std::process::Stdio;
use std::time::Instant;

/// Output streaming and file streaming, each beside its local and ssh baselines.
pub(crate) async fn measure(
    daemon: &Daemon,
    client: &Client,
    envd: &Envd,
    sshd: Option<&ssh::Sshd>,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
    // The same transfers through a client that declines binary payloads: base64 in JSON text,
    // as a Codex-dialect client without this daemon's addition gets them.
    let mut text_options = ClientOptions::new(daemon.url.clone());
    text_options.binary_payloads = false;
    let text_client = Client::connect(text_options).await?;
    output(client, &text_client, daemon, envd, sshd, size, r).await?;
    files(client, &text_client, sshd, size, r).await?;
    text_client.close().await;
    Ok(())
}

/// Output streaming: through the client, in JSON text, through envd, pausing, beside a stalled
/// neighbour, through a local pipe and over ssh, each once a round.
async fn output(
    client: &Client,
    text_client: &Client,
    daemon: &Daemon,
    envd: &Envd,
    sshd: Option<&ssh::Sshd>,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
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
            stream_once(text_client, plain(), size).await?,
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
    Ok(())
}

/// File streaming with `fs/readBlock`, binary and in JSON text, beside `cat` and ssh `cat`.
async fn files(
    client: &Client,
    text_client: &Client,
    sshd: Option<&ssh::Sshd>,
    size: &Size,
    r: &mut Results,
) -> anyhow::Result<()> {
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
            read_blocks_once(text_client, &uri, size).await?,
        );
        if let Some(sshd) = sshd {
            let over_ssh = sshd.command(&format!("cat {}", file.display()), true);
            rates.add("ssh_file_mb_s", pipe_rate(over_ssh, size.file_bytes)?);
        }
    }
    rates.record(r);
    drop(dir);
    r.ratio("readblock_vs_cat", "readblock_mb_s", "cat_mb_s");
    r.ratio("readblock_vs_ssh", "readblock_mb_s", "ssh_file_mb_s");
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

pub(crate) const ROWS: &[Row] = &[
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
];
