//! From wire paths to host paths and from host errors to JSON-RPC errors, and the one way files
//! are opened (never blocking on a FIFO, optionally refusing a symlink).

use crate::rpc::RpcError;
use exec_server_protocol::PathUri;
use serde_json::Value;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The host path of a wire path; a URI of another OS is -32600 `'<uri>' is invalid on 'linux'`.
pub fn host_path(uri: &PathUri) -> Result<PathBuf, RpcError> {
    uri.to_path()
        .map_err(|err| RpcError::invalid_request(err.to_string()))
}

/// An I/O error about `path`, mapped as the reference does (the OS text, NotFound -32004,
/// InvalidInput/PermissionDenied -32600, else -32603); `data` adds kind, errno and the path.
pub fn io_error(err: &io::Error, path: &Path) -> RpcError {
    let mut error = RpcError::from_io(err);
    if let (Some(Value::Object(data)), Ok(uri)) = (&mut error.data, PathUri::from_path(path)) {
        data.insert("path".into(), Value::String(uri.to_string()));
    }
    error
}

pub fn with_path<T>(result: io::Result<T>, path: &Path) -> Result<T, RpcError> {
    result.map_err(|err| io_error(&err, path))
}

/// `followSymlinks: false` met a symlink as the final component.
pub fn symlink_refused(path: &Path) -> RpcError {
    RpcError::invalid_request(format!(
        "path `{}` is a symbolic link and followSymlinks is false",
        path.display()
    ))
}

pub fn not_a_file(path: &Path) -> RpcError {
    RpcError::invalid_request(format!("path `{}` is not a file", path.display()))
}

/// Fails when `path` itself is a symlink (used where the OS call would follow it).
pub fn refuse_symlink(path: &Path) -> Result<(), RpcError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(symlink_refused(path)),
        _ => Ok(()),
    }
}

/// Opens `path` with `options`, never blocking: O_NONBLOCK makes a FIFO open return at once
/// (callers then check the type with fstat). `follow: false` adds O_NOFOLLOW, so a symlink as
/// the final component is refused by the kernel itself, with no check-then-open race.
pub fn open(path: &Path, options: &mut OpenOptions, follow: bool) -> Result<File, RpcError> {
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    options.custom_flags(flags).open(path).map_err(|err| {
        if !follow && err.raw_os_error() == Some(libc::ELOOP) && refuse_symlink(path).is_err() {
            return symlink_refused(path);
        }
        io_error(&err, path)
    })
}

/// Opens a regular file for reading. A directory gets the OS's own EISDIR error (what a plain
/// read reports in the reference); FIFOs, sockets and devices are not files.
pub fn open_regular(path: &Path, follow: bool) -> Result<(File, Metadata), RpcError> {
    let file = open(path, OpenOptions::new().read(true), follow)?;
    let meta = with_path(file.metadata(), path)?;
    if meta.is_dir() {
        return Err(io_error(&io::Error::from_raw_os_error(libc::EISDIR), path));
    }
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    Ok((file, meta))
}

/// Runs blocking filesystem work off the async runtime.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| Err(RpcError::internal(format!("filesystem task failed: {err}"))))
}

/// Ids a client may omit (`fs/open`, `fs/watch`) get a fresh one; given ones are bounded.
pub fn id_or_new(id: Option<String>, what: &str) -> Result<String, RpcError> {
    let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    if id.len() > exec_server_protocol::fs::MAX_HANDLE_ID_BYTES {
        return Err(RpcError::invalid_request(format!(
            "{what} ID must not exceed {} bytes",
            exec_server_protocol::fs::MAX_HANDLE_ID_BYTES
        )));
    }
    Ok(id)
}
