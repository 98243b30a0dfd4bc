//! Enforcement of the portable permission intent (`process/start.sandbox`) with the kernel's
//! own mechanisms: mount and network namespaces, Landlock, capabilities, seccomp.
//!
//! The daemon resolves the intent ([`policy`]), protects its own state ([`guard`]) and the
//! workspace metadata ([`protected`]), and turns the result into a [`plan::Plan`]
//! ([`prepare`]). The launch then runs the daemon's own binary as a helper ([`helper`]), which
//! applies the plan to itself and executes the real program, or, for a sandboxed `fs/*` call
//! ([`run_fs_op`]), runs the operation itself. Everything that cannot be enforced fails the
//! request (-32602) before anything runs. [`denial`] classifies exits as sandbox denials; [`peers`]
//! keeps sandboxed processes off the daemon's own listener; [`bridge`] gives a managed network
//! its loopback proxy ports.

mod anchor;
pub(crate) mod bridge;
pub mod denial;
mod error;
mod glob;
pub mod guard;
pub mod helper;
mod landlock;
pub(crate) mod mounts;
mod open;
pub mod peers;
pub mod plan;
mod policy;
pub(crate) mod prepare;
mod view;

/// The daemon's own private paths (its state directory), never in a sandbox's view: every
/// sandbox helper masks them in its mount namespace while it is pre-started, off the launch
/// path, before any plan (and a write root that holds one clones the mask with it), so no
/// sandboxed process reads other processes' output there or reaches a supervisor's socket,
/// whatever its intent. Set once, at start; the fork server is told in its first frame.
/// A bind mount shows the same directory at another path, which a mask by path misses, so
/// each launch also masks every other place its view shows them (`mounts::hide_aliases`).
static HIDDEN: std::sync::OnceLock<Vec<mounts::Hidden>> = std::sync::OnceLock::new();

/// Records the daemon's private paths, for every later sandbox.
pub fn hide_from_sandboxes(paths: Vec<mounts::Hidden>) {
    let _ = HIDDEN.set(paths);
}

pub fn hidden() -> &'static [mounts::Hidden] {
    HIDDEN.get().map_or(&[], Vec::as_slice)
}
mod fs_servers;
pub(crate) mod pool;
pub(crate) mod protected;
mod seccomp;
mod sockets;

use crate::process::spawn::{self, LaunchSpec, Spawned};
use crate::process::tree::{self, Started};
use crate::rpc::RpcError;
use denial::{DenialContext, Scanner};
pub use fs_servers::{run_fs_op, FsOpOutput};
use plan::{Failure, NetworkMode, Stage, MAX_PLAN_BYTES};
pub(crate) use prepare::{enforceable, prepare_fs_op, prepare_start, prepare_walks, Prepared};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// How long a launch waits for a helper to start, or to exec the program or report a failure.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The daemon's own image, even if its file was replaced since it started: what the pool
/// starts as helpers.
const SELF_EXE: &str = "/proc/self/exe";

/// A sandboxed launch in progress.
pub struct Launch {
    /// The serialized plan.
    plan: Vec<u8>,
    network: NetworkMode,
    /// The managed network's ports, bridged once the program runs.
    managed_ports: Option<Vec<u16>>,
    program: String,
    sandboxed: Sandboxed,
}

/// What a running sandboxed process keeps: the classifier's context, its placeholders, and its
/// mount namespace.
#[derive(Debug)]
pub struct Sandboxed {
    pub context: Arc<DenialContext>,
    /// Its protected names, let go when this is dropped.
    _leases: protected::Leases,
    /// Held from the exec on, so that the namespace is torn down (every mount of the copied
    /// view unmounted) when this is dropped, after the exit is reported, rather than by the
    /// exiting process before its parent learns of the exit.
    mount_namespace: Option<OwnedFd>,
    /// The sandbox refused to execute the program: the helper's child wrote why on the
    /// program's stderr and exits 126 in its place.
    refused: bool,
    /// The managed network's relays, closed when this is dropped (after the exit).
    bridge: Option<bridge::Bridge>,
}

impl Sandboxed {
    /// The classifier for this launch's exit, already certain when the exec was refused.
    pub fn scanner(&self) -> Scanner {
        Scanner::new(self.context.clone(), self.refused)
    }
}

