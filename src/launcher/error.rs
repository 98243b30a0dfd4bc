//! Why a launch failed, a variant per step, and the one mapping of each to the JSON-RPC error a
//! client sees ([`LaunchError::into_rpc`]): for most, -32603 "failed to start `PROGRAM`: ...".

use crate::rpc::RpcError;
use crate::sandbox::plan::{Failure, Stage, MAX_PLAN_BYTES};
use std::io;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    /// The program's pipes or terminal could not be made.
    #[error("{0}")]
    Stdio(io::Error),
    /// The tree's cgroups could not be made.
    #[error("{0}")]
    Cgroup(io::Error),
    /// A socket pair between the daemon and a child could not be made or set up.
    #[error("{0}")]
    Socket(io::Error),
    /// The fork server could not be executed, or did not say it was ready.
    #[error("{0}")]
    ForkServerSpawn(io::Error),
    #[error("the fork server did not start")]
    ForkServerNotReady,
    /// Even a fresh fork server took no order.
    #[error("the fork server is not answering")]
    ForkServerGone,
    /// The calling thread's scheduling could not be read (to give a helper it back).
    #[error("{0}")]
    Scheduling(io::Error),
    #[error("the sandbox helper did not start in time")]
    HelperTimeout,
    /// The helper's first message (its pid and pidfd) was missing or malformed.
    #[error("{0}")]
    Hello(io::Error),
    #[error("moving the helper into the sandbox cgroup: {0}")]
    Admission(io::Error),
    #[error("the sandbox helper exited before it was ready")]
    HelperExited,
    #[error("the sandbox helper did not start")]
    HelperNotReady,
    #[error("the sandbox helper failed to start")]
    HelperFailed,
    /// A sandbox helper or its program's process reported a failure: before the plan (e.g. a
    /// network namespace without the privilege to make one), applying it, or at the exec.
    #[error("{}: {}", .0.stage, .0.message)]
    Sandbox(Failure),
    /// The serialized plan is over what a child reads.
    #[error("sandbox policy is too large ({0} bytes; at most {MAX_PLAN_BYTES})")]
    PlanTooLarge(usize),
    /// Handing the launch (or, for a managed network, the ports) to the child failed.
    #[error("{0}")]
    Send(io::Error),
    /// The program's process answered with something that is not a verdict.
    #[error("{0}")]
    Verdict(serde_json::Error),
    #[error("the supervisor failed before the exec")]
    SupervisorFailed,
    #[error("the supervisor did not start the program in time")]
    Timeout,
    /// The program's process could not execute the program (errno from the exec).
    #[error("{0}")]
    Exec(io::Error),
    #[error("the working directory `{}` does not exist", .0.display())]
    MissingCwd(std::path::PathBuf),
    #[error("the working directory `{}` is not a directory", .0.display())]
    CwdNotDirectory(std::path::PathBuf),
    /// The child's own account of a failure without an errno.
    #[error("{0}")]
    Child(String),
    /// The managed network's relays could not be set up.
    #[error("cannot bridge the managed network: {0}")]
    Bridge(super::bridge::BridgeError),
}

impl LaunchError {
    /// The error a client sees for the launch of `program` that failed with this.
    pub(crate) fn into_rpc(self, program: &str) -> RpcError {
        match self {
            Self::Sandbox(failure) => sandbox_failure(program, failure),
            Self::PlanTooLarge(_) => RpcError::invalid_params(self.to_string()),
            Self::Bridge(_) => RpcError::internal(self.to_string()),
            other => start_failed(program, other),
        }
    }
}

fn start_failed(program: &str, why: impl std::fmt::Display) -> RpcError {
    RpcError::internal(format!("failed to start `{program}`: {why}"))
}

/// A failure a sandbox reported: at the exec, a start error; before it, the intent could not
/// be enforced. Either way `data` says whether the sandbox refused, and at which stage.
fn sandbox_failure(program: &str, failure: Failure) -> RpcError {
    let data = serde_json::json!({
        "sandboxDenied": failure.denied,
        "stage": failure.stage,
    });
    if failure.stage == Stage::Exec {
        let os = failure
            .errno
            .map(|errno| io::Error::from_raw_os_error(errno).to_string())
            .unwrap_or(failure.message);
        start_failed(program, os).with_data(data)
    } else {
        RpcError::invalid_params(format!(
            "sandbox intent cannot be enforced on this executor: {}: {}",
            failure.stage, failure.message
        ))
        .with_data(data)
    }
}
