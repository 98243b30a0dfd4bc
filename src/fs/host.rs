//! From wire paths to host paths and from host errors to [`FsError`]s, and the one way files
//! are opened (never blocking on a FIFO, optionally refusing a symlink).

use super::FsError;
use exec_server_protocol::PathUri;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
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
/// (callers then check the type with fstat). `follow: false` refuses a symlink in **any**
/// component, as upstream: the parents are checked one directory at a time with O_NOFOLLOW
/// ([`open_parent_nofollow`]), then the path opened with O_NOFOLLOW, so the kernel itself
/// refuses a final symlink. A parent swapped for a link between the two steps is not caught
/// (openat2's RESOLVE_NO_SYMLINKS would, but the sandbox helper's seccomp filter answers
/// openat2 with ENOSYS).
pub(super) fn open(path: &Path, options: &mut OpenOptions, follow: bool) -> Result<File, FsError> {
    if follow {
        return options
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|err| FsError::io(err, path));
    }
    refuse_symlinked_parents(path, follow)?;
    open_unless_link(path, options)
}

/// Opens `path` (non-blocking) unless it is itself a symlink; links among its parents are
/// followed (`fs/copy` copies a link as a link, wherever its source lies).
pub(super) fn open_unless_link(path: &Path, options: &mut OpenOptions) -> Result<File, FsError> {
    let flags = libc::O_NONBLOCK | libc::O_NOFOLLOW;
    options.custom_flags(flags).open(path).map_err(|err| {
        if err.raw_os_error() == Some(libc::ELOOP) && refuse_symlink(path).is_err() {
            return symlink_refused(path);
        }
        FsError::io(err, path)
    })
}

/// Directories on the way are opened `O_PATH`, as upstream: a path-only descriptor needs no
/// read right, so a sandbox that grants only a workspace (not `/` or its ancestors) still
/// lets the walk reach it; Landlock checks the operation at the end instead.
fn open_directory(dir: Option<&OwnedFd>, name: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mode = nix::sys::stat::Mode::empty();
    Ok(match dir {
        Some(dir) => nix::fcntl::openat(dir, name, flags, mode),
        None => nix::fcntl::open(name, flags, mode),
    }?)
}

/// The directory holding `path`, opened from `/` one component at a time without following
/// any symlink; a symlinked component is refused naming it.
fn open_parent_nofollow(path: &Path) -> Result<OwnedFd, FsError> {
    let mut dir = with_path(open_directory(None, Path::new("/")), path)?;
    let Some(parent) = path.parent() else {
        return Ok(dir);
    };
    let mut walked = PathBuf::from("/");
    for component in parent.components().skip(1) {
        walked.push(component);
        let fd = open_directory(Some(&dir), Path::new(component.as_os_str()));
        dir = fd.map_err(|err| {
            if err.raw_os_error() == Some(libc::ENOTDIR) && refuse_symlink(&walked).is_err() {
                return symlink_refused(&walked);
            }
            FsError::io(err, path)
        })?;
    }
    Ok(dir)
}

/// With `follow: false`, fails when any component of `path` but the last is a symlink, for the
/// operations that then act on the path itself (metadata, mkdir, remove). A missing component
/// ends the check: nothing below it exists, and the operation reports it (or creates it).
pub(super) fn refuse_symlinked_parents(path: &Path, follow: bool) -> Result<(), FsError> {
    if follow {
        return Ok(());
    }
    match open_parent_nofollow(path) {
        Err(FsError::Io { err, .. }) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        checked => checked.map(drop),
    }
}

/// Opens a regular file for reading ([`regular`]).
/// Without following, a FIFO or other non-file is upstream's `path is not a regular file`.
pub(super) fn open_regular(path: &Path, follow: bool) -> Result<(File, Metadata), FsError> {
    let file = open(path, OpenOptions::new().read(true), follow)?;
    let meta = with_path(file.metadata(), path)?;
    match regular(&meta, path) {
        Err(FsError::NotAFile(_)) if !follow => Err(FsError::refused("path is not a regular file")),
        checked => checked.map(|()| (file, meta)),
    }
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
