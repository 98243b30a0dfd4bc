//! `fs/*` calls on the protocol types (paths are `file:` URIs on the daemon's host), plus
//! streaming both ways: [`FileReader`] over `fs/open` + `fs/readBlock`, and
//! [`Client::upload`] over `fs/open {mode: replace}` + `fs/writeBlock`.

use crate::connection::Answer;
use crate::{Client, Error, Retry};
use bytes::Bytes;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::fs::FILE_CHUNK_SIZE;
use exec_server_protocol::fs::{ChangedNotification, UnwatchParams, WatchParams};
pub use exec_server_protocol::fs::{
    CloseParams, DirectoryEntry, GetMetadataParams, HandleResult, Metadata, OpenMode, OpenParams,
    PathParams, ReadBlockParams, ReadBlockResult, ReadDirectoryResult, ReadFileParams,
    ReadFileResult, WriteBlockParams, WriteBlockResult, WriteFileParams,
};
use exec_server_protocol::methods::{self, Method};
use exec_server_protocol::rpc::code;
use exec_server_protocol::PathUri;
use futures::stream::{FuturesOrdered, StreamExt as _};
use serde_json::Value;

/// Blocks kept in flight by [`FileReader::read_all`] and [`Client::upload`].
const IN_FLIGHT: usize = 4;

/// How often an upload starts over after its connection (and so its handle) was lost.
const UPLOAD_ATTEMPTS: usize = 3;

fn path_params(path: &PathUri) -> PathParams {
    PathParams {
        path: path.clone(),
        sandbox: None,
    }
}

impl Client {
    pub async fn read_file(&self, path: &PathUri) -> Result<Vec<u8>, Error> {
        let params = ReadFileParams {
            path: path.clone(),
            follow_symlinks: None,
            max_bytes: None,
            sandbox: None,
        };
        let result = self.send::<methods::FsReadFile>(&params).await?;
        Ok(result.data_base64.0)
    }

    /// The whole file in one message; see [`Client::upload`] for large files.
    pub async fn write_file(&self, path: &PathUri, data: &[u8]) -> Result<(), Error> {
        let params = WriteFileParams {
            path: path.clone(),
            data_base64: Base64Bytes::encode(data),
            follow_symlinks: None,
            atomic: false,
            sandbox: None,
        };
        self.send::<methods::FsWriteFile>(&params).await.map(drop)
    }

    pub async fn read_directory(&self, path: &PathUri) -> Result<Vec<DirectoryEntry>, Error> {
        let result = self
            .send::<methods::FsReadDirectory>(&path_params(path))
            .await?;
        Ok(result.entries)
    }

    pub async fn metadata(&self, path: &PathUri) -> Result<Metadata, Error> {
        let params = GetMetadataParams {
            path: path.clone(),
            follow_symlinks: None,
            sandbox: None,
        };
        self.send::<methods::FsGetMetadata>(&params).await
    }

    /// Opens `path` for block reads.
    pub async fn open(&self, path: &PathUri) -> Result<FileReader, Error> {
        let handle_id = self.open_handle(path, OpenMode::Read).await?;
        Ok(FileReader {
            client: self.clone(),
            path: path.clone(),
            handle: tokio::sync::Mutex::new((handle_id, 0)),
        })
    }

    async fn open_handle(&self, path: &PathUri, mode: OpenMode) -> Result<String, Error> {
        // The daemon caps ids at 32 bytes: a UUID without dashes fits exactly.
        let params = OpenParams {
            handle_id: Some(uuid::Uuid::new_v4().simple().to_string()),
            path: path.clone(),
            mode: (mode != OpenMode::Read).then_some(mode),
            follow_symlinks: None,
            sandbox: None,
        };
        let result = self.send::<methods::FsOpen>(&params).await?;
        Ok(result.handle_id)
    }

