//! Single-step path operations: createDirectory, getMetadata, readDirectory, remove,
//! canonicalize, rename.

use super::host::{refuse_symlink, refuse_symlinked_parents, symlink_refused, with_path};
use super::FsError;
use exec_server_protocol::fs::{
    DirectoryEntry, DirectoryEntryError, Metadata, ReadDirectoryResult, MAX_DIRECTORY_ENTRIES,
};
use exec_server_protocol::PathUri;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) fn create_directory(path: &Path, recursive: bool, follow: bool) -> Result<(), FsError> {
    // mkdir never follows a final symlink, but create_dir_all accepts one to a directory.
    if !follow {
        refuse_symlinked_parents(path, follow)?;
        refuse_symlink(path)?;
    }
    let result = if recursive {
        std::fs::create_dir_all(path)
    } else {
        std::fs::create_dir(path)
    };
    with_path(result, path)
}

/// isDirectory/isFile/size describe the target, isSymlink comes from lstat; without following,
/// a symlink is refused, as upstream (nothing about it would be the target's).
pub(super) fn metadata(path: &Path, follow: bool) -> Result<Metadata, FsError> {
    refuse_symlinked_parents(path, follow)?;
    let link = with_path(std::fs::symlink_metadata(path), path)?;
    let is_symlink = link.file_type().is_symlink();
    if is_symlink && !follow {
        return Err(symlink_refused(path));
    }
    let meta = if is_symlink {
        with_path(std::fs::metadata(path), path)?
    } else {
        link
    };
    Ok(Metadata {
        is_directory: meta.is_dir(),
        is_file: meta.is_file(),
        is_symlink,
        size: meta.len(),
        created_at_ms: meta.created().map_or(0, unix_ms),
        modified_at_ms: meta.modified().map_or(0, unix_ms),
    })
}

fn unix_ms(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Entries in directory order. Those whose (followed) metadata fails go to `errors` instead of
/// vanishing; the limit counts both.
pub(super) fn read_directory(path: &Path) -> Result<ReadDirectoryResult, FsError> {
    let mut result = ReadDirectoryResult {
        entries: Vec::new(),
        errors: Vec::new(),
    };
    let mut count = 0usize;
    for entry in with_path(std::fs::read_dir(path), path)? {
        let entry = with_path(entry, path)?;
        count += 1;
        // Past the limit only the count is needed, for the error text.
        if count > MAX_DIRECTORY_ENTRIES {
            continue;
        }
        let file_name = entry.file_name().to_string_lossy().into_owned();
        match std::fs::metadata(entry.path()) {
            Ok(meta) => result.entries.push(DirectoryEntry {
                file_name,
                is_directory: meta.is_dir(),
                is_file: meta.is_file(),
            }),
            Err(err) => result.errors.push(DirectoryEntryError {
                file_name,
                message: err.to_string(),
            }),
        }
    }
    if count > MAX_DIRECTORY_ENTRIES {
        return Err(FsError::internal(format!(
            "fs/readDirectory returned {count} entries; limit is {MAX_DIRECTORY_ENTRIES}"
        )));
    }
    Ok(result)
}

/// lstat decides: a directory is removed (recursively or not), anything else, a symlink
/// included, is unlinked, so a link's target is never touched.
pub(super) fn remove(path: &Path, recursive: bool, force: bool) -> Result<(), FsError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if force && err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(FsError::io(err, path)),
    };
    let result = if !meta.is_dir() {
        std::fs::remove_file(path)
    } else if recursive {
        // std's remove_dir_all does not follow symlinks inside the tree.
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_dir(path)
    };
    match result {
        Err(err) if force && err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => with_path(other, path),
    }
}

pub(super) fn canonicalize(path: &Path) -> Result<PathUri, FsError> {
    let real = with_path(std::fs::canonicalize(path), path)?;
    PathUri::from_path(&real).map_err(|err| FsError::internal(err.to_string()))
}

/// Renames the path itself (a symlink is renamed, not followed). Without `overwrite` the kernel
/// refuses an existing destination atomically (RENAME_NOREPLACE); on file systems without it
/// an lstat check stands in, which a concurrent creator can race.
pub(super) fn rename(source: &Path, destination: &Path, overwrite: bool) -> Result<(), FsError> {
    if overwrite {
        return with_path(std::fs::rename(source, destination), source);
    }
    let result = rename_noreplace(source, destination);
    let result = match result {
        Err(err) if matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
            if std::fs::symlink_metadata(destination).is_ok() {
                Err(io::Error::from_raw_os_error(libc::EEXIST))
            } else {
                std::fs::rename(source, destination)
            }
        }
        other => other,
    };
    match result {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Err(FsError::DestinationExists {
            err,
            path: destination.to_owned(),
        }),
        other => with_path(other, source),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(source: &Path, destination: &Path) -> io::Result<()> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    renameat2(
        AT_FDCWD,
        source,
        AT_FDCWD,
        destination,
        RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(io::Error::from)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_noreplace(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}
