//! The daemon's side of a launch: the pool of the fork server, plain supervisors and sandbox
//! helpers started ahead of need ([`pool`]); what it runs ([`spec`]), the program's stdio and the
//! launch itself ([`spawn`]); a sandboxed launch ([`sandboxed`]) and its managed network ([`bridge`]);
//! the handle on a running tree, its reports and orders ([`tree`]); the tree's cgroups
//! ([`cgroup`]); and the confined helpers that serve sandboxed `fs/*` calls ([`fs_servers`]).
//! What runs on the other side of each socket is `crate::child`; what travels is
//! `crate::ipc::message`. Every failing step is a [`LaunchError`] variant.

pub(crate) mod bridge;
pub(crate) mod cgroup;
mod error;
pub(crate) mod fs_servers;
pub(crate) mod pool;
pub(crate) mod sandboxed;
pub(crate) mod spawn;
pub(crate) mod spec;
pub(crate) mod tree;

pub(crate) use error::LaunchError;

/// How long a launch waits for a helper to start, or to exec the program or report a failure.
pub(crate) const SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The daemon's own image, even if its file was replaced since it started: what the pool
/// starts as the fork server.
const SELF_EXE: &str = "/proc/self/exe";
