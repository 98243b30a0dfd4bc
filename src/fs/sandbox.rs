//! The single decision point for `sandbox` intent on filesystem calls.
//!
//! Every fs method that names a path passes its `sandbox` through [`ensure_direct`] before it
//! touches the disk. Until requests can be routed through a sandboxed helper, intent that
//! restricts anything fails closed: such a request never runs unrestricted.

use crate::rpc::RpcError;
use exec_server_protocol::fs::*;
use exec_server_protocol::sandbox::{FileSystemSandboxContext, PermissionProfile};

/// Ok when the call may run directly in the daemon: no sandbox, or one whose file-system
/// policy restricts nothing (disabled, external, unrestricted or plain full-disk write). As in
/// the reference's `should_run_in_sandbox` for fs calls, the network setting does not matter:
/// a file operation opens no sockets.
pub fn ensure_direct(sandbox: Option<&FileSystemSandboxContext>) -> Result<(), RpcError> {
    let restricted = match sandbox.map(|sandbox| &sandbox.permissions) {
        Some(PermissionProfile::Managed { file_system, .. }) => file_system.restricts(),
        _ => false,
    };
    if restricted {
        return Err(RpcError::invalid_params(
            "sandboxed filesystem operations are not supported by this executor yet",
        ));
    }
    Ok(())
}

/// Params that carry a `sandbox`.
pub trait Sandboxed {
    fn sandbox(&self) -> Option<&FileSystemSandboxContext>;
}

macro_rules! sandboxed {
    ($($params:ty),* $(,)?) => {
        $(impl Sandboxed for $params {
            fn sandbox(&self) -> Option<&FileSystemSandboxContext> {
                self.sandbox.as_ref()
            }
        })*
    };
}

sandboxed!(
    ReadFileParams,
    WriteFileParams,
    CreateDirectoryParams,
    GetMetadataParams,
    PathParams,
    RemoveParams,
    CopyParams,
    RenameParams,
    WalkParams,
    OpenParams,
    WatchParams,
);
