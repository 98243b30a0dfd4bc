//! Output pipes: their capacity, and moving what they hold into a file.

use std::fs::File;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::fs::FileExt as _;

/// The capacity asked for the stdout and stderr pipes (Linux default: 64 KiB).
pub(crate) const OUTPUT_PIPE_BYTES: usize = 256 * 1024;

/// Most bytes one move takes: a full pipe.
const MOVE_BYTES: usize = OUTPUT_PIPE_BYTES;

/// Moves what `output` holds (at most [`MOVE_BYTES`]) into `file` at `end`: spliced from a
/// pipe, read into `buffer` and written from a terminal (which cannot be spliced). Ok(0) at
/// the output's end; WouldBlock when it holds nothing; EIO from a terminal whose last writer
/// closed. The daemon's readers and an orphaned supervisor (`crate::child::supervisor`) move output
/// the same way.
pub(crate) fn move_into(
    output: &OwnedFd,
    pipe: bool,
    file: &File,
    end: u64,
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    if !pipe {
        buffer.resize(MOVE_BYTES, 0);
        let read = nix::unistd::read(output, buffer)?;
        file.write_all_at(&buffer[..read], end)?;
        return Ok(read);
    }
    let mut offset = end as libc::loff_t;
    // SAFETY: splice between two descriptors we own, with a valid offset pointer.
    let moved = unsafe {
        libc::splice(
            output.as_raw_fd(),
            std::ptr::null_mut(),
            file.as_raw_fd(),
            &mut offset,
            MOVE_BYTES,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    };
    if moved < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(moved as usize)
    }
}
