//! `exec-server ps`: a session's processes (`process/list`) as a table.

use super::ConnectArgs;
use exec_server_client::protocol::methods::{self, Method as _};
use exec_server_client::protocol::process::{
    ProcessInfo, ProcessLimits, ProcessState, ProcessUsage, SandboxType,
};
use exec_server_client::protocol::session::DisconnectPolicy;
use exec_server_client::Client;

#[derive(Debug, clap::Args)]
pub struct PsArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The session to list, which must be detached: ps resumes it, then detaches again (its
    /// TTL starts over; a session opened with `onDisconnect: "kill"` ends when ps does). By
    /// default ps lists a session of its own, which is empty.
    #[arg(long)]
    session: Option<String>,
}

/// A `process/list` entry with the fields some daemons add: a column shows each only when
/// the daemon reports it.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Listed {
    #[serde(flatten)]
    pub(super) info: ProcessInfo,
    #[serde(default)]
    paused: Option<bool>,
    #[serde(default)]
    limits: Option<ProcessLimits>,
    #[serde(default)]
    usage: Option<ProcessUsage>,
}

#[derive(serde::Deserialize)]
struct ListResult {
    processes: Vec<Listed>,
}

/// The processes of the client's session.
pub(super) async fn list(client: &Client) -> anyhow::Result<Vec<Listed>> {
    let result: ListResult = client
        .request(methods::ProcessList::NAME, &(), methods::ProcessList::RETRY)
        .await?;
    Ok(result.processes)
}

pub(super) async fn run(args: PsArgs) -> anyhow::Result<()> {
    let client = match &args.session {
        Some(session) => args.connect.resume(session).await?,
        None => {
            // Its own session leaves nothing behind.
            let mut options = args.connect.options()?;
            options.on_disconnect = Some(DisconnectPolicy::Kill);
            Client::connect(options).await?
        }
    };
    let listed = list(&client).await;
    client.close().await;
    print!("{}", table(&listed?));
    Ok(())
}

type Cell = fn(&Listed) -> String;

/// The columns of the table: the optional ones only when some process has the field.
fn columns(processes: &[Listed]) -> Vec<(&'static str, Cell)> {
    let mut columns: Vec<(&'static str, Cell)> = vec![
        ("PROCESS ID", |p| p.info.process_id.clone()),
        ("PID", |p| p.info.pid.to_string()),
        ("STATE", state),
        ("EXIT", |p| or_dash(p.info.exit_code.map(|c| c.to_string()))),
        ("SANDBOX", |p| sandbox(p.info.sandbox_type).into()),
        ("STARTED", |p| p.info.started_at.clone()),
        ("CHILDREN", |p| {
            or_dash(p.info.live_descendants.map(|n| n.to_string()))
        }),
    ];
    if processes.iter().any(|p| p.paused.is_some()) {
        columns.push(("PAUSED", |p| {
            or_dash(
                p.paused
                    .map(|paused| if paused { "yes" } else { "no" }.into()),
            )
        }));
    }
    if processes.iter().any(|p| p.limits.is_some()) {
        columns.push(("LIMITS", |p| or_dash(p.limits.as_ref().map(limits))));
    }
    if processes.iter().any(|p| p.usage.is_some()) {
        columns.push(("USAGE", |p| or_dash(p.usage.as_ref().map(usage))));
    }
    columns.push(("COMMAND", |p| p.info.argv.join(" ")));
    columns
}

/// Columns padded to their widest cell; the command, last, is not.
fn table(processes: &[Listed]) -> String {
    let columns = columns(processes);
    let header: Vec<String> = columns.iter().map(|(name, _)| (*name).into()).collect();
    let rows: Vec<Vec<String>> = processes
        .iter()
        .map(|p| columns.iter().map(|(_, cell)| cell(p)).collect())
        .collect();
    let mut widths = vec![0; columns.len()];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let last = row.len() - 1;
        for (column, cell) in row.iter().enumerate() {
            if column == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[column]));
            }
        }
        text.push('\n');
    }
    text
}

fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".into())
}

fn state(process: &Listed) -> String {
    let state = match process.info.state {
        ProcessState::Running => "running",
        ProcessState::Exited => "exited",
        ProcessState::Closed => "closed",
    };
    format!("{state}{}", if process.info.tty { " (tty)" } else { "" })
}

fn sandbox(sandbox: SandboxType) -> &'static str {
    match sandbox {
        SandboxType::None => "none",
        SandboxType::MacosSeatbelt => "seatbelt",
        SandboxType::LinuxSeccomp => "linux",
        SandboxType::WindowsRestrictedToken => "windows",
    }
}

/// `timeout=90s,mem=512M,procs=64`, the limits that are set.
fn limits(limits: &ProcessLimits) -> String {
    let parts = [
        limits
            .timeout_ms
            .map(|ms| format!("timeout={}s", ms as f64 / 1000.0)),
        limits.max_memory_bytes.map(|b| format!("mem={}M", b >> 20)),
        limits.max_processes.map(|n| format!("procs={n}")),
        limits.max_open_files.map(|n| format!("files={n}")),
        limits.max_cpu_seconds.map(|n| format!("cpu={n}s")),
    ];
    let set: Vec<String> = parts.into_iter().flatten().collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(",")
    }
}

/// `cpu=1.2s,rss=10M`: user plus system time, and the peak resident set.
fn usage(usage: &ProcessUsage) -> String {
    let cpu = (usage.user_cpu_ms + usage.system_cpu_ms) as f64 / 1000.0;
    format!("cpu={cpu:.1}s,rss={}M", usage.max_rss_kib >> 10)
}
