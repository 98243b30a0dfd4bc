//! The init of a launch's own PID namespace, where Landlock cannot scope signals (below ABI 6:
//! `crate::sandbox::facilities`): the program's process, forked by the helper as pid 1 of the
//! namespace, forks the program as pid 2 and stays as its init. The sandbox then cannot name,
//! signal or see (its `/proc` is the namespace's) any process but its own.
//!
//! Pid 1 is not the program because the kernel treats it apart: a signal it has no handler
//! for is dropped (`process/signal` TERM would not end a `sleep`), and its exit kills the whole
//! namespace (a background job would not outlive the command, as it does under Landlock). The
//! init keeps both as they are elsewhere: it holds the program's session and group (signals
//! for the group reach the program, the init's handlers drop them), writes the program's wait
//! status to the supervisor when it exits, and reaps everything the namespace leaves it until
//! nothing is left, then exits. The init keeps its capabilities, so the sandbox, which has
//! none, can neither trace it nor read it through `/proc`; it holds no descriptor but the
//! status pipe.

use super::signals::shield_from_signals;
use crate::sandbox::mounts;
use crate::sandbox::plan::{Failure, Stage};
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd};

/// In the program's process (pid 1 of the namespace), before the launch: a mount namespace of
/// its own with a `/proc` of the new PID namespace (the helper keeps the host's, to find its
/// tree).
pub(super) fn prepare() -> Result<(), Failure> {
    // SAFETY: unshare takes flags only; the process is single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } < 0 {
        return Err(Stage::Namespaces.os(std::io::Error::last_os_error()));
    }
    mounts::own_proc().map_err(|err| Stage::Mounts.setup(err))
}

/// Forks the program's process, which returns to apply the plan; this process becomes the
/// namespace's init and never returns (see the module's documentation). `status`: where the
/// program's wait status goes.
pub(super) fn fork_program(status: OwnedFd) -> Result<(), Failure> {
    // SAFETY: this process is single-threaded, so the child may run anything.
    let program = unsafe { libc::fork() };
    if program == 0 {
        // Close-on-exec too, but an fs operation never executes anything.
        drop(status);
        return Ok(());
    }
    if program < 0 {
        return Err(Stage::Supervisor.os(std::io::Error::last_os_error()));
    }
    let kept = status.as_raw_fd() as libc::c_uint;
    // SAFETY: close_range takes integers; nothing of this process uses a descriptor but
    // `status` from here on (the program's stdio must end with the program, the launch socket
    // must tell the daemon of the program's exec).
    unsafe {
        libc::close_range(0, kept - 1, 0);
        libc::close_range(kept + 1, libc::c_uint::MAX, 0);
    }
    shield_from_signals();
    serve(program, std::fs::File::from(status))
}

/// Reaps until the namespace is empty; the program's status goes to `status`.
fn serve(program: i32, mut status: std::fs::File) -> ! {
    let mut reported = false;
    loop {
        let mut wait_status = 0;
        // SAFETY: the out-pointer is a live local.
        let pid = unsafe { libc::waitpid(-1, &mut wait_status, 0) };
        if pid == program && !reported {
            let _ = status.write_all(&wait_status.to_ne_bytes());
            reported = true;
        } else if pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            std::process::exit(0)
        }
    }
}

/// The program's wait status as the init wrote it, once it has (`None`: not yet, or never,
/// when the init was killed first).
pub(super) fn read_status(status: &OwnedFd) -> Option<libc::c_int> {
    let mut bytes = [0u8; 4];
    let read = nix::unistd::read(status, &mut bytes).ok()?;
    (read == bytes.len()).then(|| libc::c_int::from_ne_bytes(bytes))
}
