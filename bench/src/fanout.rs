//! The fan-out family: execs of `true` over many connections at once to one daemon, plain and
//! sandboxed, with the daemon's state dir on tmpfs, on the machine's disk and off, and on each
//! of the first two after it served many launches, beside the same through remote mode and a
//! local `xargs -P50`.

use crate::daemon::{Daemon, StateDir};
use crate::harness::{exec_once, stats, Results, Size, Workspace};
use crate::remote;
use crate::report::Row;
use exec_server_client::{Client, ClientOptions};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Connections the fan-out runs its execs over at once.
pub(crate) const FANOUT_CONNECTIONS: usize = 50;

/// Rounds the fan-out is split into, each running every daemon's plain and sandboxed share,
/// remote mode's and `xargs`'s in turn, so that the machine's drift falls on all alike.
const FANOUT_ROUNDS: usize = 4;

/// The daemons fanned out to: the prefix of their figures, where each keeps its state, and
/// whether it is aged first. `fanout` (tmpfs) is the deployed default, the one the other rows
/// compare with.
const FLEETS: [(&str, StateDir, Aged); 5] = [
    ("fanout", StateDir::Tmpfs, Aged::No),
    ("fanout_disk", StateDir::Disk, Aged::No),
    ("fanout_no_state", StateDir::Off, Aged::No),
    ("fanout_aged", StateDir::Tmpfs, Aged::Yes),
    ("fanout_disk_aged", StateDir::Disk, Aged::Yes),
];

/// An aged daemon has served [`Size::fanout_aged_launches`] launches before it is measured,
/// with its exited processes done with after a second (not the default 30 s), so that its
/// state dir is in the state a daemon launching steadily keeps it in. It runs plain execs only.
#[derive(Clone, Copy, PartialEq)]
enum Aged {
    No,
    Yes,
}

/// How long after its exit an aged daemon's process is done with.
const AGED_RETENTION: &str = "1s";

/// Execs of `true` over [`FANOUT_CONNECTIONS`] connections at once to each of the [`FLEETS`]'
/// fresh daemons, each connection running its share back to back, plain and under
/// `workspace`'s sandbox (all in that one workspace), beside the same through remote mode and
/// a local `xargs -P50` of as many `true`.
pub(crate) async fn measure(
    binary: &Path,
    size: &Size,
    workspace: &Workspace,
    r: &mut Results,
) -> anyhow::Result<()> {
    let mut fleets = Vec::with_capacity(FLEETS.len());
    for (name, state, aged) in FLEETS {
        fleets.push(Fleet::start(binary, name, state, aged).await?);
    }
    let aging = size.fanout_aged_launches / FANOUT_CONNECTIONS;
    for fleet in fleets.iter().filter(|fleet| fleet.aged == Aged::Yes) {
        Fanout::default().round(&fleet.clients, aging, None).await;
    }
    // Their last launches done with.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_round = size.fanout_per_connection / FANOUT_ROUNDS;
    let round_execs = FANOUT_CONNECTIONS * per_round;
    let xargs_script = format!("seq {round_execs} | xargs -P{FANOUT_CONNECTIONS} -n1 true");
    // The same fan-out over the one socket a daemon in remote mode dialed to the bench.
    let remote = remote::Remote::start(binary).await?;
    let remote_clients = vec![remote.client.clone(); FANOUT_CONNECTIONS];
    let mut through_remote = Fanout::default();
    let mut xargs = Duration::ZERO;
    for _ in 0..FANOUT_ROUNDS {
        for fleet in &mut fleets {
            fleet.round(per_round, &workspace.sandbox).await;
        }
        through_remote.round(&remote_clients, per_round, None).await;
        let started = Instant::now();
        let status = std::process::Command::new("sh")
            .args(["-c", &xargs_script])
            .status()?;
        anyhow::ensure!(status.success(), "`{xargs_script}` failed");
        xargs += started.elapsed();
    }
    let execs = (round_execs * FANOUT_ROUNDS) as f64;
    r.put("fanout_execs", Some(execs));
    r.put("xargs_per_s", Some(execs / xargs.as_secs_f64()));
    for fleet in fleets {
        fleet.record(r).await;
    }
    through_remote.record("remote_fanout", r);
    r.ratio(
        "remote_fanout_vs_direct",
        "remote_fanout_per_s",
        "fanout_per_s",
    );
    r.ratio("fanout_disk_vs_tmpfs", "fanout_disk_per_s", "fanout_per_s");
    r.ratio(
        "fanout_no_state_vs_tmpfs",
        "fanout_no_state_per_s",
        "fanout_per_s",
    );
    r.put(
        "fanout_aged_launches",
        Some(size.fanout_aged_launches as f64),
    );
    r.ratio(
        "fanout_disk_aged_vs_tmpfs",
        "fanout_disk_aged_per_s",
        "fanout_aged_per_s",
    );
    Ok(())
}

