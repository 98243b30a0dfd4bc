//! The reference runtime's file routes: `POST /upload`, `GET /download/{path}`,
//! `/list/{path}`, `/exists/{path}`, confined to the base directory as its `get_safe_path` is
//! (a leading `/` dropped, a path whose resolution leaves the base refused with 403), but
//! opened one step at a time beneath the base (`crate::fs::beneath`), so a symbolic link
//! swapped in meanwhile cannot lead out either. Under a restricting `--runtime-sandbox`, a
//! sandbox helper confined to the profile does the opening, as for a sandboxed `fs/*` call
//! (`crate::fs::sandbox`): the kernel refuses what the profile does not grant (403, saying so).

use super::{message, Runtime};
use crate::fs::sandbox::{route, Confined};
use crate::fs::Failure;
use crate::ipc::message::{Access, OpenBeneath};
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt as _;
use std::os::fd::{AsRawFd as _, OwnedFd};
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

/// Axum decoded the path once; the reference unquotes it once more.
fn decoded(path: &str) -> String {
    percent_encoding::percent_decode_str(path)
        .decode_utf8_lossy()
        .into_owned()
}

/// `path` of the URL relative to the base directory; None when it climbs out of it.
fn target(path: &str) -> Option<PathBuf> {
    confined(&decoded(path))
}

/// The sandbox the routes' files are opened in under a restricting `--runtime-sandbox`; None
/// when the daemon opens them.
fn sandbox(runtime: &Runtime) -> Result<Option<Confined>, String> {
    if runtime.daemon.config.runtime.sandbox.is_none() {
        return Ok(None);
    }
    let base = runtime.base_uri()?;
    let routed = route(runtime.sandbox(&base)).map_err(|err| err.to_string())?;
    Ok(routed.confined())
}

/// `relative` opened beneath the base directory for `access`, by the daemon or, under a
/// restricting `--runtime-sandbox`, by a sandbox helper confined to the profile. Err: the
/// answer to a path that leads out (403), one the profile does not grant (403, saying so), or
/// a helper that failed (500); Ok(Err): the OS's other refusals, which each route words.
async fn open(
    runtime: &Runtime,
    relative: &Path,
    access: Access,
) -> Result<std::io::Result<OwnedFd>, Response> {
    let failed = |why: String| message(StatusCode::INTERNAL_SERVER_ERROR, &why);
    let mut request = OpenBeneath {
        base: runtime.daemon.config.runtime.base_dir.clone(),
        path: relative.to_owned(),
        access,
    };
    let Some(confined) = sandbox(runtime).map_err(failed)? else {
        let opened = tokio::task::spawn_blocking(move || crate::fs::beneath::open(&request))
            .await
            .map_err(|err| failed(err.to_string()))?;
        return match opened {
            Err(err) if err.raw_os_error() == Some(libc::EXDEV) => Err(denied()),
            opened => Ok(opened),
        };
    };
    // Landlock does not check an `O_PATH` open: under the profile, a path is found where the
    // sandbox may read it, and refused where it may not.
    if access == Access::Find {
        request.access = Access::Read;
    }
    let failure = match confined.open_beneath(&request).await {
        Ok(fd) => return Ok(Ok(fd)),
        Err(error) => Failure::from(error),
    };
    match failure.errno {
        Some(libc::EXDEV) => Err(denied()),
        _ if failure.sandbox_denied => Err(not_granted(relative, access)),
        Some(errno) => Ok(Err(std::io::Error::from_raw_os_error(errno))),
        None => Err(failed(failure.message)),
    }
}

/// 403 for what `--runtime-sandbox` does not grant, naming it.
fn not_granted(relative: &Path, access: Access) -> Response {
    let what = match access {
        Access::Create => "writing",
        Access::Find | Access::Read | Access::List => "reading",
    };
    let text = format!(
        "Access denied: the runtime sandbox profile does not allow {what} '{}'",
        relative.display()
    );
    message(StatusCode::FORBIDDEN, &text)
}

