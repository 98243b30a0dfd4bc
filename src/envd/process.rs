//! `process.Process`: envd's commands, as processes of the listener's session. A process's
//! envd identity lives in its id (`envd:UUID[:TAG]`), so it survives a restart with the
//! process; its pid is the program's OS pid.

use super::connect::{timeout, Code, ConnectError, Requests, StreamSender};
use super::messages::*;
use super::users::Account;
use super::Envd;
use crate::process::{Followed, ManagedProcess, OutputFollower, ProcessError};
use axum::http::HeaderMap;
use exec_server_protocol::process::{
    EnvInherit, EnvPolicy, OutputStream, ProcessLimits, ProcessSignal, StartParams, TerminalSize,
};
use exec_server_protocol::PathUri;
use std::sync::Arc;
use std::time::Duration;

/// Keepalive events when the client asks for none (envd's default).
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);
const ID_PREFIX: &str = "envd:";

/// The tag in an envd process id, if it has one.
fn tag_of(id: &str) -> Option<&str> {
    let rest = id.strip_prefix(ID_PREFIX)?;
    rest.split_once(':').map(|(_, tag)| tag)
}

fn process_error(err: ProcessError) -> ConnectError {
    let code = match &err {
        ProcessError::TooManyProcesses { .. } | ProcessError::StdinFull { .. } => {
            Code::ResourceExhausted
        }
        ProcessError::SessionClosing => Code::Unavailable,
        ProcessError::Unknown(_) => Code::NotFound,
        ProcessError::NoTerminal(_) | ProcessError::Launch { .. } => Code::InvalidArgument,
        // docs/envd.md: under --envd-sandbox, commands run as the daemon's user only.
        ProcessError::SandboxedOtherUser => Code::PermissionDenied,
        _ => Code::Internal,
    };
    ConnectError::new(code, err.to_string())
}

impl Envd {
    /// The envd processes of this listener still running (envd forgets a process at its exit),
    /// or those that exited (still retained).
    fn envd_processes(&self, exited: bool) -> Vec<Arc<ManagedProcess>> {
        let mut processes: Vec<_> = (self.session.processes.processes().into_iter())
            .filter(|process| process.id.starts_with(ID_PREFIX) && process.is_exited() == exited)
            .collect();
        processes.sort_by_key(|process| process.pid());
        processes
    }

    fn running(&self) -> Vec<Arc<ManagedProcess>> {
        self.envd_processes(false)
    }

    /// The running process `selector` names.
    fn select(&self, selector: &ProcessSelector) -> Result<Arc<ManagedProcess>, ConnectError> {
        self.select_among(self.running(), selector)
    }

    fn select_among(
        &self,
        processes: Vec<Arc<ManagedProcess>>,
        selector: &ProcessSelector,
    ) -> Result<Arc<ManagedProcess>, ConnectError> {
        let found = match &selector.selector {
            Some(Selector::Pid(pid)) => processes
                .into_iter()
                .find(|process| process.pid() as u32 == *pid)
                .ok_or_else(|| format!("process with pid {pid} not found")),
            Some(Selector::Tag(tag)) => processes
                .into_iter()
                .find(|process| tag_of(&process.id) == Some(tag.as_str()))
                .ok_or_else(|| format!("process with tag {tag} not found")),
            None => {
                return Err(ConnectError::new(
                    Code::InvalidArgument,
                    "no process selected",
                ))
            }
        };
        found.map_err(|message| ConnectError::new(Code::NotFound, message))
    }

    pub(super) fn list(&self) -> ListResponse {
        let processes = (self.running().iter())
            .map(|process| {
                let params = process.params();
                ProcessInfo {
                    config: config_of(params),
                    pid: process.pid() as u32,
                    tag: tag_of(&process.id).map(str::to_owned),
                }
            })
            .collect();
        ListResponse { processes }
    }

    /// `Start`: launches, then streams its start, output and end like `Connect`.
    pub(super) async fn start(
        self: Arc<Self>,
        headers: HeaderMap,
        request: StartRequest,
        events: StreamSender<ProcessEventResponse>,
    ) -> Result<(), ConnectError> {
        let account = self.accounts.of_request(&headers)?;
        let params = self.start_params(&account, &request, timeout(&headers))?;
        let run_as = account.is_other().then(|| crate::ipc::message::RunAs {
            uid: account.uid,
            gid: account.gid,
            groups: account.groups.clone(),
        });
        // Nobody is attached to the session: its events are never pushed, only read here.
        let (_, on_reply) = tokio::sync::oneshot::channel();
        crate::server::launch(&self.session, &params, run_as, on_reply)
            .await
            .map_err(process_error)?;
        let process = self
            .session
            .processes
            .settled(&params.process_id)
            .await
            .ok_or_else(|| {
                ConnectError::new(Code::Internal, "the process vanished at its start")
            })?;
        let pid = process.pid() as u32;
        events.send(Event::Start(StartEvent { pid })).await?;
        follow(&process, 0, &events, keepalive(&headers)).await
    }

