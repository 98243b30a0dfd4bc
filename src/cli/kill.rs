//! `exec-server kill SESSION PROCESS`: ends a process of a detached session.

use super::ConnectArgs;
use exec_server_client::protocol::process::ProcessSignal;
use exec_server_client::Client;

#[derive(Debug, clap::Args)]
pub struct KillArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    session: String,
    process: String,
    /// Send this signal to the process alone (INT, TERM, KILL, HUP, QUIT, or 2, 15, 9, 1, 3)
    /// instead of killing its whole tree.
    #[arg(long, short = 's', value_parser = parse_signal)]
    signal: Option<ProcessSignal>,
}

fn parse_signal(text: &str) -> Result<ProcessSignal, String> {
    let name = text.trim_start_matches("SIG").trim_start_matches("sig");
    Ok(match name.to_ascii_uppercase().as_str() {
        "INT" | "2" => ProcessSignal::Interrupt,
        "TERM" | "15" => ProcessSignal::Terminate,
        "KILL" | "9" => ProcessSignal::Kill,
        "HUP" | "1" => ProcessSignal::Hangup,
        "QUIT" | "3" => ProcessSignal::Quit,
        _ => return Err(format!("`{text}` is not one of INT, TERM, KILL, HUP, QUIT")),
    })
}

pub(super) async fn run(args: KillArgs) -> anyhow::Result<()> {
    let client = args.connect.resume(&args.session).await?;
    let outcome = kill(&client, &args).await;
    client.close().await;
    outcome
}

async fn kill(client: &Client, args: &KillArgs) -> anyhow::Result<()> {
    let listed = super::ps::list(client).await?;
    if !listed.iter().any(|p| p.info.process_id == args.process) {
        anyhow::bail!("session {} has no process {}", args.session, args.process);
    }
    let process = client.process_handle(&args.process);
    match args.signal {
        Some(signal) => process.signal(signal).await?,
        None => {
            process.terminate().await?;
        }
    }
    Ok(())
}
