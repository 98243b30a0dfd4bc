//! A process known by its pidfd: signalled and awaited without ever reaching a pid reused since.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use tokio::io::unix::AsyncFd;

/// A new pidfd of `pid`, for a process that is not on a runtime (it sends it on).
pub(crate) fn open_owned(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes integers only; the descriptor it returns is checked and owned
    // below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the new descriptor is ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

pub(crate) struct Pidfd(AsyncFd<OwnedFd>);

impl Pidfd {
    /// `pid`'s process, which must be one whose pid cannot have been reused yet (a child not
    /// waited for, a parent, or one just checked).
    pub(crate) fn open(pid: i32) -> io::Result<Self> {
        Self::from_fd(open_owned(pid)?)
    }

    pub(crate) fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        let interest = tokio::io::Interest::READABLE;
        // SAFETY: the AsyncFd owns the pidfd for its whole life.
        Ok(Self(unsafe {
            AsyncFd::register_with_interest(fd, interest)
        }?))
    }

    /// Whether it has not exited yet.
    pub(crate) fn is_running(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.0.get_ref().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; no wait. A pidfd is readable once its process exited.
        unsafe { libc::poll(&mut poll, 1, 0) == 0 }
    }

    pub(crate) fn signal(&self, signal: i32) -> io::Result<()> {
        // SAFETY: pidfd_send_signal with a pidfd we own, a null siginfo (allowed) and no flags.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.get_ref().as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Resolves once it has exited.
    pub(crate) async fn exited(&self) {
        let _ = self.0.readable().await;
    }
}
