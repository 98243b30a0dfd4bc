//! Positional reads appended to a buffer, into memory not zeroed first.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;

/// Appends up to `len` bytes of `file` at `offset` to `buffer` with `pread`, looping over short
/// reads and interruptions; returns how many came, fewer than `len` only at the file's end.
pub(crate) fn append_at(
    file: &File,
    offset: u64,
    len: usize,
    buffer: &mut Vec<u8>,
) -> io::Result<usize> {
    buffer.reserve_exact(len);
    let mut done = 0;
    while done < len {
        let spare = &mut buffer.spare_capacity_mut()[..len - done];
        // SAFETY: pread writes at most `spare.len()` bytes into that spare capacity, and only
        // the bytes it wrote are then counted as initialized.
        let read = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                (offset + done as u64) as libc::off_t,
            )
        };
        match read {
            0 => break,
            read if read > 0 => {
                done += read as usize;
                // SAFETY: the kernel initialized `read` more bytes right after the initialized
                // ones.
                unsafe { buffer.set_len(buffer.len() + read as usize) };
            }
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
    Ok(done)
}
