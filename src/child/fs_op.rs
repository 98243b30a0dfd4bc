//! The confined side of sandboxed `fs/*` calls (`crate::launcher::fs_servers`): run by the
//! sandbox helper's child itself, in-process, once the calls' sandbox is in place, and reused
//! for every call under the same plan until the daemon closes its socket.
//!
//! Stdin is a Unix socket to the daemon. Each [`crate::ipc::message::FsRequest`] arrives on it
//! as one length-prefixed frame, runs with the daemon's own blocking code
//! ([`crate::fs::confined`]), and gets one [`Answer::FsReply`] back; a file it opens goes ahead
//! of the reply ([`Answer::PassedFile`]).

use crate::ipc::channel::{read_frame, send_all_with_fds, send_fds};
use crate::ipc::message::Answer;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _};

/// Daemon-made requests carry at most a file the daemon accepts for writing, in base64.
const MAX_REQUEST: usize = 1 << 30;

/// Serves the requests on stdin until the daemon closes it, then exits.
pub(crate) fn serve() -> ! {
    // SAFETY: stdin is the socket to the daemon for as long as this process runs, and is
    // never closed here (the process exits instead).
    let socket = std::mem::ManuallyDrop::new(unsafe {
        std::os::unix::net::UnixStream::from_raw_fd(libc::STDIN_FILENO)
    });
    let socket: &std::os::unix::net::UnixStream = &socket;
    loop {
        // EOF: the daemon retired this helper.
        let Ok(request) = read_frame(&mut &*socket, MAX_REQUEST) else {
            std::process::exit(0);
        };
        let reply = Answer::FsReply(crate::fs::confined::run(&request, pass_back));
        if send_all_with_fds(socket, &reply.encode(), &[]).is_err() {
            std::process::exit(1);
        }
    }
}

/// Passes `fd` back to the daemon over stdin (the socket).
fn pass_back(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: stdin is the socket to the daemon for as long as the operation runs.
    let socket = unsafe { BorrowedFd::borrow_raw(libc::STDIN_FILENO) };
    send_fds(socket, &Answer::PassedFile.encode(), &[fd.as_raw_fd()]).map(drop)
}
