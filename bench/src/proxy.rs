//! A sandboxed command through codex's managed network proxy (`networkProxyLaunch`, issue #42),
//! beside codex's own exec-server in the same run, in two cases:
//!
//! * `curl` of a small body from a server on the host's loopback, through the proxy its
//!   environment names: started with `networkProxy` (the proxy block the stock `codex exec`
//!   sends, allowing the literal `127.0.0.1` only) and `enforceManagedNetwork`, under the
//!   workspace-write profile of the other sandboxed rows, so that the executor starts the proxy
//!   beside the command and the command reaches the server through it alone;
//! * transparent TCP (`transparentTcp`): `curl --noproxy '*'` of a large body from a server on
//!   the host's own address, the connection carried through the proxy without the command's
//!   knowledge, which measures the relay itself.
//!
//! The figure is `process/start` to `process/closed`, the proxy's start included, one plain
//! client per daemon, interleaved run by run. A side whose start is refused, or whose `curl`
//! does not get the whole body, is reported as failed, with why, and not tried again.

use crate::codex::{start_params, CodexServer, Pair, Plain};
use crate::harness::{http_server_on, micros, percentile, Results, Size, Workspace};
use crate::report::Row;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::Duration;

/// One run may take this long on either side: a stuck proxy must not stall the bench.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// One case of the family: where its figures go, what the server sends and where it listens,
/// and whether the command honours the proxy or is carried by transparent TCP.
struct Case {
    ours: &'static str,
    codex: &'static str,
    ratio: &'static str,
    body: usize,
    transparent: bool,
}

const THROUGH_THE_PROXY: Case = Case {
    ours: "proxy_beside_codex",
    codex: "codex_proxy",
    ratio: "proxy_vs_codex",
    body: 64,
    transparent: false,
};

const TRANSPARENT: Case = Case {
    ours: "transparent_beside_codex",
    codex: "codex_transparent",
    ratio: "transparent_vs_codex",
    body: 64 << 20,
    transparent: true,
};

impl Case {
    /// `process/start`'s params of run `id`, fetching `url` from `host`, sandboxed.
    fn params(&self, id: &str, url: &str, host: IpAddr, workspace: &Workspace) -> Value {
        let size_only = [
            "--noproxy",
            "*",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download}",
        ];
        let mut argv = vec!["curl", "-sS", "--max-time", "20"];
        if self.transparent {
            argv.extend(size_only);
        }
        argv.push(url);
        let mut params = start_params(id, &argv);
        params["sandbox"] = workspace.sandbox.clone();
        params["enforceManagedNetwork"] = json!(true);
        // As codex exec 0.171.0 sends it with `[features.network_proxy]` on and this allowlist
        // (tests/it/codex_agent/network.rs), its defaults included.
        params["networkProxy"] = json!({"proxy": {
            "enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
            "allowUpstreamProxy": true, "dangerouslyAllowAllUnixSockets": false, "mode": "full",
            "domains": {host.to_string(): "allow"}, "unixSockets": null,
            "allowLocalBinding": false, "transparentTcp": self.transparent}});
        params
    }

    /// What the command prints when it got the whole body, in bytes.
    fn output_bytes(&self) -> u64 {
        match self.transparent {
            true => self.body.to_string().len() as u64,
            false => self.body as u64,
        }
    }
}

/// One run's round trip in µs, or why it did not fetch the whole body.
async fn once(client: &mut Plain, id: &str, params: Value, case: &Case) -> anyhow::Result<f64> {
    let run = tokio::time::timeout(RUN_TIMEOUT, client.run_params(id, params))
        .await
        .map_err(|_| anyhow::anyhow!("no process/closed within {RUN_TIMEOUT:?}"))??;
    anyhow::ensure!(
        run.exit_code == Some(0) && run.output_bytes == case.output_bytes(),
        "curl through the proxy: exit code {:?}, {} bytes of output for a {}-byte body",
        run.exit_code,
        run.output_bytes,
        case.body
    );
    Ok(micros(run.elapsed))
}

/// Measures the family on this daemon (`ours_url`) and on codex's, or notes why it could not.
pub(crate) async fn compare(ours_url: &str, size: &Size, workspace: &Workspace, r: &mut Results) {
    let Some(codex) = CodexServer::start_or_note(r, "codex_proxy_rtt_us", "the managed proxy row")
    else {
        return;
    };
    let loopback = std::net::Ipv4Addr::LOCALHOST.into();
    let cases = [
        (&THROUGH_THE_PROXY, Some(loopback)),
        (&TRANSPARENT, host_address()),
    ];
    for (case, host) in cases {
        let measured = match host {
            Some(host) => measure(ours_url, &codex.url, host, case, size, workspace, r).await,
            None => Err(anyhow::anyhow!("the host has no IPv4 address but loopback")),
        };
        if let Err(err) = measured {
            r.note(&format!("{}_rtt_us", case.codex), format!("{err:#}"));
        }
    }
}

/// One of the host's own IPv4 addresses other than loopback, which a sandbox reaches only
/// through transparent TCP.
fn host_address() -> Option<IpAddr> {
    let listed = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .skip_while(|word| *word != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok())
}

async fn measure(
    ours_url: &str,
    codex_url: &str,
    host: IpAddr,
    case: &Case,
    size: &Size,
    workspace: &Workspace,
    r: &mut Results,
) -> anyhow::Result<()> {
    let (url, server) = http_server_on(host, case.body).await?;
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
            let id = format!("{}{run}", case.ours);
            match once(client, &id, case.params(&id, &url, host, workspace), case).await {
                Ok(sample) if run >= runs / 10 => samples.push(side, sample),
                Ok(_) => {}
                Err(err) => failed[side] = Some(format!("failed: {err:#}")),
            }
        }
    }
    server.abort();
    let sides = [
        (case.ours, &mut samples.ours),
        (case.codex, &mut samples.codex),
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
        case.ratio,
        &format!("{}_rtt_us", case.ours),
        &format!("{}_rtt_us", case.codex),
    );
    Ok(())
}

pub(crate) const ROWS: &[Row] = &[
    Row {
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
    },
    Row {
        what: "beside codex: sandboxed `curl --noproxy '*'` of 64 MiB from a server on the host's own address, carried by transparent TCP (`transparentTcp`), start to closed, median µs",
        ours: "transparent_beside_codex_rtt_us",
        baselines: &[
            ("p90", "transparent_beside_codex_rtt_p90_us"),
            ("codex", "codex_transparent_rtt_us"),
            ("codex p90", "codex_transparent_rtt_p90_us"),
            ("× codex", "transparent_vs_codex"),
        ],
        target: "",
        met: |_| None,
    },
];
