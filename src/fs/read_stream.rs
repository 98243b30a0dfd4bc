//! Positional block reads of an open handle: `fs/readBlock`.

use super::FsError;
use crate::rpc::payload::Payload;
use exec_server_protocol::fs::FILE_CHUNK_SIZE;
use std::fs::File;
use std::io;

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

/// Reads up to `len` bytes at `offset` into memory not zeroed first (where a binary reply's
/// header then goes in front of them); `eof` when fewer than `len` came back.
pub(super) fn read_block(file: &File, offset: u64, len: usize) -> io::Result<(Payload, bool)> {
    let mut payload = Payload::with_capacity(len);
    let read = crate::os::pread::append_at(file, offset, len, payload.buffer())?;
    Ok((payload, read < len))
}
