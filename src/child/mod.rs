//! Everything that runs in a process the daemon forks, before or instead of a program: the
//! fork server ([`fork_server`]), the per-process supervisor ([`supervisor`]), the launch and
//! exec of a program ([`launch`]), the sandbox helper that applies a plan ([`sandbox`]), the
//! managed network's listeners ([`bridge`]) and the fs operation a confined helper serves
//! ([`fs_op`]). It runs single-threaded, with no async runtime and none of the daemon's state:
//! what it knows comes in [`crate::ipc`] messages. Nothing in the daemon imports it; `main`
//! enters it through [`main_if_supervisor`] before anything else runs.

pub(crate) mod bridge;
mod fork_server;
pub(crate) mod fs_op;
mod init;
mod launch;
pub(crate) mod sandbox;
mod signals;
mod supervisor;

/// Runs the fork server of plain supervisors and sandbox helpers, and never returns, when this
/// process was started as one (`exec-server __supervise`, `ipc::message::FORK_SERVER_ARG`).
pub fn main_if_supervisor() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(crate::ipc::message::FORK_SERVER_ARG)) {
        return;
    }
    fork_server::main()
}
