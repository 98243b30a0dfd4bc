//! `/v1/files/{path}`: GET reads a file (raw bytes) or lists a directory (JSON), HEAD the same
//! without the body, PUT writes a file atomically (a temporary file renamed into place, parents
//! made, `mode=0644` by default; a raw or a multipart body, bounded by
//! `--sandboxd-max-file-bytes`), DELETE removes a
//! file or (with `recursive=true`) a tree. Every path is opened beneath the root (`tree`).

use super::tree::{self, Relative};
use super::ApiError;
use crate::server::Daemon;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt as _};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncWriteExt as _;

type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// Runs blocking file system work off the runtime's workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the file task failed: {err}"),
        )
    })?
}

enum Found {
    File(std::fs::File, u64),
    Directory(serde_json::Value),
}

pub(super) async fn read(
    State(daemon): State<Arc<Daemon>>,
    raw: Option<Path<String>>,
) -> Result<Response, ApiError> {
    let root = daemon.config.sandboxd_root.clone();
    let path = Relative::parse(raw.as_ref().map_or("", |Path(raw)| raw))?;
    let found = blocking(move || {
        let root = tree::open_root(&root)?;
        // Non-blocking, so that a FIFO planted under the root cannot hold a thread.
        let fd = tree::open(
            &root,
            &path,
            OFlags::RDONLY | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| tree::error(errno, &path))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Ok(Found::Directory(listing(fd, &path)?)),
            FileType::RegularFile => Ok(Found::File(fd.into(), stat.st_size as u64)),
            _ => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{} is neither a file nor a directory", path.display()),
            )),
        }
    })
    .await?;
    Ok(match found {
        Found::Directory(listing) => axum::Json(listing).into_response(),
        Found::File(file, length) => {
            let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
            let mut response = Response::new(Body::from_stream(stream));
            let headers = response.headers_mut();
            let octets = HeaderValue::from_static("application/octet-stream");
            headers.insert(header::CONTENT_TYPE, octets);
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            response
        }
    })
}

/// The contract's DirectoryListing of the open directory `dir`: each entry as it is (a link
/// not followed, so nothing outside the root is described).
fn listing(dir: OwnedFd, path: &Relative) -> Result<serde_json::Value, ApiError> {
    let mut entries = Vec::new();
    let names = rustix::fs::Dir::read_from(&dir).map_err(|errno| tree::error(errno, path))?;
    for entry in names {
        let entry = entry.map_err(|errno| tree::error(errno, path))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        // Gone meanwhile: left out.
        let Ok(stat) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let is_dir = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
        let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(stat.st_mtime.max(0) as u64);
        entries.push(serde_json::json!({
            "name": name.to_string_lossy(),
            "size": stat.st_size,
            "type": if is_dir { "directory" } else { "file" },
            "modified_at": humantime::format_rfc3339_seconds(modified).to_string(),
            "mode": format!("{:04o}", stat.st_mode & 0o7777),
        }));
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(serde_json::json!({ "path": path.display(), "entries": entries }))
}

#[derive(serde::Deserialize)]
pub(super) struct WriteParams {
    mode: Option<String>,
}

/// `mode=0NNN` as the contract's pattern `^0[0-7]{3}$` has it.
fn file_mode(mode: Option<&str>) -> Result<Mode, ApiError> {
    let text = mode.unwrap_or("0644");
    let valid = text.len() == 4
        && text.starts_with('0')
        && text.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match valid.then(|| u32::from_str_radix(text, 8)) {
        Some(Ok(bits)) => Ok(Mode::from_raw_mode(bits)),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("mode must be four octal digits starting with 0 (e.g. 0644), not {text:?}"),
        )),
    }
}

pub(super) async fn write(
    State(daemon): State<Arc<Daemon>>,
    raw: Option<Path<String>>,
    Query(params): Query<WriteParams>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let mode = file_mode(params.mode.as_deref())?;
    let limit = daemon.config.sandboxd_max_file_bytes;
    let declared = (headers.get(header::CONTENT_LENGTH))
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large(limit));
    }
    let path = Relative::parse(raw.as_ref().map_or("", |Path(raw)| raw))?;
    let Some((parent, name)) = path.split() else {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "/ is a directory"));
    };
    let chunks = file_body(&headers, body).await?;
    let root = daemon.config.sandboxd_root.clone();
    let (temp, file) = blocking(move || {
        let root = tree::open_root(&root)?;
        let dir = tree::directory(&root, &parent, true)?;
        Temporary::beside(dir, name, &parent)
    })
    .await?;
    let file = copy(chunks, file, limit).await?;
    blocking(move || {
        rustix::fs::fchmod(&file, mode).map_err(|errno| tree::error(errno, &path))?;
        temp.rename().map_err(|errno| tree::error(errno, &path))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A file being written beside its final name, removed unless renamed into place: also when
/// the request is dropped half-way (its connection closed, or cut at the listener's deadline).
struct Temporary {
    dir: OwnedFd,
    /// None once renamed.
    temp: Option<OsString>,
    name: OsString,
}

impl Temporary {
    /// A new file beside `name` in `dir`, to be renamed over it once whole.
    fn beside(
        dir: OwnedFd,
        name: OsString,
        parent: &Relative,
    ) -> Result<(Self, std::fs::File), ApiError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut temp = OsString::from(".");
        temp.push(&name);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        temp.push(format!(".{}.{unique}.tmp", std::process::id()));
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&dir, &temp, flags, Mode::from_raw_mode(0o600))
            .map_err(|errno| tree::error(errno, parent))?;
        let temporary = Self {
            dir,
            temp: Some(temp),
            name,
        };
        Ok((temporary, file.into()))
    }

    fn rename(mut self) -> rustix::io::Result<()> {
        let temp = self.temp.take().expect("renamed once");
        let renamed = rustix::fs::renameat(&self.dir, &temp, &self.dir, &self.name);
        if renamed.is_err() {
            self.temp = Some(temp);
        }
        renamed
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            let _ = rustix::fs::unlinkat(&self.dir, temp, AtFlags::empty());
        }
    }
}