pub(super) async fn exists(
    State(runtime): State<Arc<Runtime>>,
    UrlPath(path): UrlPath<String>,
) -> Result<Response, Response> {
    let relative = target(&path).ok_or_else(denied)?;
    let exists = open(&runtime, &relative, Access::Find).await?.is_ok();
    Ok(Json(serde_json::json!({ "path": decoded(&path), "exists": exists })).into_response())
}

pub(super) async fn download(
    State(runtime): State<Arc<Runtime>>,
    UrlPath(path): UrlPath<String>,
) -> Result<Response, Response> {
    let relative = target(&path).ok_or_else(denied)?;
    let not_found = || message(StatusCode::NOT_FOUND, "File not found");
    let file = match open(&runtime, &relative, Access::Read).await? {
        Ok(fd) => std::fs::File::from(fd),
        Err(_) => return Err(not_found()),
    };
    // A FIFO or a device would block or never end: regular files only, as the reference.
    let length = match file.metadata() {
        Ok(meta) if meta.is_file() => meta.len(),
        _ => return Err(not_found()),
    };
    let name = relative.file_name().unwrap_or_default().to_string_lossy();
    let disposition = format!(
        "attachment; filename*=utf-8''{}",
        percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
    );
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    let headers = [
        (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
        (header::CONTENT_DISPOSITION, disposition),
        (header::CONTENT_LENGTH, length.to_string()),
    ];
    Ok((headers, body).into_response())
}

pub(super) async fn list(
    State(runtime): State<Arc<Runtime>>,
    UrlPath(path): UrlPath<String>,
) -> Result<Response, Response> {
    let relative = target(&path).ok_or_else(denied)?;
    let Ok(directory) = open(&runtime, &relative, Access::List).await? else {
        return Err(message(StatusCode::NOT_FOUND, "Path is not a directory"));
    };
    let failed = |why: String| message(StatusCode::INTERNAL_SERVER_ERROR, &why);
    let listed = tokio::task::spawn_blocking(move || entries(&directory)).await;
    match listed {
        Ok(Ok(entries)) => Ok(Json(entries).into_response()),
        Ok(Err(err)) => Err(failed(format!("List files failed: {err}"))),
        Err(err) => Err(failed(err.to_string())),
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
) -> Result<Response, Response> {
    let bad = |why: &str| message(StatusCode::BAD_REQUEST, why);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let Some(Ok(boundary)) = content_type.map(multer::parse_boundary) else {
        return Err(bad("expected a multipart/form-data body"));
    };
    let limit = runtime.daemon.config.runtime.max_upload_bytes;
    let constraints =
        multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(limit));
    let mut multipart =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => return Err(bad("no field `file` in the form")),
            Err(err) => return Err(upload_error(err)),
        };
        if field.name() != Some("file") {
            continue;
        }
        let Some(name) = field.file_name().map(str::to_owned) else {
            return Err(bad("the field `file` has no file name"));
        };
        let relative = confined(&name).ok_or_else(denied)?;
        if relative.as_os_str().is_empty() {
            return Err(bad("the file name names no file"));
        }
        let file = match open(&runtime, &relative, Access::Create).await? {
            Ok(fd) => std::fs::File::from(fd),
            Err(err) => return Err(write_failed(err)),
        };
        write_field(file, field).await?;
        let done = format!("File '{name}' uploaded successfully.");
        return Ok(message(StatusCode::OK, &done));
    }
}

fn write_failed(err: std::io::Error) -> Response {
    let text = format!("File upload failed: {err}");
    message(StatusCode::INTERNAL_SERVER_ERROR, &text)
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

/// Writes the field's bytes to `file`, opened beneath the base.
async fn write_field(
    file: std::fs::File,
    mut field: multer::Field<'static>,
) -> Result<(), Response> {
    use tokio::io::AsyncWriteExt as _;
    let mut file = tokio::fs::File::from_std(file);
    while let Some(chunk) = field.next().await {
        let chunk = chunk.map_err(upload_error)?;
        file.write_all(&chunk).await.map_err(write_failed)?;
    }
    file.flush().await.map_err(write_failed)
}
