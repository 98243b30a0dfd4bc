//! The ProcessService's calls over the daemon's process core: every command is a managed
//! process of one daemon-held session (so it outlives the gRPC stream that started it and is
//! reached by its pid, as the contract addresses it), started and sandboxed like any other.

use super::messages::*;
use crate::process::{Followed, ManagedProcess, OutputFollower, ProcessError};
use crate::server::Daemon;
use crate::session::Session;
use exec_server_protocol::process::{
    EnvInherit, EnvPolicy, OutputStream, ProcessSignal, StartParams, TerminalSize,
};
use exec_server_protocol::PathUri;
use std::sync::Arc;
use tokio::sync::mpsc;
use tonic::Status;

/// Output `Execute` gathers at most (stdout and stderr together): what a default gRPC client
/// accepts in one message. A command that writes more is killed; `Start` streams any amount.
const EXECUTE_OUTPUT_LIMIT: usize = 4 * 1024 * 1024 - 1024;
/// Events queued for a slow `Start` client before the follower waits (and the process with
/// it, once its output retention is full).
const QUEUE: usize = 16;

pub(super) struct Processes {
    pub daemon: Arc<Daemon>,
    pub session: Arc<Session>,
}

pub(super) type Events = mpsc::Receiver<Result<StartResponse, Status>>;

fn status(err: ProcessError) -> Status {
    match &err {
        ProcessError::TooManyProcesses { .. } | ProcessError::StdinFull { .. } => {
            Status::resource_exhausted(err.to_string())
        }
        ProcessError::SessionClosing => Status::unavailable(err.to_string()),
        ProcessError::Unknown(_) => Status::not_found(err.to_string()),
        ProcessError::NoTerminal(_) | ProcessError::Launch { .. } => {
            Status::invalid_argument(err.to_string())
        }
        _ => Status::internal(err.to_string()),
    }
}

impl Processes {
    /// `Start`: launches the command, then streams its pid, its output and its exit.
    pub(super) async fn start(&self, request: StartRequest) -> Result<Events, Status> {
        let process = self.launch(request.config, request.pty, true).await?;
        let (sender, receiver) = mpsc::channel(QUEUE);
        let init = Event::Init(InitEvent {
            process_id: process.pid(),
        });
        let _ = sender.send(Ok(StartResponse { event: Some(init) })).await;
        tokio::spawn(follow(process, sender));
        Ok(receiver)
    }

    /// `Execute`: runs the command to its end, no stdin; its output whole. A call abandoned
    /// by its client (cancelled, its deadline passed) kills the command.
    pub(super) async fn execute(&self, request: ExecuteRequest) -> Result<ExecuteResponse, Status> {
        let process = self.launch(request.config, None, false).await?;
        let kill_if_abandoned = KillOnDrop(process.clone());
        let (sender, mut events) = mpsc::channel(QUEUE);
        tokio::spawn(follow(process, sender));
        let mut response = ExecuteResponse::default();
        while let Some(event) = events.recv().await {
            match event?.event {
                Some(Event::Stdout(data)) => response.stdout.extend_from_slice(&data),
                Some(Event::Stderr(data)) => response.stderr.extend_from_slice(&data),
                Some(Event::Exit(exit)) => response.exit_code = exit.exit_code,
                Some(Event::Init(_)) | None => {}
            }
            if response.stdout.len() + response.stderr.len() > EXECUTE_OUTPUT_LIMIT {
                return Err(Status::resource_exhausted(format!(
                    "the command wrote more than {EXECUTE_OUTPUT_LIMIT} bytes: killed (Start \
                     streams any amount)"
                )));
            }
        }
        drop(kill_if_abandoned);
        Ok(response)
    }

    pub(super) fn write_stdin(&self, request: WriteStdinRequest) -> Result<Empty, Status> {
        let process = self.running(request.process_id)?;
        match request.payload {
            Some(Payload::Input(data)) => {
                // Each write its own id: the contract's input is never repeated.
                let write_id = uuid::Uuid::new_v4().to_string();
                process.write(&write_id, data).map_err(status)?;
            }
            Some(Payload::Eof(())) => process.close_stdin().map_err(status)?,
            None => return Err(Status::invalid_argument("neither input nor eof")),
        }
        Ok(Empty {})
    }

    pub(super) fn send_signal(&self, request: SendSignalRequest) -> Result<Empty, Status> {
        let signal = match Signal::try_from(request.signal) {
            Ok(Signal::Sigint) => ProcessSignal::Interrupt,
            Ok(Signal::Sigterm) => ProcessSignal::Terminate,
            Ok(Signal::Sigkill) => ProcessSignal::Kill,
            _ => {
                let message = format!(
                    "signal {} is not one of SIGINT, SIGTERM, SIGKILL",
                    request.signal
                );
                return Err(Status::invalid_argument(message));
            }
        };
        let process = self.running(request.process_id)?;
        process.signal(signal).map_err(status)?;
        Ok(Empty {})
    }

    pub(super) fn resize_tty(&self, request: ResizeTtyRequest) -> Result<Empty, Status> {
        let size = terminal_size(request.cols, request.rows)?;
        let process = self.running(request.process_id)?;
        process.resize(size).map_err(status)?;
        Ok(Empty {})
    }

