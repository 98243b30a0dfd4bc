//! envd's `/files`: `GET` streams a file (gzip when accepted), `POST` writes one
//! (`application/octet-stream`, `path=`) or several (`multipart/form-data`, each `file` part's
//! file name its path), a `Content-Encoding: gzip` body decompressed as it arrives. Paths are
//! resolved for `username=` (relative ones from its home); files are written by the daemon and
//! handed to that user, missing parents made and handed over too, as envd does.

use super::confine;
use super::connect::ConnectError;
use super::filesystem::{chown, ensure_dirs};
use super::users::Account;
use super::Envd;
use crate::fs::sandbox::Confined;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use exec_server_protocol::fs::OpenMode;
use futures::{Stream, StreamExt as _};
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

/// Bytes read or written per step of a streamed file.
const CHUNK: usize = 256 * 1024;
/// Chunks queued between a blocking (de)compressor and the connection.
const QUEUE: usize = 8;

#[derive(serde::Deserialize)]
pub(super) struct FileParams {
    path: Option<String>,
    username: Option<String>,
}

/// An error as envd's `/files` answers it: `{"message", "code"}` with the HTTP status.
#[derive(Debug)]
pub(crate) struct FileError(StatusCode, String);

impl FileError {
    pub(crate) fn bad(message: String) -> Self {
        Self(StatusCode::BAD_REQUEST, message)
    }
}

/// A Connect error at the HTTP status Connect gives its code (a denial is 403).
impl From<ConnectError> for FileError {
    fn from(error: ConnectError) -> Self {
        Self(error.code.status(), error.message)
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0, self.1)
    }
}

impl IntoResponse for FileError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "message": self.1, "code": self.0.as_u16() });
        (self.0, axum::Json(body)).into_response()
    }
}

fn account(envd: &Envd, username: Option<&str>) -> Result<Account, FileError> {
    (envd.accounts.lookup(username))
        .map_err(|error| FileError(StatusCode::UNAUTHORIZED, error.message))
}

