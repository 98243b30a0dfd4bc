//! Network namespaces of restricted launches, recycled: making one (and the kernel's teardown
//! of it) is the largest cost of a sandboxed launch, and an empty restricted namespace (`lo`
//! down, no socket, nothing its processes could change without capabilities they do not have)
//! is the same for every restricted launch. One is never shared by two live launches: it is
//! kept only once its launch's whole tree is gone (the caller drops a [`Recyclable`] then) and
//! its helper has exited, and a helper enters it only after checking it holds no socket
//! (`crate::child::netns`).

use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

/// Namespaces kept at most; more are let go.
const KEPT: usize = 64;

/// How long a drop waits for the helper to exit before letting its namespace go instead.
const HELPER_EXIT_WAIT: Duration = Duration::from_millis(200);

static RECYCLED: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// A kept namespace for the next restricted helper, if any.
pub(crate) fn take() -> Option<OwnedFd> {
    RECYCLED.lock().unwrap().pop()
}

/// A restricted launch's network namespace and the helper that made it. Dropped (on a blocking
/// thread) once the launch's tree is gone, it keeps the namespace for another launch if the
/// helper has exited too.
#[derive(Debug)]
pub(crate) struct Recyclable {
    namespace: Option<OwnedFd>,
    helper: OwnedFd,
}

impl Recyclable {
    /// The namespace of `helper_pid`, a restricted launch's helper; None when it cannot be
    /// opened (it is then let go with its last process, as before recycling).
    pub(crate) fn of(helper_pid: i32) -> Option<Self> {
        let helper = crate::pidfd::open_owned(helper_pid).ok()?;
        let namespace = std::fs::File::open(format!("/proc/{helper_pid}/ns/net")).ok()?;
        // Still running after the namespace was opened: the pid was not reused in between.
        if exited_within(&helper, Duration::ZERO) {
            return None;
        }
        Some(Self {
            namespace: Some(namespace.into()),
            helper,
        })
    }
}

/// Whether the process of `pidfd` exits within `wait` (a pidfd is readable once it has).
fn exited_within(pidfd: &OwnedFd, wait: Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::ZERO);
    poll(
        &mut [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)],
        timeout,
    ) == Ok(1)
}

impl Drop for Recyclable {
    fn drop(&mut self) {
        if !exited_within(&self.helper, HELPER_EXIT_WAIT) {
            return;
        }
        let mut kept = RECYCLED.lock().unwrap();
        if kept.len() < KEPT {
            kept.extend(self.namespace.take());
        }
    }
}