/// The body's bytes into `file`, at most `limit` of them. A body that stalls is the
/// listener's to end: its connection is closed at the HTTP phase's deadline (`--upgrade-timeout`).
async fn copy(mut chunks: Chunks, file: std::fs::File, limit: u64) -> Result<OwnedFd, ApiError> {
    let failed = |err: std::io::Error| match err.raw_os_error() {
        Some(errno) => tree::error(
            rustix::io::Errno::from_raw_os_error(errno),
            &Relative::root(),
        ),
        None => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    };
    let mut file = tokio::fs::File::from_std(file);
    let mut total = 0u64;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| {
            let message = format!("the request body could not be read: {err}");
            ApiError::new(StatusCode::BAD_REQUEST, message)
        })?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(too_large(limit));
        }
        file.write_all(&chunk).await.map_err(failed)?;
    }
    file.flush().await.map_err(failed)?;
    Ok(file.into_std().await.into())
}

fn too_large(limit: u64) -> ApiError {
    let message = format!("the file is larger than this daemon's limit of {limit} bytes");
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
}

/// The file's bytes: the `file` part of a `multipart/form-data` body, else the body itself
/// (`application/octet-stream`, or whatever type a client put on it).
async fn file_body(headers: &HeaderMap, body: Body) -> Result<Chunks, ApiError> {
    let content_type = (headers.get(header::CONTENT_TYPE))
        .and_then(|value| value.to_str().ok())
        .unwrap_or("application/octet-stream");
    let media = content_type.split(';').next().unwrap_or("").trim();
    let raw = body
        .into_data_stream()
        .map(|chunk| chunk.map_err(|err| err.to_string()));
    if !media.eq_ignore_ascii_case("multipart/form-data") {
        return Ok(Box::pin(raw));
    }
    let bad =
        |err: multer::Error| ApiError::new(StatusCode::BAD_REQUEST, format!("bad form: {err}"));
    let boundary = multer::parse_boundary(content_type).map_err(bad)?;
    let mut form = multer::Multipart::new(raw, boundary);
    while let Some(field) = form.next_field().await.map_err(bad)? {
        if field.name() == Some("file") {
            return Ok(Box::pin(
                field.map(|chunk| chunk.map_err(|err| err.to_string())),
            ));
        }
    }
    Err(ApiError::new(
        StatusCode::BAD_REQUEST,
        "the form has no `file` part",
    ))
}

#[derive(serde::Deserialize)]
pub(super) struct RemoveParams {
    recursive: Option<String>,
}

pub(super) async fn remove(
    State(daemon): State<Arc<Daemon>>,
    raw: Option<Path<String>>,
    Query(params): Query<RemoveParams>,
) -> Result<StatusCode, ApiError> {
    let recursive = match params.recursive.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            let message = format!("recursive must be true or false, not {other:?}");
            return Err(ApiError::new(StatusCode::BAD_REQUEST, message));
        }
    };
    let path = Relative::parse(raw.as_ref().map_or("", |Path(raw)| raw))?;
    let Some((parent, name)) = path.split() else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "the sandbox root cannot be removed",
        ));
    };
    let root = daemon.config.sandboxd_root.clone();
    blocking(move || {
        let root = tree::open_root(&root)?;
        let dir = tree::directory(&root, &parent, false)?;
        let fail = |errno| tree::error(errno, &path);
        let stat = rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            return rustix::fs::unlinkat(&dir, &name, AtFlags::empty()).map_err(fail);
        }
        if !recursive {
            return rustix::fs::unlinkat(&dir, &name, AtFlags::REMOVEDIR).map_err(fail);
        }
        // Through the pinned directory's descriptor: the standard library removes the tree
        // with *at calls that never follow a link.
        let tree_path =
            std::path::Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(&name);
        std::fs::remove_dir_all(tree_path).map_err(|err| match err.raw_os_error() {
            Some(errno) => fail(rustix::io::Errno::from_raw_os_error(errno)),
            None => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        })
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
