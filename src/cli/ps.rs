//! `exec-server ps`: a session's processes (`process/list`) as a table.

use super::ConnectArgs;
use exec_server_client::protocol::methods;
use exec_server_client::protocol::process::{ProcessInfo, ProcessState, SandboxType};
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

pub(super) async fn run(args: PsArgs) -> anyhow::Result<()> {
    let mut options = args.connect.options()?;
    match args.session {
        Some(session) => options.resume_session_id = Some(session),
        // Its own session leaves nothing behind.
        None => options.on_disconnect = Some(DisconnectPolicy::Kill),
    }
    // A session whose client just dropped is taken over once the daemon noticed; one attached
    // elsewhere is reported soon rather than waited for.
    options.reconnect_deadline = Some(std::time::Duration::from_secs(2));
    let client = Client::connect(options).await?;
    let listed = client.send::<methods::ProcessList>(&()).await;
    client.close().await;
    print!("{}", table(&listed?.processes));
    Ok(())
}

const HEADER: [&str; 8] = [
    "PROCESS ID",
    "PID",
    "STATE",
    "EXIT",
    "SANDBOX",
    "STARTED",
    "CHILDREN",
    "COMMAND",
];

/// Columns padded to their widest cell; the command, last, is not.
fn table(processes: &[ProcessInfo]) -> String {
    let rows: Vec<[String; 8]> = processes.iter().map(row).collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header = HEADER.map(str::to_owned);
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

fn row(process: &ProcessInfo) -> [String; 8] {
    let state = match process.state {
        ProcessState::Running => "running",
        ProcessState::Exited => "exited",
        ProcessState::Closed => "closed",
    };
    let sandbox = match process.sandbox_type {
        SandboxType::None => "none",
        SandboxType::MacosSeatbelt => "seatbelt",
        SandboxType::LinuxSeccomp => "linux",
        SandboxType::WindowsRestrictedToken => "windows",
    };
    let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".into());
    [
        process.process_id.clone(),
        process.pid.to_string(),
        format!("{state}{}", if process.tty { " (tty)" } else { "" }),
        or_dash(process.exit_code.map(|code| code.to_string())),
        sandbox.into(),
        process.started_at.clone(),
        or_dash(process.live_descendants.map(|n| n.to_string())),
        process.argv.join(" "),
    ]
}
