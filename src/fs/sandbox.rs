//! The single decision point for `sandbox` intent on filesystem calls, and the daemon's side of
//! sandboxed operations.
//!
//! Every fs method that names a path passes its `sandbox` through [`route`] before it touches
//! the disk. Intent whose file-system policy restricts nothing runs directly in the daemon; any
//! other runs the operation in a sandbox helper, after it confined itself
//! ([`crate::launcher::fs_servers::run_fs_op`], `crate::child::fs_op`), so the kernel enforces the intent on the operation itself:
//! symbolic links are resolved by the confined process, protected names are read-only mounts,
//! masks hide denied areas. Stream opens get the file the helper opened passed back over its
//! socket; watches cannot be confined and are refused.

use super::oneshot::{host_touches, OneShot};
use super::staged::StagedName;
use super::transfer::Transfer;
use super::FsError;
use crate::ipc::message::{
    Access, FsReply, FsRequest, Inspect, OpenBeneath, INSPECT, INSTALL_STAGED, OPEN_BENEATH,
};
use crate::launcher::fs_servers::{run_fs_op, FsOpOutput};
use crate::rpc::RpcError;
use crate::sandbox::denial::DenialContext;
use exec_server_protocol::fs::{OpenMode, OpenParams};
use exec_server_protocol::rpc::method;
use exec_server_protocol::sandbox::{
    FileSystemPermissions, FileSystemSandboxContext, FsPath, PermissionProfile, SpecialKind,
};
use serde_json::Value;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a call runs.
pub(crate) enum Route {
    /// In the daemon: no sandbox, or one whose file-system policy restricts nothing.
    Direct,
    Confined(Confined),
}

impl Route {
    /// The sandbox a call runs in; None when it runs in the daemon.
    pub(crate) fn confined(self) -> Option<Confined> {
        match self {
            Route::Direct => None,
            Route::Confined(confined) => Some(confined),
        }
    }
}

/// A restricting intent, bound to the directory its helper runs in; shared by the handles
/// opened under it.
#[derive(Clone, Debug)]
pub(crate) struct Confined(Arc<Intent>);

#[derive(Debug)]
struct Intent {
    sandbox: FileSystemSandboxContext,
    cwd: PathBuf,
}

/// Direct when the call may run in the daemon: no sandbox, or one whose file-system policy
/// restricts nothing (disabled, external, unrestricted or plain full-disk write). As in the
/// reference's `should_run_in_sandbox` for fs calls, the network setting does not decide: a
/// file operation opens no sockets (a restricted network still applies to the helper).
pub(crate) fn route(sandbox: Option<FileSystemSandboxContext>) -> Result<Route, FsError> {
    let Some(sandbox) = sandbox else {
        return Ok(Route::Direct);
    };
    let restricted = match &sandbox.permissions {
        PermissionProfile::Managed { file_system, .. } => file_system.restricts(),
        _ => false,
    };
    if !restricted {
        return Ok(Route::Direct);
    }
    let cwd = match sandbox.policy_cwd() {
        Some(uri) => uri.to_path().map_err(|err| {
            FsError::bad_params(format!(
                "sandbox cwd URI `{uri}` is not valid on this exec-server host: {err}"
            ))
        })?,
        None if needs_cwd(&sandbox) => {
            return Err(FsError::bad_params(
                "file system sandbox context with dynamic permissions requires cwd",
            ))
        }
        None => std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(|err| {
                FsError::internal(format!("the daemon's working directory is unusable: {err}"))
            })?,
    };
    Ok(Route::Confined(Confined(Arc::new(Intent { sandbox, cwd }))))
}

/// A request has no cwd of its own: entries relative to the workspace need a policy cwd (or
/// explicit workspace roots), as in the reference.
fn needs_cwd(sandbox: &FileSystemSandboxContext) -> bool {
    let PermissionProfile::Managed {
        file_system: FileSystemPermissions::Restricted { entries, .. },
        ..
    } = &sandbox.permissions
    else {
        return false;
    };
    sandbox.policy_workspace_roots().is_empty()
        && entries.iter().any(|entry| match &entry.path {
            FsPath::Special { value } => value.kind == SpecialKind::ProjectRoots,
            FsPath::GlobPattern { pattern } => !Path::new(pattern).is_absolute(),
            FsPath::Path { .. } => false,
        })
}

