//! `--envd-sandbox` on file operations: with a restricting profile, every envd file operation
//! runs through the same confined route as a sandboxed `fs/*` call (`crate::fs::sandbox`): a
//! sandbox helper confines itself to the profile, then makes the change or opens the file, so
//! the kernel, not a check of ours, decides. Changes (make, move, remove, write) and opened
//! files (download, upload) are the helper's own; Stat, ListDir and watches, whose answers
//! need what the helper's replies do not carry (owners, modes, events), first have the helper
//! read the path (its metadata, the directory's listing) and are refused when it may not.

use super::connect::{Code, ConnectError};
use super::users::Account;
use super::Envd;
use crate::fs::sandbox::{route, Confined, Route};
use crate::fs::{FsError, OneShot};
use crate::rpc::RpcError;
use exec_server_protocol::fs::*;
use exec_server_protocol::methods as m;
use exec_server_protocol::PathUri;
use serde_json::Value;
use std::path::Path;

impl Envd {
    /// The confined route of `account`'s file operations under a restricting `--envd-sandbox`
    /// (anchored at its home, where relative paths start); None when they run in the daemon.
    /// Another account is refused: the helper runs as the daemon's user, as commands do.
    pub(super) fn confined(&self, account: &Account) -> Result<Option<Confined>, ConnectError> {
        let home = uri(&account.home)?;
        let Some(sandbox) = self.sandbox(&home) else {
            return Ok(None);
        };
        if account.is_other() {
            return Err(ConnectError::new(
                Code::PermissionDenied,
                format!(
                    "user '{}': under --envd-sandbox, files are handled as the daemon's user",
                    account.name
                ),
            ));
        }
        match route(Some(sandbox)).map_err(connect_error)? {
            Route::Direct => Ok(None),
            Route::Confined(confined) => Ok(Some(confined)),
        }
    }
}

pub(super) fn uri(path: &Path) -> Result<PathUri, ConnectError> {
    PathUri::from_path(path).map_err(|err| {
        ConnectError::new(
            Code::InvalidArgument,
            format!("invalid path {}: {err}", path.display()),
        )
    })
}

/// Runs `M` in the sandbox.
pub(super) async fn run<M: OneShot>(
    confined: &Confined,
    params: M::Params,
) -> Result<Value, ConnectError> {
    confined.one_shot::<M>(params).await.map_err(connect_error)
}

/// Fails unless the sandbox may read `path`'s metadata.
pub(super) async fn may_stat(confined: &Confined, path: &Path) -> Result<(), ConnectError> {
    let params = GetMetadataParams {
        path: uri(path)?,
        follow_symlinks: Some(false),
        sandbox: None,
    };
    run::<m::FsGetMetadata>(confined, params).await.map(drop)
}

/// Fails unless the sandbox may list the directory `path`.
pub(super) async fn may_list(confined: &Confined, path: &Path) -> Result<(), ConnectError> {
    let params = PathParams {
        path: uri(path)?,
        sandbox: None,
    };
    run::<m::FsReadDirectory>(confined, params).await.map(drop)
}

/// Makes `dir` and its missing parents in the sandbox.
pub(super) async fn make_dirs(confined: &Confined, dir: &Path) -> Result<(), ConnectError> {
    let params = CreateDirectoryParams {
        path: uri(dir)?,
        recursive: Some(true),
        follow_symlinks: None,
        sandbox: None,
    };
    run::<m::FsCreateDirectory>(confined, params)
        .await
        .map(drop)
}

/// Opens `path` in the sandbox, for reading or (created or truncated) writing.
pub(super) async fn open(
    confined: &Confined,
    path: &Path,
    mode: OpenMode,
) -> Result<std::fs::File, ConnectError> {
    let params = OpenParams {
        handle_id: None,
        path: uri(path)?,
        mode: Some(mode),
        follow_symlinks: None,
        sandbox: None,
    };
    let (file, _) = confined.open(params).await.map_err(connect_error)?;
    Ok(file)
}

/// The helper's error as envd words it: a denial (the sandbox's, or the OS refusing access)
/// is `permission_denied`, a missing path `not_found`, the rest `internal`.
pub(super) fn connect_error(error: FsError) -> ConnectError {
    let error = RpcError::from(error);
    let data = error.data.as_ref();
    let flag = |name: &str| data.and_then(|d| d.get(name)).and_then(Value::as_bool);
    let errno = (data.and_then(|d| d.get("errno")).and_then(Value::as_i64))
        .and_then(|errno| i32::try_from(errno).ok());
    let code = match errno {
        _ if flag("sandboxDenied") == Some(true) => Code::PermissionDenied,
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => Code::PermissionDenied,
        Some(libc::ENOENT) => Code::NotFound,
        _ => Code::Internal,
    };
    ConnectError::new(code, error.message)
}
