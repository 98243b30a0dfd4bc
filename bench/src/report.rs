//! The table: each family's rows (in its own module, `ROWS`), in the order of [`FAMILIES`],
//! and docs/benchmarks.md around it.

use crate::harness::Results;
use crate::{
    agent, attacks, backends, codex, envd, fanout, fleet, launch, memory, proxy, restart, streaming,
};
use serde_json::{Map, Value};

/// One line of the table: a figure, its baselines, its target and whether it is met (None:
/// not measured, or no target).
pub(crate) struct Row {
    pub(crate) what: &'static str,
    pub(crate) ours: &'static str,
    pub(crate) baselines: &'static [(&'static str, &'static str)],
    pub(crate) target: &'static str,
    pub(crate) met: fn(&Results) -> Option<bool>,
}

/// Every family's rows, in the table's order.
const FAMILIES: &[&[Row]] = &[
    codex::ROWS,
    proxy::ROWS,
    agent::ROWS,
    envd::ROWS,
    launch::ROWS,
    backends::ROWS,
    fanout::ROWS,
    streaming::ROWS,
    memory::ROWS,
    attacks::ROWS,
    restart::ROWS,
    fleet::ROWS,
];

/// A figure, or why it is missing when the run said so in its place.
fn show(r: &Results, key: &str) -> String {
    match r.0.get(key) {
        Some(Value::String(why)) => format!("n/a ({why})"),
        _ => r.get(key).map_or("n/a".into(), |v| format!("{v}")),
    }
}

/// A Markdown table of every row.
pub(crate) fn report(results: &Map<String, Value>) -> String {
    let r = Results(results.clone());
    let mut out = String::from(
        "| measure | exec-server | baselines | target | met |\n|---|---|---|---|---|\n",
    );
    for row in FAMILIES.iter().flat_map(|rows| rows.iter()) {
        let baselines: Vec<String> = row
            .baselines
            .iter()
            .map(|(name, key)| format!("{name}: {}", show(&r, key)))
            .collect();
        let met = match (row.met)(&r) {
            Some(true) => "yes",
            Some(false) => "**no**",
            None if row.target.is_empty() => "",
            None => "n/a",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {met} |\n",
            row.what,
            show(&r, row.ours),
            baselines.join("; "),
            row.target
        ));
    }
    out
}

pub(crate) fn markdown(table: &str, results: &Map<String, Value>) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or("unknown".into(), |kib| {
            format!("{:.0} GiB", kib / 1024.0 / 1024.0)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kernel = kernel.trim();
    format!(
        "# Benchmarks\n\n\
         Measured by `exec-server-bench` (bench/), every figure beside its baseline from the same run,\n\
         on loopback: the daemon and the client share the machine. Round trips are medians (p99 in\n\
         the JSON); the daemon's, the local spawn's, the sandboxed and bubblewrap's (every third run)\n\
         alternate run by run, so the machine's drift in speed falls on all alike. Rates are\n\
         medians of whole transfers, MB = 10^6 bytes. Sandboxed rows use the workspace-write\n\
         profile (read everything, write one `git init`ed workspace). The fan-out runs 50 × 200\n\
         execs each way, not issue 25's 50 × 1,000, which take 3–5 min on 2 cores. Dated A/B\n\
         runs of single changes, which a full run does not rewrite:\n\
         [benchmark-history.md](benchmark-history.md).\n\n\
         {table}\n\
         ## Machine\n\n{cpu}, {cores} cores, {memory}, Linux {kernel}\n\n\
         ## How to rerun\n\n\
         ```sh\ncargo run --release -p exec-server-bench            # full run, rewrites this file\n\
         cargo run --release -p exec-server-bench -- --quick # < 1 min, prints the JSON only\n\
         cargo run --release -p exec-server-bench -- --fleet-only # the fleet's rows alone, ~20 s\n\
         cargo run --release -p exec-server-bench -- --quick --proxy-only # the managed proxy's row alone\n```\n\n\
         The bench builds and starts the release daemon itself, and a throwaway sshd on a loopback\n\
         port with throwaway keys (installing openssh-server, and bubblewrap for the bwrap baseline,\n\
         with apt-get when they are missing), and codex's own exec-server (npm `@openai/codex`\n\
         0.171.0, installed under target/ with npm when missing; skipped with a note without npm),\n\
         measured beside ours by one plain JSON-RPC client written for both, run by run. The fleet's\n\
         rows run nginx (nginx-light, installed with apt-get when missing) as agent-sandbox's router,\n\
         and the reference runtime under uvicorn from a venv under target/ (`{packages}`,\n\
         installed with pip; without pip its figures say why).\n\n\
         ## All figures\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(results).unwrap_or_default(),
        packages = fleet::REFERENCE_PACKAGES.join(" "),
    )
}
