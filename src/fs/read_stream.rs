//! Positional block reads of an open handle: `fs/readBlock`.

use super::FsError;
use crate::rpc::payload::Payload;
use exec_server_protocol::fs::FILE_CHUNK_SIZE;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;

pub(super) fn check_block(offset: u64, len: usize) -> Result<(), FsError> {
    if len == 0 || len > FILE_CHUNK_SIZE {
        return Err(FsError::refused(format!(
            "file read block length must be between 1 and {FILE_CHUNK_SIZE}"
        )));
    }
    // pread takes a signed offset.
    match offset.checked_add(len as u64) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(FsError::refused("file read offset overflowed")),
    }
}

/// Reads up to `len` bytes at `offset` with pread, looping over short reads, into memory not
/// zeroed first (where a binary reply's header then goes in front of them); `eof` when fewer
/// than `len` came back.
pub(super) fn read_block(file: &File, offset: u64, len: usize) -> io::Result<(Payload, bool)> {
    let mut payload = Payload::with_capacity(len);
    let buffer = payload.buffer();
    let start = buffer.len();
    while buffer.len() - start < len {
        let filled = buffer.len() - start;
        let spare = &mut buffer.spare_capacity_mut()[..len - filled];
        // SAFETY: pread writes at most `spare.len()` bytes into that spare capacity, and only
        // the bytes it wrote are then counted as initialized.
        let read = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                (offset + filled as u64) as libc::off_t,
            )
        };
        match read {
            0 => break,
            // SAFETY: the kernel initialized `read` more bytes right after the initialized ones.
            read if read > 0 => unsafe { buffer.set_len(buffer.len() + read as usize) },
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
    let eof = payload.len() < len;
    Ok((payload, eof))
}
