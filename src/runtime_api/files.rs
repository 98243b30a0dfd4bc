//! The reference runtime's file routes: `POST /upload`, `GET /download/{path}`,
//! `/list/{path}`, `/exists/{path}`, confined to the base directory as its `get_safe_path` is
//! (a leading `/` dropped, a path whose resolution leaves the base refused with 403), but
//! resolved by the kernel beneath the base (openat2 `RESOLVE_BENEATH`), so a symbolic link
//! swapped in meanwhile cannot lead out either.

use super::{message, Runtime};
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

fn denied() -> Response {
    message(StatusCode::FORBIDDEN, "Access denied")
}

/// `path` as the reference confines it: relative to the base, dot segments applied; None when
/// it climbs out.
fn confined(path: &str) -> Option<PathBuf> {
    let mut relative = PathBuf::new();
    for component in Path::new(path.trim_start_matches('/')).components() {
        match component {
            Component::Normal(name) => relative.push(name),
            Component::ParentDir => {
                if !relative.pop() {
                    return None;
                }
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(relative)
}

/// Opens `relative` beneath `base` (no step, symbolic links included, leaves it; no magic
/// links), `relative` empty being the base itself.
fn open_beneath(base: &Path, relative: &Path, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt as _;
    let base = std::fs::File::open(base)?;
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    let path = std::ffi::CString::new(relative.as_os_str().as_bytes())?;
    // SAFETY: open_how is plain integers, for which all zeroes is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        mode as u64
    } else {
        0
    };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a valid directory fd, path and a properly sized open_how.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            base.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether `err` says the path led out of the base (a symbolic link, or `..` through one).
fn escaped(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(libc::EXDEV)
}

/// Axum decoded the path once; the reference unquotes it once more.
fn decoded(path: &str) -> String {
    percent_encoding::percent_decode_str(path)
        .decode_utf8_lossy()
        .into_owned()
}

/// The base directory and `path` in it; None when `path` climbs out of it.
fn target(runtime: &Runtime, path: &str) -> Option<(PathBuf, PathBuf)> {
    let relative = confined(&decoded(path))?;
    Some((runtime.daemon.config.runtime.base_dir.clone(), relative))
}

pub(super) async fn exists(
    State(runtime): State<Arc<Runtime>>,
    UrlPath(path): UrlPath<String>,
) -> Response {
    let Some((base, relative)) = target(&runtime, &path) else {
        return denied();
    };
    let exists = match open_beneath(&base, &relative, libc::O_PATH, 0) {
        Ok(_) => true,
        Err(err) if escaped(&err) => return denied(),
        Err(_) => false,
    };
    Json(serde_json::json!({ "path": decoded(&path), "exists": exists })).into_response()
}

pub(super) async fn download(
    State(runtime): State<Arc<Runtime>>,
    UrlPath(path): UrlPath<String>,
) -> Response {
    let Some((base, relative)) = target(&runtime, &path) else {
        return denied();
    };
    let not_found = || message(StatusCode::NOT_FOUND, "File not found");
    let file = match open_beneath(&base, &relative, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
        Ok(fd) => std::fs::File::from(fd),
        Err(err) if escaped(&err) => return denied(),
        Err(_) => return not_found(),
    };
    // A FIFO or a device would block or never end: regular files only, as the reference.
    let length = match file.metadata() {
        Ok(meta) if meta.is_file() => meta.len(),
        _ => return not_found(),
    };
    let name = relative.file_name().unwrap_or_default().to_string_lossy();
    let disposition = format!(
        "attachment; filename*=utf-8''{}",
        percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
    );
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CONTENT_LENGTH, length.to_string()),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn list(
    State(runtime): State<Arc<Runtime>>,
    UrlPath(path): UrlPath<String>,
) -> Response {
    let Some((base, relative)) = target(&runtime, &path) else {
        return denied();
    };
    let directory = match open_beneath(&base, &relative, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => fd,
        Err(err) if escaped(&err) => return denied(),
        Err(_) => return message(StatusCode::NOT_FOUND, "Path is not a directory"),
    };
    let listed = tokio::task::spawn_blocking(move || entries(&directory)).await;
    match listed {
        Ok(Ok(entries)) => Json(entries).into_response(),
        Ok(Err(err)) => message(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("List files failed: {err}"),
        ),
        Err(err) => message(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()),
    }
}

/// The reference's entries (`os.scandir`): name, size, type, mtime in seconds.
fn entries(directory: &OwnedFd) -> std::io::Result<Vec<serde_json::Value>> {
    use std::os::unix::fs::MetadataExt as _;
    let path = format!("/proc/self/fd/{}", directory.as_raw_fd());
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let mtime = meta.mtime() as f64 + meta.mtime_nsec() as f64 / 1e9;
        entries.push(serde_json::json!({
            "name": entry.file_name().to_string_lossy(),
            "size": meta.size(),
            "type": if meta.is_dir() { "directory" } else { "file" },
            "mod_time": mtime,
        }));
    }
    Ok(entries)
}

/// `POST /upload`: the multipart field `file`, whose file name is the path to write, its
/// missing parents created (each beneath the base).
pub(super) async fn upload(
    State(runtime): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let bad = |why: String| message(StatusCode::BAD_REQUEST, &why);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let boundary = match content_type.map(multer::parse_boundary) {
        Some(Ok(boundary)) => boundary,
        _ => return bad("expected a multipart/form-data body".into()),
    };
    let limit = runtime.daemon.config.runtime.max_upload_bytes;
    let constraints =
        multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(limit));
    let mut multipart =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => return bad("no field `file` in the form".into()),
            Err(err) => return upload_error(err),
        };
        if field.name() != Some("file") {
            continue;
        }
        let Some(name) = field.file_name().map(str::to_owned) else {
            return bad("the field `file` has no file name".into());
        };
        let Some(relative) = confined(&name) else {
            return denied();
        };
        if relative.as_os_str().is_empty() {
            return bad("the file name names no file".into());
        }
        let base = runtime.daemon.config.runtime.base_dir.clone();
        return match write_field(&base, &relative, field).await {
            Ok(()) => message(
                StatusCode::OK,
                &format!("File '{name}' uploaded successfully."),
            ),
            Err(UploadError::Io(err)) if escaped(&err) => denied(),
            Err(UploadError::Io(err)) => message(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("File upload failed: {err}"),
            ),
            Err(UploadError::Body(err)) => upload_error(err),
        };
    }
}

