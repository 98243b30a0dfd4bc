//! A sandboxed command through codex's managed network proxy (`networkProxyLaunch`, issue #42),
//! beside codex's own exec-server in the same run: `curl` of a server on the host's loopback,
//! started with `networkProxy` (the proxy block the stock `codex exec` sends, allowing the
//! literal `127.0.0.1` only) and `enforceManagedNetwork`, under the workspace-write profile of
//! the other sandboxed rows (its own network restricted), so that the executor starts the proxy
//! beside the command and the command reaches the server through it alone. The figure is
//! `process/start` to `process/closed`, the proxy's start included, one plain client per daemon,
//! interleaved run by run. A side whose start is refused, or whose `curl` does not get the whole
//! body, is reported as failed, with why, and not tried again.

use crate::codex::{start_params, CodexServer, Pair, Plain};
use crate::harness::{http_server, micros, percentile, Results, Size, Workspace};
use crate::report::Row;
use serde_json::{json, Value};
use std::time::Duration;

/// The body the server sends, in bytes.
const BODY_BYTES: usize = 64;

/// One run may take this long on either side: a stuck proxy must not stall the bench.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// `process/start`'s params of run `id`: the `curl` of `url`, sandboxed, through the proxy.
fn params(id: &str, url: &str, workspace: &Workspace) -> Value {
    let mut params = start_params(id, &["curl", "-sS", "--max-time", "10", url]);
    params["sandbox"] = workspace.sandbox.clone();
    params["enforceManagedNetwork"] = json!(true);
    // As codex exec 0.171.0 sends it with `[features.network_proxy]` on and this allowlist
    // (tests/it/codex_agent/network.rs), its defaults included.
    params["networkProxy"] = json!({"proxy": {
        "enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
        "allowUpstreamProxy": true, "dangerouslyAllowAllUnixSockets": false, "mode": "full",
        "domains": {"127.0.0.1": "allow"}, "unixSockets": null, "allowLocalBinding": false}});
    params
}

/// One run's round trip in µs, or why it did not fetch the whole body.
async fn once(client: &mut Plain, id: &str, params: Value) -> anyhow::Result<f64> {
    let run = tokio::time::timeout(RUN_TIMEOUT, client.run_params(id, params))
        .await
        .map_err(|_| anyhow::anyhow!("no process/closed within {RUN_TIMEOUT:?}"))??;
    anyhow::ensure!(
        run.exit_code == Some(0) && run.output_bytes == BODY_BYTES as u64,
        "curl through the proxy: exit code {:?}, {} bytes of output for a {BODY_BYTES}-byte body",
        run.exit_code,
        run.output_bytes
    );
    Ok(micros(run.elapsed))
}

/// Measures the row on this daemon (`ours_url`) and on codex's, or notes why it could not.
pub(crate) async fn compare(ours_url: &str, size: &Size, workspace: &Workspace, r: &mut Results) {
    let Some(codex) = CodexServer::start_or_note(r, "codex_proxy_rtt_us", "the managed proxy row")
    else {
        return;
    };
    if let Err(err) = measure(ours_url, &codex.url, size, workspace, r).await {
        r.note("codex_proxy_rtt_us", format!("{err:#}"));
    }
}

async fn measure(
    ours_url: &str,
    codex_url: &str,
    size: &Size,
    workspace: &Workspace,
    r: &mut Results,
) -> anyhow::Result<()> {
    let (url, server) = http_server(BODY_BYTES).await?;
    let mut clients = [
        Plain::connect(ours_url).await?,
        Plain::connect(codex_url).await?,
    ];
    let mut samples = Pair::default();
    let mut failed = [None, None];
    let runs = size.proxy_runs;
    for run in 0..runs / 10 + runs {
        for (side, client) in clients.iter_mut().enumerate() {
            if failed[side].is_some() {
                continue;
            }
            let id = format!("proxy{run}");
            match once(client, &id, params(&id, &url, workspace)).await {
                Ok(sample) if run >= runs / 10 => samples.push(side, sample),
                Ok(_) => {}
                Err(err) => failed[side] = Some(format!("failed: {err:#}")),
            }
        }
    }
    server.abort();
    let sides = [
        ("proxy_beside_codex", &mut samples.ours),
        ("codex_proxy", &mut samples.codex),
    ];
    for ((name, samples), failed) in sides.into_iter().zip(failed) {
        match failed {
            Some(why) => {
                eprintln!("bench: {name}: {why}");
                r.note(&format!("{name}_rtt_us"), why);
            }
            None => {
                r.put(&format!("{name}_rtt_us"), Some(percentile(samples, 0.5)));
                r.put(
                    &format!("{name}_rtt_p90_us"),
                    Some(percentile(samples, 0.9)),
                );
            }
        }
    }
    r.ratio(
        "proxy_vs_codex",
        "proxy_beside_codex_rtt_us",
        "codex_proxy_rtt_us",
    );
    Ok(())
}

pub(crate) const ROWS: &[Row] = &[Row {
    what: "beside codex: sandboxed `curl` of a loopback server through the managed network proxy (`networkProxy` allowing 127.0.0.1, `enforceManagedNetwork`, workspace-write), start to closed, median µs",
    ours: "proxy_beside_codex_rtt_us",
    baselines: &[
        ("p90", "proxy_beside_codex_rtt_p90_us"),
        ("codex", "codex_proxy_rtt_us"),
        ("codex p90", "codex_proxy_rtt_p90_us"),
        ("× codex", "proxy_vs_codex"),
    ],
    target: "≤ codex",
    met: |r| match (r.get("proxy_vs_codex"), r.get("codex_proxy_rtt_us")) {
        (Some(ratio), _) => Some(ratio <= 1.0),
        // Ours failed where codex's ran.
        (None, Some(_)) => Some(false),
        (None, None) => None,
    },
}];
