//! Streamed writes: `fs/open` in a write mode, `fs/writeBlock`, and commit on `fs/close`.
//! Large uploads travel as many bounded blocks instead of one giant base64 string.

use super::host::{open, with_path};
use super::sandbox::Confined;
use super::staged::{StagedFile, StagedName};
use super::transfer::WriteTransfer;
use super::FsError;
use exec_server_protocol::fs::{OpenMode, FILE_CHUNK_SIZE};
use std::fs::{File, OpenOptions};
use std::io::{Seek as _, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

pub(super) struct WriteHandle {
    sink: Sink,
    path: PathBuf,
    /// Where a block without `offset` goes: just past the previous block.
    cursor: u64,
}

enum Sink {
    InPlace {
        file: File,
        append: bool,
    },
    Staged {
        staged: StagedFile,
        /// Set when a sandbox helper staged the file: the rename into place must run in that
        /// sandbox too.
        install_in: Option<Confined>,
    },
}

/// What is left of a closed handle: the rename of a staged file, to run in its sandbox.
pub(super) type PendingInstall = (StagedName, Confined);

impl WriteHandle {
    /// `write` and `replace` (and `read`, which callers never pass) create or truncate in
    /// place, `append` creates if missing, `replaceOnClose` stages beside the target.
    pub(super) fn open(path: &Path, mode: OpenMode, follow: bool) -> Result<Self, FsError> {
        let sink = if mode == OpenMode::ReplaceOnClose {
            Sink::Staged {
                staged: StagedFile::create(path, follow)?,
                install_in: None,
            }
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
                return Err(FsError::NotAFile(path.to_owned()));
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
    pub(super) fn write_block(&mut self, offset: Option<u64>, data: &[u8]) -> Result<u64, FsError> {
        // Upstream's bounds: an empty block is a client bug, not a no-op.
        if data.is_empty() || data.len() > FILE_CHUNK_SIZE {
            return Err(FsError::refused(format!(
                "file write block length must be between 1 and {FILE_CHUNK_SIZE}"
            )));
        }
        let path = &self.path;
        let file = match &self.sink {
            Sink::InPlace { file, append: true } => {
                if offset.is_some() {
                    return Err(FsError::refused(
                        "offset is not allowed on a handle opened in append mode",
                    ));
                }
                let mut file = file;
                with_path(file.write_all(data), path)?;
                self.cursor = with_path(file.stream_position(), path)?;
                return Ok(self.cursor);
            }
            _ => self.file(),
        };
        let start = offset.unwrap_or(self.cursor);
        let end = start
            .checked_add(data.len() as u64)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or_else(|| {
                FsError::refused("file write range exceeds the signed 64-bit file offset limit")
            })?;
        with_path(file.write_all_at(data, start), path)?;
        self.cursor = end;
        Ok(end)
    }

    /// Commits a `replace` handle unless `discard`; in-place handles are already written. A
    /// handle a sandbox helper staged is sealed here and its rename returned, for that sandbox.
    pub(super) fn finish(self, discard: bool) -> Result<Option<PendingInstall>, FsError> {
        match self.sink {
            Sink::Staged { staged, install_in } if !discard => match install_in {
                None => staged.commit().map(|()| None),
                Some(confined) => Ok(Some((staged.seal()?, confined))),
            },
            _ => Ok(None),
        }
    }

    /// The open file and how to rebuild the handle around it (in the sandbox helper, which
    /// passes the file to the daemon).
    pub(super) fn into_transfer(self) -> (File, WriteTransfer) {
        let path = self.path;
        match self.sink {
            Sink::InPlace { file, append } => (file, WriteTransfer::InPlace { path, append }),
            Sink::Staged { staged, .. } => {
                let (file, temp, target, mode) = staged.into_parts();
                let transfer = WriteTransfer::Staged {
                    path,
                    temp,
                    target,
                    mode,
                };
                (file, transfer)
            }
        }
    }

    /// Rebuilds a handle the sandbox helper opened `confined`.
    pub(super) fn from_transfer(
        file: File,
        transfer: WriteTransfer,
        confined: Confined,
    ) -> Result<Self, FsError> {
        let (sink, path) = match transfer {
            WriteTransfer::InPlace { path, append } => (Sink::InPlace { file, append }, path),
            WriteTransfer::Staged {
                path,
                temp,
                target,
                mode,
            } => (
                Sink::Staged {
                    staged: StagedFile::from_parts(file, temp, target, mode)?,
                    install_in: Some(confined),
                },
                path,
            ),
        };
        Ok(Self {
            sink,
            path,
            cursor: 0,
        })
    }

    /// The open file (the one a sandbox helper passes on).
    pub(super) fn file(&self) -> &File {
        match &self.sink {
            Sink::InPlace { file, .. } => file,
            Sink::Staged { staged, .. } => staged.file(),
        }
    }
}