/// One daemon of the fan-out, its connections, and its plain and sandboxed fan-outs.
struct Fleet {
    name: &'static str,
    aged: Aged,
    clients: Vec<Client>,
    plain: Fanout,
    sandboxed: Fanout,
    _daemon: Daemon,
}

impl Fleet {
    async fn start(
        binary: &Path,
        name: &'static str,
        state: StateDir,
        aged: Aged,
    ) -> anyhow::Result<Self> {
        let args: &[&str] = match aged {
            Aged::Yes => &["--exited-retention", AGED_RETENTION],
            Aged::No => &[],
        };
        let daemon = Daemon::start_keeping(binary, args, state)?;
        let mut clients = Vec::with_capacity(FANOUT_CONNECTIONS);
        for _ in 0..FANOUT_CONNECTIONS {
            clients.push(Client::connect(ClientOptions::new(daemon.url.clone())).await?);
        }
        Ok(Self {
            name,
            aged,
            clients,
            plain: Fanout::default(),
            sandboxed: Fanout::default(),
            _daemon: daemon,
        })
    }

    async fn round(&mut self, execs: usize, sandbox: &Value) {
        self.plain.round(&self.clients, execs, None).await;
        if self.aged == Aged::No {
            self.sandboxed
                .round(&self.clients, execs, Some(sandbox))
                .await;
        }
    }

