//! `POST /execute`, the reference runtime's (`python-runtime-main.py`): the command split as
//! `shlex` does and run with no shell in the base directory, as a process of the daemon's own
//! core (so `--runtime-sandbox` applies), its whole tree killed at the timeout.

use super::Runtime;
use crate::process::{Followed, ManagedProcess, OutputFollower};
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use exec_server_protocol::process::{
    EnvInherit, EnvPolicy, ExitReason, OutputStream, ProcessLimits, StartParams,
};
use std::sync::Arc;
use std::time::Duration;

/// Output kept per stream for the answer; the rest is read and dropped (`output_truncated`).
const MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;

#[derive(serde::Deserialize)]
pub(super) struct ExecuteRequest {
    command: String,
    /// The SDK's; the server's own timeout still bounds it.
    #[serde(default)]
    timeout_seconds: Option<f64>,
}

#[derive(serde::Serialize, Default)]
struct ExecuteResponse {
    stdout: String,
    stderr: String,
    exit_code: i32,
    /// Read by the SDK; the reference never sets it.
    timed_out: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    output_truncated: bool,
}

/// The reference's answer to a command it could not run (a parse error, a missing program).
fn failed(why: impl std::fmt::Display) -> Response {
    Json(ExecuteResponse {
        stderr: format!("Failed to execute command: {why}"),
        exit_code: 1,
        ..Default::default()
    })
    .into_response()
}

pub(super) async fn execute(
    State(runtime): State<Arc<Runtime>>,
    request: Result<Json<ExecuteRequest>, JsonRejection>,
) -> Response {
    let Json(request) = match request {
        Ok(request) => request,
        Err(rejection) => return super::message(rejection.status(), &rejection.body_text()),
    };
    let argv = match shlex::split(&request.command) {
        Some(argv) if !argv.is_empty() => argv,
        Some(_) => return failed("empty command"),
        None => return failed("No closing quotation"),
    };
    let requested = (request.timeout_seconds)
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .map(|seconds| Duration::from_secs_f64(seconds.min(1e9)));
    let server = runtime.daemon.config.runtime.exec_timeout;
    let timeout = requested.map_or(server, |requested| requested.min(server));
    let params = match runtime.start_params(argv, timeout) {
        Ok(params) => params,
        Err(why) => return failed(why),
    };
    let session = match runtime.session() {
        Ok(session) => session,
        Err(err) => return failed(err),
    };
    // Nobody is attached to the session: the output is only read here.
    let (_, on_reply) = tokio::sync::oneshot::channel();
    if let Err(err) = crate::server::launch(session, &params, None, on_reply).await {
        return failed(err);
    }
    let Some(process) = session.processes.settled(&params.process_id).await else {
        return failed("the process vanished at its start");
    };
    Json(collect(&process).await).into_response()
}

impl Runtime {
    fn start_params(&self, argv: Vec<String>, timeout: Duration) -> Result<StartParams, String> {
        let cwd = self.base_uri()?;
        let sandbox = self.sandbox(&cwd);
        Ok(StartParams {
            process_id: format!("runtime:{}", uuid::Uuid::new_v4()),
            argv,
            cwd,
            env: Default::default(),
            tty: false,
            pipe_stdin: false,
            arg0: None,
            // The daemon's environment, as the reference's child inherits the server's, less
            // what the default excludes keep from children (tokens, keys).
            env_policy: Some(EnvPolicy {
                inherit: EnvInherit::All,
                ignore_default_excludes: false,
                exclude: Vec::new(),
                set: Default::default(),
                include_only: Vec::new(),
            }),
            size: None,
            sandbox,
            enforce_managed_network: false,
            managed_network: None,
            network_proxy: None,
            trace: None,
            limits: Some(ProcessLimits {
                timeout_ms: Some(timeout.as_millis().min(i64::MAX as u128) as i64),
                ..Default::default()
            }),
            idempotent: false,
            input_wait_ms: None,
            on_retention_full: None,
            shell_snapshot: None,
        })
    }
}

/// Reads `process`'s output to its end, then its exit.
async fn collect(process: &Arc<ManagedProcess>) -> ExecuteResponse {
    let mut output = OutputFollower::new(process, 0);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut answer = ExecuteResponse::default();
    loop {
        match output.next(None).await {
            Followed::Chunks(chunks) => {
                for chunk in chunks {
                    let kept = match chunk.stream {
                        OutputStream::Stderr => &mut stderr,
                        _ => &mut stdout,
                    };
                    let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                    answer.output_truncated |= chunk.data.len() > room;
                    kept.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
                }
            }
            Followed::Closed(snapshot) => {
                // As Python's returncode: minus the signal that killed it.
                answer.exit_code = match snapshot.details.signal {
                    Some(signal) => -signal,
                    None => snapshot.exit_code.unwrap_or(-1),
                };
                answer.timed_out = snapshot.details.reason == Some(ExitReason::Timeout);
                break;
            }
            Followed::Idle | Followed::Gone => {
                answer.exit_code = -1;
                break;
            }
        }
    }
    answer.stdout = String::from_utf8_lossy(&stdout).into_owned();
    answer.stderr = String::from_utf8_lossy(&stderr).into_owned();
    answer
}