fn internal(what: &str, err: impl std::fmt::Display) -> FileError {
    FileError(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {err}"))
}

pub(super) async fn download(
    State(envd): State<Arc<Envd>>,
    Query(params): Query<FileParams>,
    headers: HeaderMap,
) -> Result<Response, FileError> {
    let account = account(&envd, params.username.as_deref())?;
    let path = account.resolve(params.path.as_deref().unwrap_or(""));
    let confined = envd.confined(&account).map_err(FileError::from)?;
    match confine::is_dir(confined.as_ref(), &path).await? {
        None => {
            let message = format!("path '{}' does not exist", path.display());
            return Err(FileError(StatusCode::NOT_FOUND, message));
        }
        Some(true) => {
            let message = format!("path '{}' is a directory", path.display());
            return Err(FileError(StatusCode::BAD_REQUEST, message));
        }
        Some(false) => {}
    }
    let file = match &confined {
        Some(confined) => confine::open(confined, &path, OpenMode::Read).await?,
        None => std::fs::File::open(&path).map_err(|err| internal("error opening file", err))?,
    };
    // The length of the file opened, not of whatever the path names now.
    let length = (file.metadata())
        .map_err(|err| internal("error getting file info", err))?
        .len();
    let gzip = (headers.get(header::ACCEPT_ENCODING))
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .split(',')
                .any(|coding| coding.trim().starts_with("gzip"))
        });
    let reader = move || -> Box<dyn Read> {
        match gzip {
            true => Box::new(flate2::read::GzEncoder::new(
                file,
                flate2::Compression::fast(),
            )),
            false => Box::new(file),
        }
    };
    let mut response = Response::new(Body::from_stream(read_in_background(reader)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    } else {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    Ok(response)
}

/// The bytes of the reader `make` makes as a stream, made and read on a blocking thread (a
/// gzip decoder reads its header as it is made).
fn read_in_background(
    make: impl FnOnce() -> Box<dyn Read> + Send + 'static,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send {
    let (sender, receiver) = mpsc::channel(QUEUE);
    tokio::task::spawn_blocking(move || {
        let mut reader = make();
        loop {
            let mut buffer = vec![0; CHUNK];
            let outcome = match reader.read(&mut buffer) {
                Ok(0) => return,
                Ok(n) => {
                    buffer.truncate(n);
                    Ok(Bytes::from(buffer))
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => Err(err),
            };
            let failed = outcome.is_err();
            if sender.blocking_send(outcome).is_err() || failed {
                return;
            }
        }
    });
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
}

/// A request body, decompressed when it says `Content-Encoding: gzip`.
fn body_of(headers: &HeaderMap, body: Body) -> Result<BodyStream, FileError> {
    let compressed = body
        .into_data_stream()
        .map(|chunk| chunk.map_err(std::io::Error::other));
    match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
    {
        None | Some("identity") | Some("") => Ok(Box::pin(compressed)),
        Some("gzip") => Ok(Box::pin(gunzip(compressed))),
        Some(other) => Err(FileError(
            StatusCode::BAD_REQUEST,
            format!("unsupported Content-Encoding: {other}"),
        )),
    }
}

pub(super) type BodyStream = std::pin::Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// Decompresses `compressed` on a blocking thread as its chunks arrive.
fn gunzip(
    compressed: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send {
    let (sender, receiver) = mpsc::channel::<std::io::Result<Bytes>>(QUEUE);
    tokio::spawn(async move {
        futures::pin_mut!(compressed);
        while let Some(chunk) = compressed.next().await {
            if sender.send(chunk).await.is_err() {
                return;
            }
        }
    });
    let input = ChannelReader {
        receiver,
        current: Bytes::new(),
    };
    read_in_background(move || Box::new(flate2::read::MultiGzDecoder::new(input)))
}

/// The chunks of a channel as a `Read`, for a blocking thread.
struct ChannelReader {
    receiver: mpsc::Receiver<std::io::Result<Bytes>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(chunk) => self.current = chunk?,
                None => return Ok(0),
            }
        }
        let n = buffer.len().min(self.current.len());
        buffer[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

pub(super) async fn upload(
    State(envd): State<Arc<Envd>>,
    Query(params): Query<FileParams>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, FileError> {
    let account = account(&envd, params.username.as_deref())?;
    let confined = envd.confined(&account).map_err(FileError::from)?;
    let confined = confined.as_ref();
    let content_type = (headers.get(header::CONTENT_TYPE))
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = body_of(&headers, body)?;
    let media = content_type.split(';').next().unwrap_or("").trim();
    let written = if media == "application/octet-stream" {
        let path = params.path.as_deref().ok_or_else(|| {
            let message = "path query parameter is required for raw body upload";
            FileError(StatusCode::BAD_REQUEST, message.to_owned())
        })?;
        let path = account.resolve(path);
        write_file(&path, body, &account, confined).await?;
        vec![path]
    } else if media.starts_with("multipart/") {
        let boundary = multer::parse_boundary(&content_type)
            .map_err(|err| FileError(StatusCode::BAD_REQUEST, err.to_string()))?;
        let multipart = multer::Multipart::new(body, boundary);
        let path = params.path.as_deref();
        file_parts(multipart, path, &account, |path, body| {
            let account = &account;
            async move { write_file(&path, body, account, confined).await }
        })
        .await?
    } else {
        return Err(FileError(
            StatusCode::BAD_REQUEST,
            format!(
                "unsupported content type: {content_type}, expected multipart/form-data or \
                 application/octet-stream"
            ),
        ));
    };
    let entries: Vec<_> = (written.iter())
        .map(|path| {
            serde_json::json!({
                "path": path.display().to_string(),
                "name": path.file_name().map(|n| n.to_string_lossy().into_owned()),
                "type": "file",
            })
        })
        .collect();
    Ok(axum::Json(entries).into_response())
}

/// Hands each `file` part of `multipart` to `sink` with the path it goes to (the `path=`
/// parameter, else its file name, resolved for `account`), in order; one path twice in an
/// upload is refused, as envd does. Returns the paths.
pub(super) async fn file_parts<F, Fut>(
    mut multipart: multer::Multipart<'static>,
    path_param: Option<&str>,
    account: &Account,
    mut sink: F,
) -> Result<Vec<PathBuf>, FileError>
where
    F: FnMut(PathBuf, BodyStream) -> Fut,
    Fut: std::future::Future<Output = Result<(), FileError>>,
{
    let bad = FileError::bad;
    let mut written = Vec::new();
    let mut seen = HashSet::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|err| bad(format!("error reading form: {err}")))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let path = match (path_param, field.file_name()) {
            (Some(path), _) => account.resolve(path),
            (None, Some(name)) => account.resolve(name),
            (None, None) => return Err(bad("a file part has no file name".into())),
        };
        if !seen.insert(path.clone()) {
            return Err(bad(format!(
                "you cannot upload multiple files to the same path '{}' in one upload request",
                path.display()
            )));
        }
        let body = field.map(|chunk| chunk.map_err(std::io::Error::other));
        sink(path.clone(), Box::pin(body)).await?;
        written.push(path);
    }
    Ok(written)
}

/// Writes `body` to `path` (created or truncated, mode 0666 less the umask) and hands it to
/// `account`, its missing parents made first.
/// Under a restricting `--envd-sandbox` the sandbox helper makes the parents and opens the
/// file.
async fn write_file(
    path: &Path,
    mut body: BodyStream,
    account: &Account,
    confined: Option<&Confined>,
) -> Result<(), FileError> {
    let file = match confined {
        Some(confined) => {
            if let Some(parent) = path.parent() {
                confine::make_dirs(confined, parent).await?;
            }
            if path.is_dir() {
                return Err(is_a_directory(path));
            }
            confine::open(confined, path, OpenMode::Write).await?
        }
        None => {
            let (target, owner) = (path.to_path_buf(), account.clone());
            tokio::task::spawn_blocking(move || open_for(&target, &owner))
                .await
                .map_err(|err| internal("error opening file", err))??
        }
    };
    let mut file = tokio::fs::File::from_std(file);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|err| internal("error reading the upload", err))?;
        file.write_all(&chunk)
            .await
            .map_err(|err| write_error(path, err))?;
    }
    file.flush().await.map_err(|err| write_error(path, err))
}

