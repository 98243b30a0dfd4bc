//! Why a `process/*` call failed, and the JSON-RPC error each reason becomes: params the
//! method cannot take -32602, a request the table refuses -32600, the daemon's own failure to
//! start or feed a process -32603.

use crate::rpc::RpcError;
use crate::session::SessionError;
use exec_server_protocol::rpc::code;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    #[error("argv must not be empty")]
    EmptyArgv,
    #[error("cwd URI `{uri}` is not valid on this exec-server host: {why}")]
    BadCwd { uri: String, why: String },
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
    /// A task of the daemon's own (the start, a blocking preparation) failed.
    #[error("{0}")]
    Internal(String),

    #[error(transparent)]
    Session(#[from] SessionError),
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
            | NoTerminal(_) => RpcError::invalid_request(message),
            StartConflict { fields, .. } => RpcError::new(code::START_CONFLICT, message)
                .with_data(serde_json::json!({ "fields": fields })),
            StdinFull { .. } => RpcError::invalid_request(message)
                .with_data(serde_json::json!({ "retryable": true })),
            TooManyProcesses { limit, max, .. } => RpcError::invalid_request(message)
                .with_data(serde_json::json!({ "retryable": true, "limit": limit, "max": max })),
            Launch { program, error } => error.into_rpc(&program),
            StdinFailed | Resize(_) | Internal(_) => RpcError::internal(message),
            Session(err) => err.into(),
            Sandbox(err) => err,
        }
    }
}
