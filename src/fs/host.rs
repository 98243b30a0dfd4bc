//! From wire paths to host paths and from host errors to [`FsError`]s, and the one way files
//! are opened (never blocking on a FIFO, optionally refusing a symlink).

use super::FsError;
use exec_server_protocol::PathUri;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The host path of a wire path; a URI of another OS is refused (`'<uri>' is invalid on
/// 'linux'`).
pub(super) fn host_path(uri: &PathUri) -> Result<PathBuf, FsError> {
    uri.to_path()
        .map_err(|err| FsError::refused(err.to_string()))
}

pub(super) fn with_path<T>(result: io::Result<T>, path: &Path) -> Result<T, FsError> {
    result.map_err(|err| FsError::io(err, path))
}

/// `followSymlinks: false` met a symlink as the final component.
pub(super) fn symlink_refused(path: &Path) -> FsError {
    FsError::SymlinkRefused(path.to_owned())
}

/// Fails when `path` itself is a symlink (used where the OS call would follow it).
pub(super) fn refuse_symlink(path: &Path) -> Result<(), FsError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(symlink_refused(path)),
        _ => Ok(()),
    }
}

/// Opens `path` with `options`, never blocking: O_NONBLOCK makes a FIFO open return at once
/// (callers then check the type with fstat). `follow: false` adds O_NOFOLLOW, so a symlink as
/// the final component is refused by the kernel itself, with no check-then-open race.
pub(super) fn open(path: &Path, options: &mut OpenOptions, follow: bool) -> Result<File, FsError> {
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    options.custom_flags(flags).open(path).map_err(|err| {
        if !follow && err.raw_os_error() == Some(libc::ELOOP) && refuse_symlink(path).is_err() {
            return symlink_refused(path);
        }
        FsError::io(err, path)
    })
}

/// Opens a regular file for reading ([`regular`]).
pub(super) fn open_regular(path: &Path, follow: bool) -> Result<(File, Metadata), FsError> {
    let file = open(path, OpenOptions::new().read(true), follow)?;
    let meta = with_path(file.metadata(), path)?;
    regular(&meta, path)?;
    Ok((file, meta))
}

/// Err unless `meta` is a regular file's. A directory gets the OS's own EISDIR error (what a
/// plain read reports in the reference); FIFOs, sockets and devices are not files.
pub(super) fn regular(meta: &Metadata, path: &Path) -> Result<(), FsError> {
    if meta.is_dir() {
        return Err(FsError::io(
            io::Error::from_raw_os_error(libc::EISDIR),
            path,
        ));
    }
    if !meta.is_file() {
        return Err(FsError::NotAFile(path.to_owned()));
    }
    Ok(())
}

/// Runs blocking filesystem work off the async runtime.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, FsError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| Err(FsError::internal(format!("filesystem task failed: {err}"))))
}

/// Ids a client may omit (`fs/open`, `fs/watch`) get a fresh one; given ones are bounded.
pub(super) fn id_or_new(id: Option<String>, what: &str) -> Result<String, FsError> {
    let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    if id.len() > exec_server_protocol::fs::MAX_HANDLE_ID_BYTES {
        return Err(FsError::refused(format!(
            "{what} ID must not exceed {} bytes",
            exec_server_protocol::fs::MAX_HANDLE_ID_BYTES
        )));
    }
    Ok(id)
}
