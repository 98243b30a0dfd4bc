//! Positional block reads of an open handle: `fs/readBlock`.

use super::FsError;
use exec_server_protocol::fs::FILE_CHUNK_SIZE;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;

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

/// Reads up to `len` bytes at `offset` with pread, looping over short reads; `eof` when fewer
/// than `len` came back.
pub(super) fn read_block(file: &File, offset: u64, len: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut buffer = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    buffer.truncate(filled);
    Ok((buffer, filled < len))
}
