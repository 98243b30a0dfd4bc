//! `fs/*` calls, typed after the wire shapes of the reference (paths are `file:` URIs on the
//! daemon's host), and [`FileReader`], which streams a file with `fs/open` + `fs/readBlock`.

use crate::{Client, Error, Retry};
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::rpc::code;
use exec_server_protocol::PathUri;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const READ_FILE: &str = "fs/readFile";
pub const WRITE_FILE: &str = "fs/writeFile";
pub const OPEN: &str = "fs/open";
pub const READ_BLOCK: &str = "fs/readBlock";
pub const CLOSE: &str = "fs/close";
pub const READ_DIRECTORY: &str = "fs/readDirectory";
pub const GET_METADATA: &str = "fs/getMetadata";

/// The largest `fs/readBlock` length the daemon accepts.
pub const MAX_BLOCK: usize = 1024 * 1024;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PathParams {
    pub path: PathUri,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadFileResult {
    pub data_base64: Base64Bytes,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteFileParams {
    pub path: PathUri,
    pub data_base64: Base64Bytes,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    pub handle_id: String,
    pub path: PathUri,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadBlockParams {
    pub handle_id: String,
    pub offset: u64,
    pub len: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadBlockResult {
    pub chunk: Base64Bytes,
    pub eof: bool,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandleParams {
    pub handle_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryEntry {
    pub file_name: String,
    pub is_directory: bool,
    pub is_file: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadDirectoryResult {
    pub entries: Vec<DirectoryEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub is_directory: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    #[serde(default)]
    pub size: u64,
    pub created_at_ms: i64,
    pub modified_at_ms: i64,
}

impl Client {
    pub async fn read_file(&self, path: &PathUri) -> Result<Vec<u8>, Error> {
        let result: ReadFileResult = self
            .request(READ_FILE, &PathParams { path: path.clone() }, Retry::Safe)
            .await?;
        Ok(result.data_base64.0)
    }

    pub async fn write_file(&self, path: &PathUri, data: Vec<u8>) -> Result<(), Error> {
        let params = WriteFileParams {
            path: path.clone(),
            data_base64: Base64Bytes(data),
        };
        self.request::<_, Value>(WRITE_FILE, &params, Retry::Safe)
            .await
            .map(drop)
    }

    pub async fn read_directory(&self, path: &PathUri) -> Result<Vec<DirectoryEntry>, Error> {
        let result: ReadDirectoryResult = self
            .request(
                READ_DIRECTORY,
                &PathParams { path: path.clone() },
                Retry::Safe,
            )
            .await?;
        Ok(result.entries)
    }

    pub async fn metadata(&self, path: &PathUri) -> Result<Metadata, Error> {
        self.request(
            GET_METADATA,
            &PathParams { path: path.clone() },
            Retry::Safe,
        )
        .await
    }

    /// Opens `path` for block reads.
    pub async fn open(&self, path: &PathUri) -> Result<FileReader, Error> {
        let handle_id = self.open_handle(path).await?;
        Ok(FileReader {
            client: self.clone(),
            path: path.clone(),
            handle: tokio::sync::Mutex::new((handle_id, 0)),
        })
    }

    async fn open_handle(&self, path: &PathUri) -> Result<String, Error> {
        // The daemon caps ids at 32 bytes: a UUID without dashes fits exactly.
        let handle_id = uuid::Uuid::new_v4().simple().to_string();
        let params = OpenParams {
            handle_id: handle_id.clone(),
            path: path.clone(),
        };
        self.request::<_, Value>(OPEN, &params, Retry::Never)
            .await?;
        Ok(handle_id)
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

/// Block reads kept in flight by [`FileReader::read_all`].
const READ_AHEAD: usize = 4;

impl FileReader {
    /// Up to `len` (≤ [`MAX_BLOCK`]) bytes at `offset`, and whether the file ended there.
    pub async fn read_at(&self, offset: u64, len: usize) -> Result<(Vec<u8>, bool), Error> {
        loop {
            let (handle_id, generation) = self.handle.lock().await.clone();
            let params = ReadBlockParams {
                handle_id: handle_id.clone(),
                offset,
                len,
            };
            let outcome: Result<ReadBlockResult, Error> =
                self.client.request(READ_BLOCK, &params, Retry::Never).await;
            match outcome {
                Ok(block) => return Ok((block.chunk.0, block.eof)),
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
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, Error> {
        use futures::stream::{FuturesOrdered, StreamExt as _};
        let mut in_flight = FuturesOrdered::new();
        let mut next_offset = 0u64;
        let mut total = 0u64;
        loop {
            while in_flight.len() < READ_AHEAD {
                in_flight.push_back(self.read_at(next_offset, MAX_BLOCK));
                next_offset += MAX_BLOCK as u64;
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
            *handle = (
                self.client.open_handle(&self.path).await?,
                seen_generation + 1,
            );
        }
        Ok(())
    }

    pub async fn close(self) -> Result<(), Error> {
        let params = HandleParams {
            handle_id: self.handle.into_inner().0,
        };
        self.client
            .request::<_, Value>(CLOSE, &params, Retry::Safe)
            .await
            .map(drop)
    }
}