    /// The session's running process whose pid is `pid`.
    fn running(&self, pid: i32) -> Result<Arc<ManagedProcess>, Status> {
        (self.session.processes.processes().into_iter())
            .find(|process| process.pid() == pid && !process.is_exited())
            .ok_or_else(|| Status::not_found(format!("no running process {pid}")))
    }

    async fn launch(
        &self,
        config: Option<ProcessConfig>,
        pty: Option<Pty>,
        pipe_stdin: bool,
    ) -> Result<Arc<ManagedProcess>, Status> {
        let params = self.start_params(config.unwrap_or_default(), pty, pipe_stdin)?;
        // Nobody is attached to the session: its events are never pushed, only read here.
        let (_, on_reply) = tokio::sync::oneshot::channel();
        crate::server::launch(&self.session, &params, None, on_reply)
            .await
            .map_err(status)?;
        (self.session.processes.settled(&params.process_id).await)
            .ok_or_else(|| Status::internal("the process vanished at its start"))
    }

    /// The command's start: argv as given (no shell), in `cwd` (relative to the sandboxd root,
    /// which is the default), the request's variables over the core of the daemon's environment,
    /// in the `--sandboxd-sandbox` profile when there is one.
    fn start_params(
        &self,
        config: ProcessConfig,
        pty: Option<Pty>,
        pipe_stdin: bool,
    ) -> Result<StartParams, Status> {
        if config.command.is_empty() {
            return Err(Status::invalid_argument("config.command is empty"));
        }
        let root = &self.daemon.config.sandboxd_root;
        let cwd = root.join(config.cwd.as_deref().unwrap_or(""));
        if !cwd.is_dir() {
            let message = format!("cwd {} is not a directory", cwd.display());
            return Err(Status::invalid_argument(message));
        }
        let cwd =
            PathUri::from_path(&cwd).map_err(|err| Status::invalid_argument(err.to_string()))?;
        let sandbox = (self.daemon.config.sandboxd_sandbox.as_ref())
            .and_then(|profile| crate::sandbox::profile::anchored(profile, &cwd));
        let size = match pty {
            Some(pty) => Some(terminal_size(pty.cols, pty.rows)?),
            None => None,
        };
        Ok(StartParams {
            process_id: format!("sandboxd:{}", uuid::Uuid::new_v4()),
            argv: config.command,
            cwd,
            env: config.env_vars.into_iter().collect(),
            tty: pty.is_some(),
            pipe_stdin,
            arg0: None,
            // The core of the daemon's environment (PATH, HOME, ...), as codex's default.
            env_policy: Some(EnvPolicy {
                inherit: EnvInherit::Core,
                ignore_default_excludes: false,
                exclude: Vec::new(),
                set: Default::default(),
                include_only: Vec::new(),
            }),
            size,
            sandbox,
            enforce_managed_network: false,
            managed_network: None,
            network_proxy: None,
            trace: None,
            limits: None,
            idempotent: false,
            input_wait_ms: None,
            on_retention_full: None,
            shell_snapshot: None,
        })
    }
}

fn terminal_size(cols: u32, rows: u32) -> Result<TerminalSize, Status> {
    match (u16::try_from(cols), u16::try_from(rows)) {
        (Ok(cols @ 1..), Ok(rows @ 1..)) => Ok(TerminalSize { rows, cols }),
        _ => Err(Status::invalid_argument(format!(
            "a terminal of {cols}x{rows}: each side from 1 to 65535"
        ))),
    }
}

/// Kills the process of an `Execute` whose caller went away.
struct KillOnDrop(Arc<ManagedProcess>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.0.is_exited() {
            let _ = self.0.signal(ProcessSignal::Kill);
        }
    }
}

/// Sends `process`'s output as it comes, then its exit; ends early when the receiver is gone.
/// What is read is marked received, so the log may evict it; while the queue is full the
/// process is held back once its retention is full, never its output lost.
async fn follow(process: Arc<ManagedProcess>, events: mpsc::Sender<Result<StartResponse, Status>>) {
    let mut output = OutputFollower::new(&process, 0);
    loop {
        match output.next(None).await {
            Followed::Chunks(chunks) => {
                for chunk in chunks {
                    let event = match chunk.stream {
                        OutputStream::Stderr => Event::Stderr(chunk.data),
                        _ => Event::Stdout(chunk.data),
                    };
                    if send(&events, event).await.is_err() {
                        return;
                    }
                }
            }
            Followed::Closed(snapshot) => {
                let signal = snapshot.details.signal.map(|signal| 128 + signal);
                let exit_code = snapshot.exit_code.or(signal).unwrap_or(-1);
                let _ = send(&events, Event::Exit(ExitEvent { exit_code })).await;
                return;
            }
            Followed::Idle | Followed::Gone => {
                let gone = Status::internal("the process is gone");
                let _ = events.send(Err(gone)).await;
                return;
            }
        }
    }
}

async fn send(
    events: &mpsc::Sender<Result<StartResponse, Status>>,
    event: Event,
) -> Result<(), mpsc::error::SendError<Result<StartResponse, Status>>> {
    events.send(Ok(StartResponse { event: Some(event) })).await
}
