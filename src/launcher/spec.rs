//! What a launch runs, in host terms: the program, its stdio, its limits.

use crate::ipc::message::{ChildSetup, RunAs};
use exec_server_protocol::process::TerminalSize;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

/// What to run, resolved to host terms.
#[derive(Debug, Clone)]
pub(crate) struct LaunchSpec {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) arg0: Option<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) tty: bool,
    pub(crate) pipe_stdin: bool,
    /// When set (pipes only), the child's stdin is a duplicate of this descriptor instead of a
    /// pipe or /dev/null: `super::fs_servers` hands its helper one end of a socket pair.
    pub(crate) stdin_fd: Option<Arc<OwnedFd>>,
    pub(crate) size: TerminalSize,
    pub(crate) limits: Limits,
    /// Another user's credentials to run with (plain launches only).
    pub(crate) run_as: Option<RunAs>,
}

/// Resource limits: per process (set by the child before its exec) and per tree (cgroups).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    pub(crate) max_open_files: Option<u64>,
    pub(crate) max_cpu_seconds: Option<u64>,
    pub(crate) max_memory_bytes: Option<u64>,
    pub(crate) max_processes: Option<u64>,
}

/// A terminal's size when the client gives none.
pub(crate) const DEFAULT_SIZE: TerminalSize = TerminalSize { rows: 24, cols: 80 };

impl LaunchSpec {
    /// What the supervisor's child applies to itself.
    pub(crate) fn setup(&self) -> ChildSetup {
        ChildSetup {
            tty: self.tty,
            max_open_files: self.limits.max_open_files,
            max_cpu_seconds: self.limits.max_cpu_seconds,
            run_as: self.run_as.clone(),
        }
    }
}