    fn start_params(
        &self,
        account: &Account,
        request: &StartRequest,
        timeout: Option<Duration>,
    ) -> Result<StartParams, ConnectError> {
        let config = &request.process;
        let cwd = account.resolve(config.cwd.as_deref().unwrap_or(""));
        if !cwd.exists() {
            return Err(ConnectError::new(
                Code::InvalidArgument,
                format!("cwd '{}' does not exist", cwd.display()),
            ));
        }
        let cwd_uri = PathUri::from_path(&cwd)
            .map_err(|err| ConnectError::new(Code::InvalidArgument, err.to_string()))?;
        let sandbox = self.sandbox(&cwd_uri);
        if sandbox.is_some() && account.is_other() {
            return Err(process_error(ProcessError::SandboxedOtherUser));
        }
        let id = uuid::Uuid::new_v4();
        let process_id = match &request.tag {
            Some(tag) => format!("{ID_PREFIX}{id}:{tag}"),
            None => format!("{ID_PREFIX}{id}"),
        };
        // envd's environment: the daemon's PATH and the user's login names, then the request's.
        let mut login = std::collections::BTreeMap::new();
        if let Ok(path) = std::env::var("PATH") {
            login.insert("PATH".to_owned(), path);
        }
        login.insert("HOME".into(), account.home.display().to_string());
        login.insert("USER".into(), account.name.clone());
        login.insert("LOGNAME".into(), account.name.clone());
        let size = request
            .pty
            .and_then(|pty| pty.size)
            .map(|size| TerminalSize {
                rows: size.rows as u16,
                cols: size.cols as u16,
            });
        Ok(StartParams {
            process_id,
            argv: std::iter::once(config.cmd.clone())
                .chain(config.args.iter().cloned())
                .collect(),
            cwd: cwd_uri,
            env: config.envs.clone(),
            tty: request.pty.is_some(),
            pipe_stdin: request.stdin.unwrap_or(true),
            arg0: None,
            env_policy: Some(EnvPolicy {
                inherit: EnvInherit::None,
                ignore_default_excludes: true,
                exclude: Vec::new(),
                set: login,
                include_only: Vec::new(),
            }),
            size,
            sandbox,
            enforce_managed_network: false,
            managed_network: None,
            network_proxy: None,
            trace: None,
            limits: timeout
                .filter(|t| !t.is_zero())
                .map(|timeout| ProcessLimits {
                    timeout_ms: Some(timeout.as_millis() as i64),
                    ..Default::default()
                }),
            idempotent: false,
            input_wait_ms: None,
            on_retention_full: None,
            shell_snapshot: None,
        })
    }

    /// `Connect`: the process's output from now on, and its end; a process that just exited
    /// (still retained) answers its end at once, as envd's retained exits do.
    pub(super) async fn connect(
        self: Arc<Self>,
        headers: HeaderMap,
        request: Selected,
        events: StreamSender<ProcessEventResponse>,
    ) -> Result<(), ConnectError> {
        let process = (self.select(&request.process)).or_else(|error| {
            self.select_among(self.envd_processes(true), &request.process)
                .map_err(|_| error)
        })?;
        let now = process.read(u64::MAX, Some(0)).next_seq.saturating_sub(1);
        let pid = process.pid() as u32;
        events.send(Event::Start(StartEvent { pid })).await?;
        follow(&process, now, &events, keepalive(&headers)).await
    }

    pub(super) fn send_input(&self, request: SendInputRequest) -> Result<Empty, ConnectError> {
        let process = self.select(&request.process)?;
        if let Some(input) = request.input {
            write_input(&process, input)?;
        }
        Ok(Empty {})
    }

    pub(super) async fn stream_input(
        &self,
        mut requests: Requests<StreamInputRequest>,
    ) -> Result<Empty, ConnectError> {
        use futures::StreamExt as _;
        let mut process = None;
        while let Some(request) = requests.next().await {
            match request?.event {
                Some(StreamInputEvent::Start(selected)) => {
                    process = Some(self.select(&selected.process)?)
                }
                Some(StreamInputEvent::Data(data)) => {
                    let process = process.as_ref().ok_or_else(|| {
                        ConnectError::new(Code::FailedPrecondition, "input before the start event")
                    })?;
                    if let Some(input) = data.input {
                        write_input(process, input)?;
                    }
                }
                Some(StreamInputEvent::Keepalive(_)) | None => {}
            }
        }
        Ok(Empty {})
    }

    pub(super) fn close_stdin(&self, request: Selected) -> Result<Empty, ConnectError> {
        let process = self.select(&request.process)?;
        if process.params().tty {
            return Err(ConnectError::new(
                Code::FailedPrecondition,
                "a PTY's stdin is closed by sending Ctrl+D (0x04)",
            ));
        }
        process.close_stdin().map_err(process_error)?;
        Ok(Empty {})
    }

