//! Processes: start one with a [`Command`], then control it through its [`ProcessHandle`] and
//! consume its events from the [`Process`].

use crate::{Client, Error, ProcessEvent};
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::methods::{self, Method as _, Retry};
use exec_server_protocol::process::{
    EnvPolicy, OnRetentionFull, ProcessIdParams, ProcessSignal, ReadParams, ReadResult,
    ResizeParams, SandboxType, SignalParams, StartParams, StartResult, TerminalSize, WriteParams,
    WriteStatus,
};
use exec_server_protocol::PathUri;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// What to start: `process/start` params with defaults (a fresh UUID as process id, no env).
#[derive(Clone, Debug)]
pub struct Command {
    params: StartParams,
}

impl Command {
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(argv: I) -> Self {
        Self {
            params: StartParams {
                process_id: uuid::Uuid::new_v4().to_string(),
                argv: argv.into_iter().map(Into::into).collect(),
                cwd: PathUri::parse("file:///").expect("the root is a valid URI"),
                env: BTreeMap::new(),
                tty: false,
                pipe_stdin: false,
                arg0: None,
                env_policy: None,
                size: None,
                sandbox: None,
                enforce_managed_network: false,
                managed_network: None,
                network_proxy: None,
                trace: None,
                limits: None,
                // Makes a start safe to repeat after a reconnect (see [`start`]).
                idempotent: true,
                input_wait_ms: None,
                on_retention_full: None,
                shell_snapshot: None,
            },
        }
    }

    /// The working directory: an absolute path or a `file:` URI, on the daemon's host.
    pub fn cwd(mut self, dir: &str) -> Result<Self, Error> {
        self.params.cwd = path_uri(dir)?;
        Ok(self)
    }

    pub fn process_id(mut self, id: impl Into<String>) -> Self {
        self.params.process_id = id.into();
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.params.env.insert(key.into(), value.into());
        self
    }

    /// Build the environment from the daemon's own (see `envPolicy`), then apply [`Self::env`].
    pub fn env_policy(mut self, policy: EnvPolicy) -> Self {
        self.params.env_policy = Some(policy);
        self
    }

    /// Run on a terminal of this size.
    pub fn tty(mut self, size: TerminalSize) -> Self {
        self.params.tty = true;
        self.params.size = Some(size);
        self
    }

    /// Keep stdin open for [`ProcessHandle::write`].
    pub fn stdin(mut self) -> Self {
        self.params.pipe_stdin = true;
        self
    }

    /// The quiet period before [`ProcessEvent::InputWait`] (default 2 s; zero: never).
    pub fn input_wait(mut self, quiet: Duration) -> Self {
        self.params.input_wait_ms = Some(quiet.as_millis().min(i64::MAX as u128) as i64);
        self
    }

    /// Hold the program back (it blocks on write) rather than evict output nobody received
    /// yet, even while disconnected: `onRetentionFull: "pause"` (daemons advertising
    /// `retentionPause`; others ignore it).
    pub fn pause_when_retention_full(mut self) -> Self {
        self.params.on_retention_full = Some(OnRetentionFull::Pause);
        self
    }

    /// Full control over the wire params.
    pub fn params_mut(&mut self) -> &mut StartParams {
        &mut self.params
    }
}

/// Parses a daemon-side path given as an absolute path or a `file:` URI.
pub fn path_uri(text: &str) -> Result<PathUri, Error> {
    let parsed = if text.starts_with("file:") {
        PathUri::parse(text)
    } else {
        PathUri::from_path(std::path::Path::new(text))
    };
    parsed.map_err(|err| Error::Invalid(format!("bad remote path `{text}`: {err}")))
}

/// Controls one process; cheap to clone, usable while another task consumes events.
#[derive(Clone, Debug)]
pub struct ProcessHandle {
    client: Client,
    id: String,
}

/// A started process: its handle plus its event stream.
#[derive(Debug)]
pub struct Process {
    handle: ProcessHandle,
    events: mpsc::UnboundedReceiver<ProcessEvent>,
    sandbox_type: SandboxType,
}

/// A start is `idempotent`, so the client repeats it after a reconnect like any call that is
/// safe to repeat: a start whose reply was lost yields the process it started, never a second
/// one. (A daemon without `processStartIdempotent` ignores the flag: there a repeat whose lost
/// attempt succeeded fails with "already exists".)
pub(crate) async fn start(client: Client, command: Command) -> Result<Process, Error> {
    let id = command.params.process_id.clone();
    let events = client.router().register(&id).ok_or_else(|| {
        Error::Invalid(format!("process {id} was already started by this client"))
    })?;
    let retry = match command.params.idempotent {
        true => Retry::Safe,
        false => Retry::Never,
    };
    let result = client
        .request::<_, StartResult>(methods::ProcessStart::NAME, &command.params, retry)
        .await;
    match result {
        Ok(result) => {
            if client.router().started(&id) {
                let client = client.clone();
                let id = id.clone();
                tokio::spawn(async move { crate::catch_up(&client, &id).await });
            }
            Ok(Process {
                handle: ProcessHandle { client, id },
                events,
                sandbox_type: result.sandbox_type,
            })
        }
        Err(err) => {
            client.router().unregister(&id);
            Err(err)
        }
    }
}

