//! Streamed writes: `fs/open` in a write mode, `fs/writeBlock`, and commit on `fs/close`.
//! Large uploads travel as many bounded blocks instead of one giant base64 string.

use super::host::{not_a_file, open, with_path};
use super::staged::StagedFile;
use crate::rpc::RpcError;
use exec_server_protocol::fs::{OpenMode, FILE_CHUNK_SIZE};
use std::fs::{File, OpenOptions};
use std::io::{Seek as _, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

pub struct WriteHandle {
    sink: Sink,
    path: PathBuf,
    /// Where a block without `offset` goes: just past the previous block.
    cursor: u64,
}

enum Sink {
    InPlace { file: File, append: bool },
    Staged(StagedFile),
}

impl WriteHandle {
    /// `write` (and `read`, which callers never pass) creates or truncates in place, `append`
    /// creates if missing, `replace` stages beside the target.
    pub fn open(path: &Path, mode: OpenMode, follow: bool) -> Result<Self, RpcError> {
        let sink = if mode == OpenMode::Replace {
            Sink::Staged(StagedFile::create(path, follow)?)
        } else {
            let append = mode == OpenMode::Append;
            let mut options = OpenOptions::new();
            options.create(true);
            if append {
                options.append(true);
            } else {
                options.write(true).truncate(true);
            }
            let file = open(path, &mut options, follow)?;
            if !with_path(file.metadata(), path)?.is_file() {
                return Err(not_a_file(path));
            }
            Sink::InPlace { file, append }
        };
        Ok(Self {
            sink,
            path: path.to_owned(),
            cursor: 0,
        })
    }

    /// Writes one block; returns the offset just past it.
    pub fn write_block(&mut self, offset: Option<u64>, data: &[u8]) -> Result<u64, RpcError> {
        if data.len() > FILE_CHUNK_SIZE {
            return Err(RpcError::invalid_request(format!(
                "file write block must be at most {FILE_CHUNK_SIZE} bytes"
            )));
        }
        let path = &self.path;
        let file = match &self.sink {
            Sink::InPlace { file, append: true } => {
                if offset.is_some() {
                    return Err(RpcError::invalid_request(
                        "offset is not allowed on a handle opened in append mode",
                    ));
                }
                let mut file = file;
                with_path(file.write_all(data), path)?;
                self.cursor = with_path(file.stream_position(), path)?;
                return Ok(self.cursor);
            }
            Sink::InPlace { file, .. } => file,
            Sink::Staged(staged) => staged.file(),
        };
        let start = offset.unwrap_or(self.cursor);
        let end = start
            .checked_add(data.len() as u64)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or_else(|| RpcError::invalid_request("file write offset overflowed"))?;
        with_path(file.write_all_at(data, start), path)?;
        self.cursor = end;
        Ok(end)
    }

    /// Commits a `replace` handle unless `discard`; in-place handles are already written.
    pub fn finish(self, discard: bool) -> Result<(), RpcError> {
        match self.sink {
            Sink::Staged(staged) if !discard => staged.commit(),
            _ => Ok(()),
        }
    }
}
