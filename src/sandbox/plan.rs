//! What the daemon hands the helper over the policy pipe: everything already resolved, so the
//! helper only applies it.

use super::landlock::Grant;
use super::mounts::MountOp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Looked up on the child's PATH, as an unsandboxed spawn would.
    pub program: String,
    /// The full argv, argv[0] being the `arg0` override when there is one.
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The program's environment. The helper itself starts with an empty one, so nothing the
    /// client sets (LD_PRELOAD, LD_LIBRARY_PATH into a workspace a sandboxed process could have
    /// written) can act on it before the sandbox is in place.
    pub env: BTreeMap<String, String>,
    pub network_restricted: bool,
    /// The program runs on a PTY (its stdio), which becomes its controlling terminal.
    pub tty: bool,
    /// None: the file system is not restricted.
    pub fs: Option<FsPlan>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsPlan {
    pub mounts: Vec<MountOp>,
    pub grants: Vec<Grant>,
}

/// The largest plan the daemon sends a helper.
pub const MAX_PLAN_BYTES: usize = 1 << 20;

/// A setup failure, as the helper reports it on the control socket (one JSON object, then EOF).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub stage: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// The failure was the sandbox refusing something (exec of a program it cannot read).
    #[serde(default)]
    pub denied: bool,
}

/// The stage at which the program itself could not be executed.
pub const EXEC_STAGE: &str = "exec";
