//! Why a filesystem call failed, and the JSON-RPC error each reason becomes (the reference's
//! codes: an unknown name -32004, a refused request -32600, bad params -32602, the daemon's own
//! failure -32603; an OS error by its kind, see [`RpcError::from_io`]).

use crate::rpc::RpcError;
use exec_server_protocol::PathUri;
use serde_json::Value;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(crate) enum FsError {
    /// The OS refused; `path` is the file it was about (none for a stream's or a watch's own
    /// error), reported in `data.path`.
    #[error("{err}")]
    Io {
        err: io::Error,
        path: Option<PathBuf>,
    },
    #[error("path `{}` is a symbolic link and followSymlinks is false", .0.display())]
    SymlinkRefused(PathBuf),
    #[error("path `{}` is not a file", .0.display())]
    NotAFile(PathBuf),
    #[error("unknown file handle `{0}`")]
    UnknownHandle(String),
    #[error("file handle `{id}` is not open for {what}")]
    NotOpenFor { id: String, what: &'static str },
    #[error("No such file or directory")]
    WatchedPathMissing,
    /// A rename without `overwrite` met an existing destination.
    #[error("destination `{}` already exists and overwrite is false", .path.display())]
    DestinationExists { err: io::Error, path: PathBuf },
    /// A request this method does not carry out as asked.
    #[error("{0}")]
    Refused(String),
    /// Params that are invalid for the method.
    #[error("{0}")]
    BadParams(String),
    /// The daemon's own failure.
    #[error("{0}")]
    Internal(String),
    /// The sandbox helper gave no reply; `denied` when the sandbox killed it.
    #[error("the sandboxed filesystem helper failed (exit code {exit_code}): {stderr}")]
    HelperFailed {
        exit_code: i32,
        stderr: String,
        denied: bool,
    },
    /// Already a JSON-RPC error: params that did not decode, the sandbox's own failure, or the
    /// operation's error as the sandbox helper reported it.
    #[error("{0}")]
    Rpc(RpcError),
}

impl FsError {
    pub(crate) fn io(err: io::Error, path: impl Into<PathBuf>) -> Self {
        Self::Io {
            err,
            path: Some(path.into()),
        }
    }

    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Self::Refused(message.into())
    }

    pub(crate) fn bad_params(message: impl Into<String>) -> Self {
        Self::BadParams(message.into())
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::Internal(message.into())
    }
}

impl From<RpcError> for FsError {
    fn from(err: RpcError) -> Self {
        Self::Rpc(err)
    }
}

impl From<FsError> for RpcError {
    fn from(err: FsError) -> Self {
        let message = err.to_string();
        match err {
            FsError::Io { err, path } => io_error(&err, path.as_deref()),
            FsError::DestinationExists { err, path } => {
                let data = io_error(&err, Some(&path)).data.unwrap_or_default();
                RpcError::invalid_request(message).with_data(data)
            }
            FsError::SymlinkRefused(_)
            | FsError::NotAFile(_)
            | FsError::NotOpenFor { .. }
            | FsError::Refused(_) => RpcError::invalid_request(message),
            FsError::UnknownHandle(_) | FsError::WatchedPathMissing => RpcError::not_found(message),
            FsError::BadParams(_) => RpcError::invalid_params(message),
            FsError::Internal(_) => RpcError::internal(message),
            FsError::HelperFailed { denied, .. } => {
                let mut error = RpcError::internal(message);
                if denied {
                    super::sandbox::mark_denied(&mut error);
                }
                error
            }
            FsError::Rpc(error) => error,
        }
    }
}

/// An fs failure as a front end words it in its own protocol (envd's Connect codes, the
/// runtime API's statuses): whether the sandbox refused it, the OS error number, the text.
pub(crate) struct Failure {
    pub(crate) sandbox_denied: bool,
    pub(crate) errno: Option<i32>,
    pub(crate) message: String,
}

impl From<FsError> for Failure {
    fn from(error: FsError) -> Self {
        let error = RpcError::from(error);
        let data = error.data.as_ref();
        let field = |name: &str| data.and_then(|data| data.get(name));
        Self {
            sandbox_denied: field("sandboxDenied").and_then(Value::as_bool) == Some(true),
            errno: (field("errno").and_then(Value::as_i64))
                .and_then(|errno| i32::try_from(errno).ok()),
            message: error.message,
        }
    }
}

/// The OS text, coded by kind; `data` has kind, errno and the path.
fn io_error(err: &io::Error, path: Option<&Path>) -> RpcError {
    let mut error = RpcError::from_io(err);
    let uri = path.and_then(|path| PathUri::from_path(path).ok());
    if let (Some(Value::Object(data)), Some(uri)) = (&mut error.data, uri) {
        data.insert("path".into(), Value::String(uri.to_string()));
    }
    error
}