enum UploadError {
    Io(std::io::Error),
    Body(multer::Error),
}

/// 413 for a body past the limit, 400 for a broken one.
fn upload_error(err: multer::Error) -> Response {
    let status = match &err {
        multer::Error::StreamSizeExceeded { .. } | multer::Error::FieldSizeExceeded { .. } => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        _ => StatusCode::BAD_REQUEST,
    };
    message(status, &format!("File upload failed: {err}"))
}

async fn write_field(
    base: &Path,
    relative: &Path,
    mut field: multer::Field<'static>,
) -> Result<(), UploadError> {
    use tokio::io::AsyncWriteExt as _;
    let (base_owned, relative_owned) = (base.to_owned(), relative.to_owned());
    let file = tokio::task::spawn_blocking(move || create_beneath(&base_owned, &relative_owned))
        .await
        .map_err(|err| UploadError::Io(std::io::Error::other(err)))?
        .map_err(UploadError::Io)?;
    let mut file = tokio::fs::File::from_std(file);
    while let Some(chunk) = field.next().await {
        let chunk = chunk.map_err(UploadError::Body)?;
        file.write_all(&chunk).await.map_err(UploadError::Io)?;
    }
    file.flush().await.map_err(UploadError::Io)
}

/// Creates (or truncates) `relative` beneath `base`, its missing parents first, each made in
/// a directory opened beneath the base, so no symbolic link leads a `mkdir` out.
fn create_beneath(base: &Path, relative: &Path) -> std::io::Result<std::fs::File> {
    let mut parent = PathBuf::new();
    if let Some(parents) = relative.parent() {
        for name in parents.components() {
            let directory = open_beneath(base, &parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            match nix::sys::stat::mkdirat(
                &directory,
                name.as_os_str(),
                nix::sys::stat::Mode::from_bits_truncate(0o755),
            ) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(errno) => return Err(errno.into()),
            }
            parent.push(name);
        }
    }
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
    Ok(std::fs::File::from(open_beneath(
        base, relative, flags, 0o644,
    )?))
}