/// Refuses what cannot be confined: a watch keeps reporting changes long after any check, and
/// the kernel has no sandbox rule for inotify.
pub(crate) fn refuse(route: Route, what: &str) -> Result<(), FsError> {
    match route {
        Route::Direct => Ok(()),
        Route::Confined(_) => Err(FsError::bad_params(format!(
            "{what} cannot be confined by a restricting sandbox on this executor; \
             refusing to run it unconfined"
        ))),
    }
}

impl Confined {
    /// Runs a one-shot operation in the sandbox.
    pub(crate) async fn one_shot<M: OneShot>(&self, params: M::Params) -> Result<Value, FsError> {
        let touches = host_touches::<M>(&params);
        let wire = serde_json::to_value(&params).expect("wire types always serialize");
        let (result, _) = self.call(M::NAME, wire, &touches).await?;
        Ok(result)
    }

    /// Opens a stream in the sandbox; the helper passes the open file back, with what is left
    /// to do at its close.
    pub(crate) async fn open(&self, mut params: OpenParams) -> Result<(File, Transfer), FsError> {
        params.sandbox = None;
        params.handle_id = None;
        let touches: Vec<(PathBuf, bool)> = params
            .path
            .to_path()
            .map(|path| (path, params.mode.unwrap_or_default() != OpenMode::Read))
            .into_iter()
            .collect();
        let params = serde_json::to_value(&params).expect("wire types always serialize");
        let (description, mut output) = self.call(method::FS_OPEN, params, &touches).await?;
        let transfer = serde_json::from_value(description).map_err(|err| {
            FsError::internal(format!(
                "the sandboxed helper described the file badly: {err}"
            ))
        })?;
        let (Some(fd), true) = (output.fds.pop(), output.fds.is_empty()) else {
            return Err(FsError::internal(
                "the sandboxed helper did not pass exactly one open file back",
            ));
        };
        Ok((File::from(fd), transfer))
    }

    /// `inspect.path` opened in the sandbox, passed back: the caller reads what the sandbox
    /// may (its metadata, its listing) from the descriptor, never resolving the path itself.
    pub(crate) async fn inspect(&self, inspect: &Inspect) -> Result<OwnedFd, FsError> {
        let touches = [(inspect.path.clone(), false)];
        let params = serde_json::to_value(inspect).expect("wire types always serialize");
        self.passed_back(INSPECT, params, &touches).await
    }

    /// `request.path` opened beneath `request.base` in the sandbox (`super::beneath`), passed
    /// back.
    pub(crate) async fn open_beneath(&self, request: &OpenBeneath) -> Result<OwnedFd, FsError> {
        let writes = request.access == Access::Create;
        let touches = [(request.base.join(&request.path), writes)];
        let params = serde_json::to_value(request).expect("wire types always serialize");
        self.passed_back(OPEN_BENEATH, params, &touches).await
    }

    /// The one descriptor an operation passes back as its result.
    async fn passed_back(
        &self,
        method: &str,
        params: Value,
        touches: &[(PathBuf, bool)],
    ) -> Result<OwnedFd, FsError> {
        let (_, mut output) = self.call(method, params, touches).await?;
        match (output.fds.pop(), output.fds.is_empty()) {
            (Some(fd), true) => Ok(fd),
            _ => Err(FsError::internal(
                "the sandboxed helper did not pass exactly one descriptor back",
            )),
        }
    }

    /// Renames a sealed staged file into place in the sandbox that staged it.
    pub(crate) async fn install(&self, name: StagedName) -> Result<(), FsError> {
        let (temp, target) = name.disarm();
        let touches = [(temp.clone(), true), (target.clone(), true)];
        let params = serde_json::json!({"temp": temp, "target": target});
        let outcome = self.call(INSTALL_STAGED, params, &touches).await;
        if outcome.is_err() {
            // The helper removes the staged file when it fails to install it; this covers a
            // helper that never ran. The name is random and the unlink follows no final link.
            let _ = std::fs::remove_file(&temp);
        }
        outcome.map(drop)
    }

