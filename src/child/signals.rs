//! The signal state of forked children: what a supervisor shields itself from, SIGCHLD as a
//! signalfd, and polling.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

/// Takes every signal this process does not use (a stray `pkill -HUP -f exec-server`, meant
/// for the daemon, must not end a supervisor and leave its tree untracked): a handler that does
/// nothing, with SA_RESTART. Handled, not ignored nor blocked: the kernel resets handlers to
/// the default at the program's exec, while an ignored disposition or a mask would be
/// inherited (std's `posix_spawn` resets neither). SIGCHLD stays the signalfd's; SIGKILL and
/// SIGSTOP cannot be caught; the fault signals keep Rust's handling (a real fault must not
/// return to its instruction forever). glibc refuses handlers for its own 32 and 33, which are
/// ignored instead and given back their default before the exec ([`internal_signals`]).
pub(super) fn shield_from_signals() {
    const KEPT: &[libc::c_int] = &[
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGCHLD,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (it does nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        for signal in 1..=libc::SIGRTMAX() {
            if !KEPT.contains(&signal) {
                // Fails (EINVAL) for glibc's own signals only.
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
    internal_signals(libc::SIG_IGN);
}

/// Sets the disposition of glibc's signals 32 and 33 through the kernel's call, which glibc's
/// `sigaction` refuses for them. Only SIG_IGN and SIG_DFL: no handler code to return through.
pub(super) fn internal_signals(disposition: libc::sighandler_t) {
    // The kernel's struct sigaction: with nothing but the disposition set, the fields after it
    // (flags, restorer where the architecture has one, mask) are all zero in either layout.
    let action: [u64; 4] = [disposition as u64, 0, 0, 0];
    for signal in [32, 33] {
        // SAFETY: a valid kernel sigaction and an 8-byte signal set size; no old action wanted.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                action.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
    }
}

/// SIGCHLD blocked and readable as a signalfd (the child unblocks it before its exec).
pub(super) fn block_sigchld() -> OwnedFd {
    let set = sigchld_mask(libc::SIG_BLOCK);
    // SAFETY: the signal set is a live, initialized one; the descriptor signalfd returns is
    // checked before it is owned.
    unsafe {
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            std::process::exit(125);
        }
        OwnedFd::from_raw_fd(fd)
    }
}

/// Blocks or unblocks (`how`) SIGCHLD; returns the set of it.
pub(super) fn sigchld_mask(how: libc::c_int) -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid value, emptied before use; the pointers are to
    // that live local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(how, &set, std::ptr::null_mut());
        set
    }
}

/// A pollfd waiting for `fd` to be readable (a negative `fd` is skipped).
pub(super) fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Empties a non-blocking signalfd.
pub(super) fn drain(signals: &OwnedFd) {
    let mut info = [0u8; 128];
    // SAFETY: reads whole siginfo records into a buffer of the right size.
    while unsafe { libc::read(signals.as_raw_fd(), info.as_mut_ptr().cast(), 128) } > 0 {}
}

pub(super) fn own_pid() -> i32 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { libc::getpid() }
}
