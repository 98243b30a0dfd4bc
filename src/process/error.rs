//! Why a `process/*` call failed, and the JSON-RPC error each reason becomes: params the
//! method cannot take -32602, a request the table refuses -32600, the daemon's own failure to
//! start or feed a process -32603. Also why a new process cannot be kept in the state
//! directory ([`KeepError`]) and why a kept one cannot be adopted ([`AdoptError`]), which only
//! the log hears of.

use crate::rpc::RpcError;
use exec_server_protocol::process::OutputStream;
use exec_server_protocol::rpc::code;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    #[error("argv must not be empty")]
    EmptyArgv,
    #[error("cwd URI `{uri}` is not valid on this exec-server host: {source}")]
    BadCwd {
        uri: String,
        source: exec_server_protocol::path_uri::PathUriError,
    },
    #[error("inputWaitMs must be between 0 (off) and {max}, not {value}")]
    InputWaitOutOfRange { max: i64, value: i64 },
    #[error("limits.{name} must be between {min} and {max}, not {value}")]
    LimitOutOfRange {
        name: &'static str,
        min: i64,
        max: i64,
        value: i64,
    },
    #[error(
        "limits.{0} cannot be enforced on this executor: it has no cgroup controller for it \
         (environment/info capabilities.processTreeLimits)"
    )]
    LimitUnsupported(&'static str),
    #[error("writeId must not be empty")]
    EmptyWriteId,
    #[error("rows and cols must be positive")]
    EmptySize,

    #[error("process id {0} is starting")]
    Starting(String),
    #[error("unknown process id {0}")]
    Unknown(String),
    #[error("process {0} already exists")]
    Exists(String),
    #[error(
        "process {id} was already started with other params ({}); an idempotent start must \
         repeat them",
        differing(fields)
    )]
    StartConflict { id: String, fields: Vec<String> },
    #[error("process {0} start was cancelled")]
    StartCancelled(String),
    #[error("the session is closing; no process can start in it")]
    SessionClosing,
    /// A cap on live processes; the client may retry once one of its processes exited.
    #[error(
        "{scope} has {max} live processes, as many as {flag} allows; start more once some \
         have exited (environment/info limits.{limit})"
    )]
    TooManyProcesses {
        scope: &'static str,
        flag: &'static str,
        limit: &'static str,
        max: usize,
    },
    #[error("process {0} has no terminal to resize")]
    NoTerminal(String),
    #[error("a sandboxed command runs as the daemon's user; it cannot run as another")]
    SandboxedOtherUser,
    /// The client may retry the write once the process read some of its stdin.
    #[error("stdin queue is full ({queued} bytes not yet read by the process); retry later")]
    StdinFull { queued: usize },

    /// The launch failed; its one mapping to a JSON-RPC error is the launcher's.
    #[error("failed to start `{program}`: {error}")]
    Launch {
        program: String,
        error: crate::launcher::LaunchError,
    },
    #[error("failed to write to process stdin")]
    StdinFailed,
    #[error("failed to resize terminal: {0}")]
    Resize(std::io::Error),
    /// The start's own task failed (panicked, or cancelled at shutdown).
    #[error("the start failed: {0}")]
    StartTask(tokio::task::JoinError),
    /// The blocking thread preparing a sandbox failed (panicked, or cancelled at shutdown).
    #[error("{0}")]
    PrepareTask(tokio::task::JoinError),
    /// No memory file could be made for an output (`memfd_create`).
    #[error("cannot keep the process's output: {0}")]
    OutputFile(std::io::Error),
    /// A terminal's master could not be duplicated for its reader and its stdin.
    #[error("cannot keep the process's output: {0}")]
    TerminalClone(std::io::Error),

    /// The sandbox's own errors, already JSON-RPC errors.
    #[error(transparent)]
    Sandbox(#[from] RpcError),
}

/// The differing params, or why they are not known: only a digest of a removed process's is
/// kept (`super::forgotten`).
fn differing(fields: &[String]) -> String {
    if fields.is_empty() {
        "not named: the process was removed after its retention".to_owned()
    } else {
        fields.join(", ")
    }
}

impl From<ProcessError> for RpcError {
    fn from(err: ProcessError) -> Self {
        use ProcessError::*;
        let message = err.to_string();
        match err {
            EmptyArgv
            | BadCwd { .. }
            | LimitOutOfRange { .. }
            | InputWaitOutOfRange { .. }
            | LimitUnsupported(_)
            | EmptyWriteId
            | EmptySize => RpcError::invalid_params(message),
            Starting(_) | Unknown(_) | Exists(_) | StartCancelled(_) | SessionClosing
            | NoTerminal(_) | SandboxedOtherUser => RpcError::invalid_request(message),
            StartConflict { fields, .. } => RpcError::new(code::START_CONFLICT, message)
                .with_data(serde_json::json!({ "fields": fields })),
            StdinFull { .. } => RpcError::invalid_request(message)
                .with_data(serde_json::json!({ "retryable": true })),
            TooManyProcesses { limit, max, .. } => RpcError::invalid_request(message)
                .with_data(serde_json::json!({ "retryable": true, "limit": limit, "max": max })),
            Launch { program, error } => error.into_rpc(&program),
            StdinFailed | Resize(_) | StartTask(_) | PrepareTask(_) | OutputFile(_)
            | TerminalClone(_) => RpcError::internal(message),
            Sandbox(err) => err,
        }
    }
}

/// Why a new process cannot be kept in the state directory's `processes` (it then runs on
/// memory files and does not survive a restart of the daemon, which the log says), by step,
/// with the path it concerns beneath `processes`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeepError {
    #[error("cannot make processes/{path}: {source}")]
    MakeSpare {
        path: String,
        source: std::io::Error,
    },
    /// The blocking thread making a spare directory failed (panicked, or cancelled at shutdown).
    #[error("{0}")]
    SpareTask(tokio::task::JoinError),
    #[error("{0}")]
    EncodeMeta(serde_json::Error),
    #[error("cannot listen on its supervisor's socket: {0}")]
    Listen(std::io::Error),
    #[error("cannot write processes/{dir}/meta.json: {source}")]
    WriteMeta { dir: String, source: std::io::Error },
    #[error("cannot rename processes/{from} to processes/{to}: {source}")]
    Rename {
        from: String,
        to: String,
        source: std::io::Error,
    },
}

/// Why a process a predecessor kept cannot be adopted, by step, with the file it concerns
/// (beneath the process's directory in `processes`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdoptError {
    #[error("cannot open its directory: {0}")]
    Dir(std::io::Error),
    #[error("cannot read its meta.json: {0}")]
    ReadMeta(std::io::Error),
    #[error("its meta.json is not a process's: {0}")]
    BadMeta(serde_json::Error),
    #[error("cannot read its journal: {0}")]
    ReadJournal(std::io::Error),
    #[error("its journal is not text: {0}")]
    JournalNotText(std::string::FromUtf8Error),
    #[error("cannot open its {name}: {source}")]
    Open {
        name: String,
        source: std::io::Error,
    },
    #[error("its {0:?} output has no file")]
    NoFile(OutputStream),
    #[error("cannot read the size of its {stream:?} output file: {source}")]
    FileSize {
        stream: OutputStream,
        source: std::io::Error,
    },
    #[error("cannot duplicate its terminal: {0}")]
    TerminalClone(std::io::Error),
}
