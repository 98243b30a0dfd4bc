//! `exec-server attach SESSION PROCESS`: a detached process followed here again, its retained
//! output replayed first; `~.` leaves it running.

use super::follow::{follow, Ended, Follow, Signals};
use super::ConnectArgs;
use std::io::IsTerminal as _;

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The session, as `run --detach` printed it.
    session: String,
    /// The process id, as `run --detach` printed it.
    process: String,
    /// Replay from this output seq on (`ps` shows none; 1 is the start); default: everything
    /// the daemon retained.
    #[arg(long, value_name = "SEQ", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    from_seq: u64,
}

pub(super) async fn run(args: AttachArgs) -> anyhow::Result<u8> {
    let client = args.connect.resume(&args.session).await?;
    let listed = super::ps::list(&client).await;
    let outcome = async {
        let Some(info) = listed?
            .into_iter()
            .find(|p| p.info.process_id == args.process)
        else {
            anyhow::bail!("session {} has no process {}", args.session, args.process);
        };
        let signals = Signals::listen()?;
        let mut process =
            client.attach(&args.process, args.from_seq - 1, info.info.sandbox_type)?;
        let how = Follow {
            signals,
            tty: info.info.tty,
            forward_eof: false,
            escape: std::io::stdin().is_terminal(),
        };
        follow(&mut process, how).await
    }
    .await;
    // The session is detached again; its TTL starts over.
    client.close().await;
    match outcome? {
        Ended::Exited(code) => Ok(code),
        Ended::Detached => {
            eprintln!(
                "exec-server: detached; `exec-server attach {} {}` to come back",
                args.session, args.process
            );
            Ok(0)
        }
    }
}