    pub(super) fn send_signal(&self, request: SendSignalRequest) -> Result<Empty, ConnectError> {
        let process = self.select(&request.process)?;
        let signal = match request.signal() {
            Signal::Sigkill => ProcessSignal::Kill,
            Signal::Sigterm => ProcessSignal::Terminate,
            Signal::Unspecified => {
                return Err(ConnectError::new(
                    Code::Unimplemented,
                    "invalid signal: SIGNAL_UNSPECIFIED",
                ))
            }
        };
        process.signal(signal).map_err(process_error)?;
        Ok(Empty {})
    }

    pub(super) fn update(&self, request: UpdateRequest) -> Result<Empty, ConnectError> {
        let process = self.select(&request.process)?;
        if let Some(size) = request.pty.and_then(|pty| pty.size) {
            let size = TerminalSize {
                rows: size.rows as u16,
                cols: size.cols as u16,
            };
            process.resize(size).map_err(process_error)?;
        }
        Ok(Empty {})
    }
}

/// The `ProcessConfig` a process was started with.
fn config_of(params: &StartParams) -> ProcessConfig {
    let (cmd, args) = params.argv.split_first().expect("argv is never empty");
    ProcessConfig {
        cmd: cmd.clone(),
        args: args.to_vec(),
        envs: params.env.clone(),
        cwd: params
            .cwd
            .to_path()
            .ok()
            .map(|path| path.display().to_string()),
    }
}

fn write_input(process: &ManagedProcess, input: ProcessInput) -> Result<(), ConnectError> {
    let Some(Input::Stdin(data) | Input::Pty(data)) = input.input else {
        return Ok(());
    };
    // Each write its own id: envd's input is never repeated.
    let write_id = uuid::Uuid::new_v4().to_string();
    process.write(&write_id, data).map_err(process_error)?;
    Ok(())
}

/// The client's `Keepalive-Ping-Interval` (seconds), else envd's default.
pub(super) fn keepalive(headers: &HeaderMap) -> Duration {
    (headers.get("keepalive-ping-interval"))
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .filter(|seconds| *seconds > 0)
        .map_or(DEFAULT_KEEPALIVE, Duration::from_secs)
}

/// Streams `process`'s output after `after_seq` as data events, a keepalive after each quiet
/// `keepalive`, and its end once its output closed. The output read is marked received, so
/// the log may evict it; what is not read yet waits for this stream (the process is held back
/// when retention is full), while nobody follows it old output is evicted.
async fn follow(
    process: &Arc<ManagedProcess>,
    after_seq: u64,
    events: &StreamSender<ProcessEventResponse>,
    keepalive: Duration,
) -> Result<(), ConnectError> {
    // Nothing is evicted before this stream sent it: the process waits for a slow client, as
    // envd's does for its subscribers.
    let mut output = OutputFollower::new(process, after_seq);
    let tty = process.params().tty;
    loop {
        match output.next(Some(keepalive)).await {
            Followed::Chunks(chunks) => {
                for chunk in chunks {
                    let data = chunk.data;
                    let output = Some(match chunk.stream {
                        _ if tty => Output::Pty(data),
                        OutputStream::Stderr => Output::Stderr(data),
                        _ => Output::Stdout(data),
                    });
                    events.send(Event::Data(DataEvent { output })).await?;
                }
            }
            Followed::Closed(snapshot) => {
                let end = end_event(snapshot.exit_code.unwrap_or(-1), &snapshot.details);
                return events.send(end).await;
            }
            Followed::Idle => events.send(Event::Keepalive(Empty {})).await?,
            Followed::Gone => {
                return Err(ConnectError::new(Code::Internal, "the process is gone"));
            }
        }
    }
}

/// envd's end event: Go's `ProcessState` words (`exit status N`, `signal: killed`), exit -1
/// for a signal.
fn end_event(code: i32, details: &exec_server_protocol::process::ExitDetails) -> Event {
    let (exit_code, exited, status) = match details.signal {
        Some(signal) => (-1, false, format!("signal: {}", signal_name(signal))),
        None => (code, true, format!("exit status {code}")),
    };
    let error = (exit_code != 0).then(|| status.clone());
    Event::End(EndEvent {
        exit_code,
        exited,
        status,
        error,
    })
}

/// A signal as Go's `syscall.Signal.String` words it.
fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "hangup",
        libc::SIGINT => "interrupt",
        libc::SIGQUIT => "quit",
        libc::SIGILL => "illegal instruction",
        libc::SIGABRT => "aborted",
        libc::SIGBUS => "bus error",
        libc::SIGFPE => "floating point exception",
        libc::SIGKILL => "killed",
        libc::SIGSEGV => "segmentation fault",
        libc::SIGPIPE => "broken pipe",
        libc::SIGALRM => "alarm clock",
        libc::SIGTERM => "terminated",
        libc::SIGUSR1 => "user defined signal 1",
        libc::SIGUSR2 => "user defined signal 2",
        other => return format!("signal {other}"),
    };
    name.to_owned()
}
