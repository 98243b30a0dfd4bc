//! What the daemon hands the helper over the policy pipe: everything already resolved, so the
//! helper only applies it.

use super::landlock::Grant;
use super::mounts::{Identities, MountOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    /// None: the file system is not restricted.
    pub fs: Option<FsPlan>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsPlan {
    pub mounts: Vec<MountOp>,
    pub grants: Vec<Grant>,
    /// The identity of every path above (mount paths, grants, masks) and of `Plan::cwd`, as
    /// the daemon resolved them.
    pub identities: Identities,
}

/// A file's identity (device, inode) as the daemon resolved it. The helper opens every path
/// again without following symbolic links and compares: a directory swapped in between the
/// daemon's check and the helper's open fails the launch instead of receiving the grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

impl Identity {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    pub fn of_stat(stat: &nix::sys::stat::FileStat) -> Self {
        Self {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }

    /// The identity of what `path` names now (following symbolic links: the helper's own open
    /// refuses them, so a link seen here only makes the launch fail).
    pub fn stat(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|meta| Self::of(&meta))
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {} inode {}", self.dev, self.ino)
    }
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
