//! The daemon's ends of a child's stdio as plain descriptors (a successor daemon gets the very
//! same ones back from the supervisor): output moved into its stream's file, input written from
//! a queue.

use super::output::Span;
use super::store::{Entry, Store};
use crate::os::pipe::move_into;
use bytes::Bytes;
use std::fs::File;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

/// Sets O_NONBLOCK, for a descriptor polled by the runtime.
fn nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `fd`, non-blocking, polled by the runtime for `interest`.
fn register(fd: OwnedFd, interest: tokio::io::Interest) -> std::io::Result<AsyncFd<OwnedFd>> {
    nonblocking(&fd)?;
    // SAFETY: an OwnedFd stays open, the same descriptor, for as long as the AsyncFd owns it.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

/// One output stream of a child: a pipe or a terminal's master.
pub(super) struct OutputReader {
    fd: AsyncFd<OwnedFd>,
    pipe: bool,
    /// Where the stream's file ends.
    end: u64,
    /// A terminal's bytes pass through it (a terminal cannot be spliced).
    buffer: Vec<u8>,
}

impl OutputReader {
    pub(super) fn new(fd: OwnedFd, pipe: bool, end: u64) -> std::io::Result<Self> {
        Ok(Self {
            fd: register(fd, tokio::io::Interest::READABLE)?,
            pipe,
            end,
            buffer: Vec::new(),
        })
    }

    /// The next bytes of the stream, moved to the end of `file`; None at its end (a terminal
    /// reports EIO once its last writer closed) or when the file cannot take them. A pipe's
    /// bytes are spliced: they are in the file the moment they leave the pipe, so a daemon
    /// killed at any point loses none.
    pub(super) async fn next(&mut self, file: &File) -> Option<Span> {
        loop {
            let mut guard = self.fd.readable().await.ok()?;
            let moved = move_into(
                self.fd.get_ref(),
                self.pipe,
                file,
                self.end,
                &mut self.buffer,
            );
            match moved {
                Ok(0) => return None,
                Ok(len) => {
                    let span = Span {
                        offset: self.end,
                        len: len as u64,
                    };
                    self.end += len as u64;
                    return Some(span);
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(err) if err.raw_os_error() == Some(libc::EIO) => return None,
                Err(err) => {
                    tracing::warn!("cannot keep a process's output: {err}");
                    return None;
                }
            }
        }
    }
}

/// What the stdin writer is handed: a write (with its id, journaled before it is written) or
/// a terminal's end-of-file character.
pub(super) type Input = (Option<String>, Bytes);

/// Writes what `input` queues to the child's stdin `fd` until the queue or the stdin closes;
/// `queued` counts what is still to write, `failed` says the stdin broke.
pub(super) fn spawn_writer(
    fd: OwnedFd,
    mut input: mpsc::UnboundedReceiver<Input>,
    store: Arc<Store>,
    queued: Arc<AtomicUsize>,
    failed: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        let fd = match register(fd, tokio::io::Interest::WRITABLE) {
            Ok(fd) => fd,
            Err(_) => return failed.store(true, Ordering::Relaxed),
        };
        while let Some((id, data)) = input.recv().await {
            if let Some(id) = id {
                store.journal(&Entry::Wrote(id));
            }
            let written = write_all(&fd, &data).await;
            queued.fetch_sub(data.len(), Ordering::Relaxed);
            if written.is_err() {
                failed.store(true, Ordering::Relaxed);
                break;
            }
        }
        // Dropping the descriptor closes our end: with the supervisor's copy closed too (the
        // `close stdin` order), the child reads EOF.
    });
}

async fn write_all(fd: &AsyncFd<OwnedFd>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut guard = fd.writable().await?;
        match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(Into::into)) {
            Ok(Ok(written)) => data = &data[written..],
            Ok(Err(err)) => return Err(err),
            Err(_would_block) => {}
        }
    }
    Ok(())
}