    /// Writes `size` bytes produced by `read_block(offset, buffer)` to `path`, block by block
    /// into a staged file that replaces the target only once complete. A dropped connection
    /// loses the staged file with its handle, so the upload then starts over.
    pub async fn upload(
        &self,
        path: &PathUri,
        size: u64,
        mut read_block: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> Result<(), Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = self
                .write_blocks(path, OpenMode::ReplaceOnClose, 0..size, &mut read_block)
                .await;
            match outcome {
                Err(Error::Disconnected(_)) if attempt < UPLOAD_ATTEMPTS => continue,
                Err(Error::Rpc(error))
                    if error.code == code::NOT_FOUND && attempt < UPLOAD_ATTEMPTS =>
                {
                    continue
                }
                outcome => return outcome,
            }
        }
    }

    /// Appends the bytes `range` of the source (`read_block(offset, buffer)`) to `path`,
    /// created if missing: resumes a copy that stopped after `range.start` bytes. Unlike
    /// [`Client::upload`], the target grows in place, one block at a time.
    pub async fn append(
        &self,
        path: &PathUri,
        range: std::ops::Range<u64>,
        mut read_block: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> Result<(), Error> {
        self.write_blocks(path, OpenMode::Append, range, &mut read_block)
            .await
    }

    async fn write_blocks(
        &self,
        path: &PathUri,
        mode: OpenMode,
        range: std::ops::Range<u64>,
        read_block: &mut impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> Result<(), Error> {
        let handle_id = self.open_handle(path, mode).await?;
        let appending = mode == OpenMode::Append;
        // Appended blocks land in the order they are handled, so one at a time.
        let window = if appending { 1 } else { IN_FLIGHT };
        let mut in_flight = FuturesOrdered::new();
        let (mut offset, size) = (range.start, range.end);
        while offset < size || !in_flight.is_empty() {
            while offset < size && in_flight.len() < window {
                let len = (size - offset).min(FILE_CHUNK_SIZE as u64) as usize;
                let mut block = vec![0u8; len];
                read_block(offset, &mut block)
                    .map_err(|err| Error::Invalid(format!("cannot read the source: {err}")))?;
                let params = WriteBlockParams {
                    handle_id: handle_id.clone(),
                    offset: (!appending).then_some(offset),
                    chunk: Base64Bytes(block),
                };
                in_flight
                    .push_back(async move { self.send::<methods::FsWriteBlock>(&params).await });
                offset += len as u64;
            }
            if let Some(written) = in_flight.next().await {
                written?;
            }
        }
        let params = CloseParams {
            handle_id,
            discard: false,
        };
        // Not repeated: the handle and its staged file went with a lost connection, and the
        // upload then starts over.
        self.request::<_, Value>(methods::FsClose::NAME, &params, Retry::Never)
            .await
            .map(drop)
    }
}

/// Positional reads of one file. Handles belong to a connection, so after a reconnect the
/// reader opens the path again and goes on (a file replaced in between is then read from the
/// new one).
pub struct FileReader {
    client: Client,
    path: PathUri,
    /// The handle id and how often it was reopened.
    handle: tokio::sync::Mutex<(String, u64)>,
}

impl FileReader {
    /// Up to `len` (≤ [`FILE_CHUNK_SIZE`]) bytes at `offset`, and whether the file ended there.
    pub async fn read_at(&self, offset: u64, len: usize) -> Result<(Bytes, bool), Error> {
        loop {
            let (handle_id, generation) = self.handle.lock().await.clone();
            let params = ReadBlockParams {
                handle_id: handle_id.clone(),
                offset,
                len,
            };
            let outcome = self
                .client
                .raw_request(
                    methods::FsReadBlock::NAME,
                    &params,
                    methods::FsReadBlock::RETRY,
                )
                .await;
            match outcome.and_then(block) {
                Ok(block) => return Ok(block),
                Err(Error::Disconnected(_)) => self.reopen(generation).await?,
                Err(Error::Rpc(error))
                    if error.code == code::NOT_FOUND && error.message.contains(&handle_id) =>
                {
                    self.reopen(generation).await?
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Streams the whole file to `sink`, in order, with a few blocks in flight.
    pub async fn read_all(
        &self,
        sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, Error> {
        self.read_from(0, sink).await
    }

    /// Streams the file from `offset` to its end to `sink`; returns the bytes streamed.
    pub async fn read_from(
        &self,
        offset: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, Error> {
        let mut in_flight = FuturesOrdered::new();
        let mut next_offset = offset;
        let mut total = 0u64;
        loop {
            while in_flight.len() < IN_FLIGHT {
                in_flight.push_back(self.read_at(next_offset, FILE_CHUNK_SIZE));
                next_offset += FILE_CHUNK_SIZE as u64;
            }
            let (data, eof) = in_flight.next().await.expect("reads are in flight")?;
            sink(&data).map_err(|err| Error::Invalid(format!("cannot write: {err}")))?;
            total += data.len() as u64;
            if eof {
                return Ok(total);
            }
        }
    }

    async fn reopen(&self, seen_generation: u64) -> Result<(), Error> {
        let mut handle = self.handle.lock().await;
        // Concurrent reads that lost the same handle reopen it once.
        if handle.1 == seen_generation {
            let handle_id = self.client.open_handle(&self.path, OpenMode::Read).await?;
            *handle = (handle_id, seen_generation + 1);
        }
        Ok(())
    }

    pub async fn close(self) -> Result<(), Error> {
        let params = CloseParams {
            handle_id: self.handle.into_inner().0,
            discard: false,
        };
        self.client
            .send::<methods::FsClose>(&params)
            .await
            .map(drop)
    }
}

/// A block and its `eof` from an `fs/readBlock` reply, whose chunk came raw or in base64.
fn block(answer: Answer) -> Result<(Bytes, bool), Error> {
    #[derive(serde::Deserialize)]
    struct Eof {
        eof: bool,
    }
    let decode_error = |err| crate::protocol_error(methods::FsReadBlock::NAME, err);
    match answer.chunk {
        Some(chunk) => {
            let Eof { eof } = serde_json::from_str(answer.result.get()).map_err(decode_error)?;
            Ok((chunk, eof))
        }
        None => {
            let result: ReadBlockResult =
                serde_json::from_str(answer.result.get()).map_err(decode_error)?;
            Ok((result.chunk.0.into(), result.eof))
        }
    }
}

/// An `fs/watch` of this connection: its `fs/changed` notifications, until dropped or
/// [`Watch::close`]d. A watch belongs to its connection: one lost to a reconnect stays silent.
pub struct Watch {
    client: Client,
    watch_id: String,
    changes: tokio::sync::mpsc::UnboundedReceiver<ChangedNotification>,
}

impl Client {
    /// Watches `path` (a directory with `recursive`, its whole subtree).
    pub async fn watch(&self, path: &PathUri, recursive: bool) -> Result<Watch, Error> {
        let watch_id = uuid::Uuid::new_v4().simple().to_string();
        // Registered first: a change right after the reply must not be lost.
        let changes = self.router().register_watch(&watch_id);
        let params = WatchParams {
            watch_id: Some(watch_id.clone()),
            path: path.clone(),
            recursive,
            sandbox: None,
        };
        match self.send::<methods::FsWatch>(&params).await {
            Ok(_) => Ok(Watch {
                client: self.clone(),
                watch_id,
                changes,
            }),
            Err(err) => {
                self.router().unregister_watch(&watch_id);
                Err(err)
            }
        }
    }
}

impl Watch {
    /// The next batch of changes; None once the client is gone.
    pub async fn next(&mut self) -> Option<ChangedNotification> {
        self.changes.recv().await
    }

    pub async fn close(self) -> Result<(), Error> {
        self.client.router().unregister_watch(&self.watch_id);
        let params = UnwatchParams {
            watch_id: self.watch_id.clone(),
        };
        self.client
            .send::<methods::FsUnwatch>(&params)
            .await
            .map(drop)
    }
}
