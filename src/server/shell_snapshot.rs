//! The capture of a shell snapshot (`crate::process::snapshot`): the start's own command line
//! with the capture script, launched as a process of a session the daemon holds, so that it
//! is sandboxed, limited and killed as a whole tree exactly as the command would be, and no
//! client sees it in its session.

use super::Daemon;
use crate::process::snapshot::{Eligible, Restore, CAPTURE_TIMEOUT, MAX_CAPTURE_BYTES};
use crate::process::{Followed, OutputFollower};
use crate::session::Session;
use exec_server_protocol::process::{ExitReason, OutputStream};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The session the daemon holds for captures.
const CAPTURE_SESSION: &str = "shell snapshot captures";

/// How long a capture's tree may take to be reported gone after its timeout killed it.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// The command line that runs `start` in its scope's snapshot in `session`, captured now if
/// no capture is shared or cached; None runs it as it is.
pub(super) async fn restore(
    daemon: &Daemon,
    session: &Session,
    start: &Eligible<'_>,
    env: &BTreeMap<String, String>,
) -> Option<Restore> {
    session
        .snapshots
        .restore(start, env, capture(daemon, start))
        .await
}

/// Kills a capture that is given up on (too much output, or its start was cancelled).
struct Running {
    session: Arc<Session>,
    id: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.session.processes.terminate(&self.id);
    }
}

/// Runs the capture; its stdout when it exited 0.
async fn capture(daemon: &Daemon, start: &Eligible<'_>) -> Result<Vec<u8>, String> {
    let session = daemon
        .sessions
        .hold(CAPTURE_SESSION)
        .map_err(|err| format!("cannot capture shell snapshot: {err}"))?;
    let params = start.capture_params(format!("shell-snapshot:{}", uuid::Uuid::new_v4()));
    // Nobody is attached to the session: the output is only read here.
    let (_, on_reply) = tokio::sync::oneshot::channel();
    // Boxed: a capture is a launch, inside the launch of the command.
    Box::pin(super::launch(&session, &params, None, on_reply))
        .await
        .map_err(|err| format!("cannot capture shell snapshot: {err}"))?;
    let running = Running {
        session: session.clone(),
        id: params.process_id.clone(),
    };
    let process = session
        .processes
        .settled(&params.process_id)
        .await
        .ok_or("the shell snapshot capture vanished at its start")?;
    let mut output = OutputFollower::new(&process, 0);
    let mut stdout = Vec::new();
    let read = async {
        loop {
            match output.next(None).await {
                Followed::Chunks(chunks) => {
                    let chunks = chunks.iter().filter(|c| c.stream == OutputStream::Stdout);
                    chunks.for_each(|chunk| stdout.extend_from_slice(&chunk.data));
                    if stdout.len() > MAX_CAPTURE_BYTES {
                        return Err(format!(
                            "shell snapshot capture exceeds {MAX_CAPTURE_BYTES} bytes"
                        ));
                    }
                }
                Followed::Closed(end) if end.details.reason == Some(ExitReason::Timeout) => {
                    return Err("shell snapshot capture timed out".to_owned());
                }
                Followed::Closed(end) if end.exit_code == Some(0) => return Ok(()),
                Followed::Closed(end) => {
                    let code = end.exit_code.unwrap_or(-1);
                    return Err(format!("shell snapshot capture exited with {code}"));
                }
                Followed::Idle | Followed::Gone => {
                    return Err("the shell snapshot capture vanished".to_owned())
                }
            }
        }
    };
    tokio::time::timeout(CAPTURE_TIMEOUT + KILL_GRACE, read)
        .await
        .map_err(|_| "shell snapshot capture timed out".to_owned())??;
    drop(running);
    Ok(stdout)
}