impl Prepared {
    /// Takes the program's environment from `spec` into the plan, which a helper receives.
    pub fn launch(mut self, spec: &mut LaunchSpec) -> Result<Launch, RpcError> {
        self.plan.env = std::mem::take(&mut spec.env);
        let plan = serde_json::to_vec(&self.plan).map_err(|e| RpcError::internal(e.to_string()))?;
        if plan.len() > MAX_PLAN_BYTES {
            return Err(RpcError::invalid_params(format!(
                "sandbox policy is too large ({} bytes; at most {MAX_PLAN_BYTES})",
                plan.len()
            )));
        }
        Ok(Launch {
            plan,
            network: self.plan.network_mode(),
            managed_ports: self.plan.managed_network.map(|managed| managed.ports),
            program: self.plan.program,
            sandboxed: Sandboxed {
                context: self.context,
                _leases: self.leases,
                mount_namespace: None,
                refused: false,
                bridge: None,
            },
        })
    }
}

impl Launch {
    /// Starts `spec`'s program in a helper, which supervises its tree: hands it the plan and
    /// the program's stdio, and waits until the program was executed or the helper reports why
    /// it could not. Err: nothing ran (the helper is killed). An exec the sandbox refused is
    /// Ok, with [`Sandboxed::scanner`] certain of the denial: the helper's child exits 126 like
    /// a program that ran, so the process is reported through its exit.
    pub async fn spawn(&mut self, spec: &LaunchSpec) -> Result<Spawned, RpcError> {
        let cannot_start = |err| RpcError::from(spawn::start_error(&self.program, err));
        let (io, stdio) = spawn::detached_stdio(spec).map_err(cannot_start)?;
        let kind = pool::Kind::Sandboxed(self.network);
        let (tree, started, listeners) = match tree::launch(
            kind,
            spec,
            &stdio,
            &self.plan,
            self.managed_ports.as_deref(),
        )
        .await
        {
            Ok(launched) => launched,
            Err(pool::StartError::Io(err)) => return Err(cannot_start(err)),
            Err(pool::StartError::Refused(failure)) => {
                return Err(failure_error(&self.program, failure))
            }
        };
        if let Started::Failed { failure } = started {
            if !(failure.stage == Stage::Exec && failure.denied) {
                return Err(failure_error(&self.program, failure));
            }
            self.sandboxed.refused = true;
        }
        if let Some(ports) = &self.managed_ports {
            // Until now the program's connections wait in the listeners' backlogs.
            let bridge = bridge::Bridge::start(listeners, ports).map_err(|err| {
                RpcError::internal(format!("cannot bridge the managed network: {err}"))
            })?;
            self.sandboxed.bridge = Some(bridge);
        }
        // The supervisor lives in the sandbox's mount namespace as long as the tree does.
        self.sandboxed.mount_namespace =
            std::fs::File::open(format!("/proc/{}/ns/mnt", tree.supervisor_pid))
                .ok()
                .map(OwnedFd::from);
        Ok(Spawned { tree, io })
    }

    /// After [`Launch::spawn`]: what the running process keeps.
    pub fn into_sandboxed(self) -> Sandboxed {
        self.sandboxed
    }
}

/// The error for a launch that a helper reported it could not make.
fn failure_error(program: &str, failure: Failure) -> RpcError {
    let data = serde_json::json!({
        "sandboxDenied": failure.denied,
        "stage": failure.stage,
    });
    if failure.stage == Stage::Exec {
        let os = failure
            .errno
            .map(|errno| std::io::Error::from_raw_os_error(errno).to_string())
            .unwrap_or(failure.message);
        RpcError::from(spawn::start_error(program, os)).with_data(data)
    } else {
        RpcError::invalid_params(format!(
            "sandbox intent cannot be enforced on this executor: {}: {}",
            failure.stage, failure.message
        ))
        .with_data(data)
    }
}

/// For an operation [`run_fs_op`] runs: passes `fd` back to the daemon over stdin (the socket).
pub fn pass_back(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    use crate::channel::{send_fds, PASSED_FILE};
    // SAFETY: stdin is the socket to the daemon for as long as the operation runs.
    let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(libc::STDIN_FILENO) };
    send_fds(socket, &[PASSED_FILE], &[fd.as_raw_fd()]).map(drop)
}