/// Follows a process of the session that this client did not start (one started before a
/// detach, by an earlier client of the session): its events from `after_seq + 1` on, replayed
/// from what the daemon retained, then as they come.
pub(crate) fn attach(
    client: Client,
    id: &str,
    after_seq: u64,
    sandbox_type: SandboxType,
) -> Result<Process, Error> {
    let events = client
        .router()
        .register_after(id, after_seq)
        .ok_or_else(|| {
            Error::Invalid(format!("process {id} is already followed by this client"))
        })?;
    client.router().request_catch_up(id);
    Ok(Process {
        handle: handle(client, id),
        events,
        sandbox_type,
    })
}

pub(crate) fn handle(client: Client, id: &str) -> ProcessHandle {
    ProcessHandle {
        client,
        id: id.to_owned(),
    }
}

impl Process {
    pub fn id(&self) -> &str {
        &self.handle.id
    }

    pub fn handle(&self) -> ProcessHandle {
        self.handle.clone()
    }

    pub fn sandbox_type(&self) -> SandboxType {
        self.sandbox_type
    }

    /// The next event, or None after the last one ([`ProcessEvent::is_final`]).
    pub async fn next_event(&mut self) -> Option<ProcessEvent> {
        self.events.recv().await
    }

    /// Consumes events until the last one; returns stdout+stderr+pty bytes, the exit code
    /// and the gaps or failure seen on the way.
    pub async fn collect(&mut self) -> Collected {
        let mut collected = Collected::default();
        while let Some(event) = self.next_event().await {
            match event {
                ProcessEvent::Output { data, .. } => collected.output.extend_from_slice(&data),
                ProcessEvent::Exited { exit_code, .. } => collected.exit_code = Some(exit_code),
                ProcessEvent::Closed { .. } | ProcessEvent::InputWait { .. } => {}
                ProcessEvent::Gap { from_seq, to_seq } => collected.gaps.push((from_seq, to_seq)),
                ProcessEvent::Failed { message } => collected.failure = Some(message),
            }
        }
        collected
    }
}

#[derive(Debug, Default)]
pub struct Collected {
    pub output: Vec<u8>,
    pub exit_code: Option<i32>,
    pub gaps: Vec<(u64, u64)>,
    pub failure: Option<String>,
}

impl std::ops::Deref for Process {
    type Target = ProcessHandle;

    fn deref(&self) -> &ProcessHandle {
        &self.handle
    }
}

/// How long a write waits out "stdin queue is full" before giving up.
const FULL_QUEUE_PATIENCE: Duration = Duration::from_secs(60);

impl ProcessHandle {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Queues `data` on the process's stdin. The `writeId` stays the same across retries (a
    /// reconnect, a full stdin queue), so the bytes land exactly once.
    pub async fn write(&self, data: &[u8]) -> Result<WriteStatus, Error> {
        let params = WriteParams {
            process_id: self.id.clone(),
            chunk: Base64Bytes(data.to_vec()),
            write_id: uuid::Uuid::new_v4().to_string(),
        };
        let deadline = tokio::time::Instant::now() + FULL_QUEUE_PATIENCE;
        let mut pause = Duration::from_millis(1);
        loop {
            let outcome = self.client.send::<methods::ProcessWrite>(&params).await;
            match outcome {
                Err(Error::Rpc(error))
                    if is_retryable(&error.data) && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other.map(|result| result.status),
            }
        }
    }

    /// EOF on stdin (an EOF character on a terminal).
    pub async fn close_stdin(&self) -> Result<(), Error> {
        self.client
            .send::<methods::ProcessCloseStdin>(&self.id_params())
            .await
            .map(drop)
    }

    pub async fn signal(&self, signal: ProcessSignal) -> Result<(), Error> {
        let params = SignalParams {
            process_id: self.id.clone(),
            signal,
        };
        self.client
            .send::<methods::ProcessSignal>(&params)
            .await
            .map(drop)
    }

    /// Kills the process group; returns whether the process was still running.
    pub async fn terminate(&self) -> Result<bool, Error> {
        let result = self
            .client
            .send::<methods::ProcessTerminate>(&self.id_params())
            .await?;
        Ok(result.running)
    }

    pub async fn resize(&self, size: TerminalSize) -> Result<(), Error> {
        let params = ResizeParams {
            process_id: self.id.clone(),
            rows: size.rows,
            cols: size.cols,
        };
        self.client
            .send::<methods::ProcessResize>(&params)
            .await
            .map(drop)
    }

    /// A raw `process/read` (pull instead of the pushed events).
    pub async fn read(
        &self,
        after_seq: u64,
        max_bytes: Option<usize>,
        wait: Duration,
    ) -> Result<ReadResult, Error> {
        let params = ReadParams {
            process_id: self.id.clone(),
            after_seq: Some(after_seq),
            max_bytes,
            wait_ms: Some(wait.as_millis() as u64),
        };
        self.client.send::<methods::ProcessRead>(&params).await
    }

    fn id_params(&self) -> ProcessIdParams {
        ProcessIdParams {
            process_id: self.id.clone(),
        }
    }
}

fn is_retryable(data: &Option<Value>) -> bool {
    data.as_ref()
        .and_then(|data| data.get("retryable"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}
