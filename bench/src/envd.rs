//! The envd listener (`--envd-listen`) measured as the E2B SDKs use it: Connect
//! `process.Process/Start` with the JSON codec, over one HTTP/1.1 keep-alive connection.

use crate::harness::{exec_once, stats, Results};
use crate::report::Row;
use anyhow::{bail, Context as _};
use base64::Engine as _;
use exec_server_client::Client;
use futures::StreamExt as _;
use serde_json::{json, Value};
use std::time::Instant;

pub(crate) struct Envd {
    http: reqwest::Client,
    start_url: String,
}

/// A free loopback port for the listener (the daemon prints only its WebSocket URL).
pub(crate) fn free_addr() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

impl Envd {
    pub(crate) fn new(addr: &str) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            http: reqwest::Client::builder().http1_only().build()?,
            start_url: format!("http://{addr}/process.Process/Start"),
        })
    }

    /// One `/bin/true`, from the request to its end event, in µs.
    pub(crate) async fn exec_once(&self) -> anyhow::Result<f64> {
        let started = Instant::now();
        self.run(&["/bin/true"]).await?;
        Ok(crate::harness::micros(started.elapsed()))
    }

    /// MB/s of `bytes` of stdout delivered as data events.
    pub(crate) async fn stream_once(&self, bytes: u64) -> anyhow::Result<f64> {
        let started = Instant::now();
        let head = format!("head -c {bytes} /dev/zero");
        let got = self.run(&["/bin/sh", "-c", &head]).await?;
        anyhow::ensure!(got == bytes, "envd streamed {got} of {bytes} bytes");
        Ok(crate::harness::mb_per_s(got, started.elapsed()))
    }

    /// Starts `argv` and reads its events to the end; returns the stdout byte count, or why
    /// it did not exit 0.
    async fn run(&self, argv: &[&str]) -> anyhow::Result<u64> {
        let request = json!({"process": {"cmd": argv[0], "args": &argv[1..]}, "stdin": false});
        let response = self
            .http
            .post(&self.start_url)
            .header("content-type", "application/connect+json")
            .body(envelope(request.to_string().as_bytes()))
            .send()
            .await?;
        let mut body = response.error_for_status()?.bytes_stream();
        let (mut buffer, mut stdout, mut exit) = (Vec::new(), 0u64, None);
        while let Some(chunk) = body.next().await {
            buffer.extend_from_slice(&chunk?);
            while buffer.len() >= 5 {
                let len = u32::from_be_bytes(buffer[1..5].try_into()?) as usize;
                if buffer.len() < 5 + len {
                    break;
                }
                let (flags, message): (u8, Value) =
                    (buffer[0], serde_json::from_slice(&buffer[5..5 + len])?);
                buffer.drain(..5 + len);
                if flags & 2 != 0 {
                    if let Some(error) = message.get("error") {
                        bail!("envd ended the stream with {error}");
                    }
                    continue;
                }
                let event = &message["event"];
                if let Some(data) = event["data"]["stdout"].as_str() {
                    stdout += base64::engine::general_purpose::STANDARD
                        .decode(data)?
                        .len() as u64;
                }
                if let Some(end) = event.get("end") {
                    exit = Some(end["exitCode"].as_i64().unwrap_or(0));
                }
            }
        }
        match exit.context("the stream ended without an end event")? {
            0 => Ok(stdout),
            code => bail!("{argv:?} exited {code}"),
        }
    }
}

fn envelope(data: &[u8]) -> Vec<u8> {
    let mut framed = vec![0];
    framed.extend_from_slice(&(data.len() as u32).to_be_bytes());
    framed.extend_from_slice(data);
    framed
}

/// `true` through the envd listener as the E2B SDKs call it, interleaved with the same through
/// the WebSocket (the first tenth warms up): `envd_exec_rtt_us`, and `envd_vs_ws_rtt`, the
/// ratio of the two medians.
pub(crate) async fn round_trips(
    client: &Client,
    envd: &Envd,
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

pub(crate) const ROWS: &[Row] = &[
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
];