    /// One helper round trip: the request on stdin, the reply on stdout. A failure keeps the
    /// operation's own error (code, message, data) and adds `data.sandboxDenied` when the
    /// sandbox caused it; a helper that produced no reply is -32603.
    async fn call(
        &self,
        method: &str,
        params: Value,
        touches: &[(PathBuf, bool)],
    ) -> Result<(Value, FsOpOutput), FsError> {
        let request = FsRequest {
            method: method.to_owned(),
            params: Some(params),
        };
        let mut output = run_fs_op(&self.0.sandbox, &self.0.cwd, &request).await?;
        match output.reply.take() {
            Some(FsReply::Ok(result)) => match touches
                .iter()
                .find(|(path, _)| output.context.hidden_by_view(path))
            {
                // What the view hid could not be touched (a forced remove of it "succeeds"):
                // refused as Landlock refuses it.
                Some((path, _)) => {
                    let uri = exec_server_protocol::PathUri::from_path(path).ok();
                    let mut error = landlock_refusal(uri.map(|uri| uri.to_string().into()));
                    mark_denied(&mut error);
                    Err(FsError::Rpc(error))
                }
                None => Ok((result, output)),
            },
            Some(FsReply::Error(error)) => {
                let mut error = RpcError {
                    code: error.code,
                    message: error.message,
                    data: error.data,
                };
                if caused_by_sandbox(&output.context, &error, touches) {
                    as_refusal(&mut error);
                    mark_denied(&mut error);
                }
                Err(FsError::Rpc(error))
            }
            None => Err(FsError::HelperFailed {
                exit_code: output.exit_code,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
                // Killed by seccomp: certainly the sandbox.
                denied: output.exit_code == 128 + libc::SIGSYS,
            }),
        }
    }
}

/// Whether the operation's failure was the sandbox's doing: a denial errno on a path the
/// policy does not grant the access the operation needed (its own paths, resolved on the host
/// as the helper would, so a symbolic link out of the roots counts), or a placeholder's answer
/// for a protected name.
fn caused_by_sandbox(
    context: &DenialContext,
    error: &RpcError,
    touches: &[(PathBuf, bool)],
) -> bool {
    let Some(data) = error.data.as_ref() else {
        return false;
    };
    let Some(errno) = data
        .get("errno")
        .and_then(Value::as_i64)
        .and_then(|errno| i32::try_from(errno).ok())
    else {
        return false;
    };
    let reported = data
        .get("path")
        .and_then(Value::as_str)
        .and_then(|uri| exec_server_protocol::PathUri::parse(uri).ok())
        .and_then(|uri| uri.to_path().ok())
        .map(|path| {
            // The path lies under one of the operation's own: it is read or written as that
            // one is (a file inside a copied tree, the destination of a rename).
            let write = touches
                .iter()
                .filter(|(own, _)| path.starts_with(own))
                .max_by_key(|(own, _)| own.components().count())
                .map_or_else(|| touches.iter().any(|(_, w)| *w), |(_, w)| *w);
            (path, write)
        });
    touches
        .iter()
        .cloned()
        .chain(reported)
        .any(|(path, write)| context.explains_errno(errno, &path, write))
}

/// A path the mount view alone leaves out reads as missing (ENOENT): the client gets the
/// refusal Landlock gives for it instead (EACCES), so an operation fails alike on either
/// backend.
fn as_refusal(error: &mut RpcError) {
    let data = error.data.take().unwrap_or_default();
    if data.get("errno").and_then(Value::as_i64) != Some(libc::ENOENT.into()) {
        error.data = Some(data);
        return;
    }
    *error = landlock_refusal(data.get("path").cloned());
}

/// Landlock's refusal (EACCES) of `path` (its URI), as an fs call reports it.
fn landlock_refusal(path: Option<Value>) -> RpcError {
    let mut error = RpcError::from_io(&std::io::Error::from_raw_os_error(libc::EACCES));
    if let (Some(Value::Object(data)), Some(path)) = (&mut error.data, path) {
        data.insert("path".into(), path);
    }
    error
}

/// Marks `error` as the sandbox's doing (and counts the denial).
pub(super) fn mark_denied(error: &mut RpcError) {
    crate::metrics::get().sandbox_denials.inc();
    let data = error
        .data
        .get_or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(map) = data {
        map.insert("sandboxDenied".into(), Value::Bool(true));
    }
}