fn write_error(path: &Path, err: std::io::Error) -> FileError {
    if err.raw_os_error() == Some(libc::ENOSPC) {
        return FileError(
            StatusCode::INSUFFICIENT_STORAGE,
            "not enough disk space available".into(),
        );
    }
    internal(&format!("error writing file {}", path.display()), err)
}

fn is_a_directory(path: &Path) -> FileError {
    let message = format!("path is a directory: {}", path.display());
    FileError(StatusCode::BAD_REQUEST, message)
}

fn open_for(path: &Path, account: &Account) -> Result<std::fs::File, FileError> {
    let connect =
        |error: super::connect::ConnectError| internal("error ensuring directories", error.message);
    if let Some(parent) = path.parent() {
        ensure_dirs(parent, account).map_err(connect)?;
    }
    if path.is_dir() {
        return Err(is_a_directory(path));
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|err| write_error(path, err))?;
    chown(path, account).map_err(connect)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[tokio::test]
    async fn gzip_bodies_decompress_across_chunk_boundaries() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let original: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        encoder.write_all(&original).unwrap();
        let compressed = encoder.finish().unwrap();
        let chunks: Vec<std::io::Result<Bytes>> = compressed
            .chunks(7)
            .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
            .collect();
        let out: Vec<u8> = gunzip(futures::stream::iter(chunks))
            .map(|chunk| chunk.unwrap().to_vec())
            .concat()
            .await;
        assert_eq!(out, original);
    }
}