    /// Its figures under its name, its sandboxed ones under `{name}_sandboxed`, and the ratios
    /// to `xargs` and of sandboxed to plain.
    async fn record(self, r: &mut Results) {
        let name = self.name;
        let sandboxed = format!("{name}_sandboxed");
        self.plain.record(name, r);
        r.ratio(
            &format!("{name}_vs_xargs"),
            &format!("{name}_per_s"),
            "xargs_per_s",
        );
        if self.aged == Aged::No {
            self.sandboxed.record(&sandboxed, r);
            r.ratio(
                &format!("{sandboxed}_vs_{name}"),
                &format!("{sandboxed}_per_s"),
                &format!("{name}_per_s"),
            );
        }
        for client in self.clients {
            client.close().await;
        }
    }
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

pub(crate) const ROWS: &[Row] = &[
    Row {
        what: "fan-out: execs of `true` per s over 50 connections at once, each exec's p99 ms \
               (state dir on tmpfs)",
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
        what: "fan-out with the state dir on the machine's disk (not tmpfs), execs per s",
        ours: "fanout_disk_per_s",
        baselines: &[
            ("on tmpfs", "fanout_per_s"),
            ("× tmpfs", "fanout_disk_vs_tmpfs"),
            ("× xargs", "fanout_disk_vs_xargs"),
            ("p99 ms", "fanout_disk_p99_ms"),
            ("failed", "fanout_disk_errors"),
        ],
        target: "≥ 0.9× tmpfs, ≥ 0.8× xargs, p99 ≤ 100 ms, none failed",
        met: |r| {
            Some(
                r.get("fanout_disk_vs_tmpfs")? >= 0.9
                    && r.get("fanout_disk_vs_xargs")? >= 0.8
                    && r.get("fanout_disk_p99_ms")? <= 100.0
                    && r.get("fanout_disk_errors")? == 0.0,
            )
        },
    },
    Row {
        what: "fan-out with the state dir on the machine's disk after it served many launches \
               (exited processes done with after 1 s), execs per s",
        ours: "fanout_disk_aged_per_s",
        baselines: &[
            ("launches before", "fanout_aged_launches"),
            ("the same on tmpfs", "fanout_aged_per_s"),
            ("× tmpfs", "fanout_disk_aged_vs_tmpfs"),
            ("× xargs", "fanout_disk_aged_vs_xargs"),
            ("p99 ms", "fanout_disk_aged_p99_ms"),
            ("failed", "fanout_disk_aged_errors"),
        ],
        target: "≥ 0.9× tmpfs, ≥ 0.8× xargs, p99 ≤ 100 ms, none failed",
        met: |r| {
            Some(
                r.get("fanout_disk_aged_vs_tmpfs")? >= 0.9
                    && r.get("fanout_disk_aged_vs_xargs")? >= 0.8
                    && r.get("fanout_disk_aged_p99_ms")? <= 100.0
                    && r.get("fanout_disk_aged_errors")? == 0.0
                    && r.get("fanout_aged_errors")? == 0.0,
            )
        },
    },
    Row {
        what: "fan-out keeping no state (`--state-dir none`), execs per s",
        ours: "fanout_no_state_per_s",
        baselines: &[
            ("state on tmpfs", "fanout_per_s"),
            ("× tmpfs", "fanout_no_state_vs_tmpfs"),
            ("× xargs", "fanout_no_state_vs_xargs"),
            ("p99 ms", "fanout_no_state_p99_ms"),
            ("failed", "fanout_no_state_errors"),
        ],
        target: "p99 ≤ 100 ms, none failed",
        met: |r| {
            Some(
                r.get("fanout_no_state_p99_ms")? <= 100.0
                    && r.get("fanout_no_state_errors")? == 0.0,
            )
        },
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
        met: |r| {
            Some(r.get("remote_fanout_vs_direct")? >= 0.9 && r.get("remote_fanout_errors")? == 0.0)
        },
    },
    Row {
        what:
            "sandboxed fan-out (workspace-write, one `git init`ed workspace for all), execs per s \
               (state dir on tmpfs)",
        ours: "fanout_sandboxed_per_s",
        baselines: &[
            ("unsandboxed", "fanout_per_s"),
            ("× unsandboxed", "fanout_sandboxed_vs_fanout"),
            ("p99 ms", "fanout_sandboxed_p99_ms"),
            ("failed", "fanout_sandboxed_errors"),
        ],
        target: "≥ 0.8× unsandboxed, p99 ≤ 150 ms, none failed",
        met: |r| {
            Some(
                r.get("fanout_sandboxed_vs_fanout")? >= 0.8
                    && r.get("fanout_sandboxed_p99_ms")? <= 150.0
                    && r.get("fanout_sandboxed_errors")? == 0.0,
            )
        },
    },
    Row {
        what: "sandboxed fan-out with the state dir on the machine's disk, execs per s",
        ours: "fanout_disk_sandboxed_per_s",
        baselines: &[
            ("unsandboxed on disk", "fanout_disk_per_s"),
            ("× unsandboxed", "fanout_disk_sandboxed_vs_fanout_disk"),
            ("p99 ms", "fanout_disk_sandboxed_p99_ms"),
            ("failed", "fanout_disk_sandboxed_errors"),
        ],
        target: "≥ 0.8× unsandboxed, p99 ≤ 150 ms, none failed",
        met: |r| {
            Some(
                r.get("fanout_disk_sandboxed_vs_fanout_disk")? >= 0.8
                    && r.get("fanout_disk_sandboxed_p99_ms")? <= 150.0
                    && r.get("fanout_disk_sandboxed_errors")? == 0.0,
            )
        },
    },
    Row {
        what: "sandboxed fan-out keeping no state (`--state-dir none`), execs per s",
        ours: "fanout_no_state_sandboxed_per_s",
        baselines: &[
            ("unsandboxed, no state", "fanout_no_state_per_s"),
            (
                "× unsandboxed",
                "fanout_no_state_sandboxed_vs_fanout_no_state",
            ),
            ("p99 ms", "fanout_no_state_sandboxed_p99_ms"),
            ("failed", "fanout_no_state_sandboxed_errors"),
        ],
        target: "≥ 0.8× unsandboxed, p99 ≤ 150 ms, none failed",
        met: |r| {
            Some(
                r.get("fanout_no_state_sandboxed_vs_fanout_no_state")? >= 0.8
                    && r.get("fanout_no_state_sandboxed_p99_ms")? <= 150.0
                    && r.get("fanout_no_state_sandboxed_errors")? == 0.0,
            )
        },
    },
];
