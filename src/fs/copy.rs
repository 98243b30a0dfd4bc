//! `fs/copy`: files, symlinks (as symlinks) and, with `recursive`, directory trees.

use super::host::{open_unless_link, with_path};
use super::FsError;
use std::fs::{FileType, OpenOptions};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

const SPECIAL: &str = "fs/copy only supports regular files, directories, and symlinks";

pub(super) fn copy(source: &Path, destination: &Path, recursive: bool) -> Result<(), FsError> {
    let kind = with_path(std::fs::symlink_metadata(source), source)?.file_type();
    if kind.is_dir() {
        if !recursive {
            return Err(FsError::refused(
                "fs/copy requires recursive: true when sourcePath is a directory",
            ));
        }
        refuse_copy_into_itself(source, destination)?;
        return copy_tree(source, destination);
    }
    if !copy_leaf(kind, source, destination)? {
        return Err(FsError::refused(SPECIAL));
    }
    Ok(())
}

/// Copies a non-directory; false when it is a FIFO, socket or device (nothing is done).
fn copy_leaf(kind: FileType, source: &Path, destination: &Path) -> Result<bool, FsError> {
    if kind.is_symlink() {
        let text = with_path(std::fs::read_link(source), source)?;
        with_path(std::os::unix::fs::symlink(text, destination), destination)?;
        return Ok(true);
    }
    if !kind.is_file() {
        return Ok(false);
    }
    // Opened without following and without blocking, so a path swapped for a symlink or FIFO
    // since the lstat is caught by the fstat below instead of being read.
    let mut input = open_unless_link(source, OpenOptions::new().read(true))?;
    let meta = with_path(input.metadata(), source)?;
    if !meta.is_file() {
        return Ok(false);
    }
    if let Ok(existing) = std::fs::metadata(destination) {
        if (existing.dev(), existing.ino()) == (meta.dev(), meta.ino()) {
            // Truncating the destination would destroy the source.
            return Err(FsError::refused("fs/copy cannot copy a file onto itself"));
        }
    }
    let mut output = with_path(
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(destination),
        destination,
    )?;
    // At most the size measured at open: pseudo-files (/proc/self/pagemap reports 0 and reads
    // on for terabytes) would otherwise fill the disk, and a file growing meanwhile is cut
    // there. std::io::copy uses copy_file_range between files, so the bytes stay in the kernel.
    let mut input = std::io::Read::take(&mut input, meta.len());
    with_path(std::io::copy(&mut input, &mut output), destination)?;
    with_path(output.set_permissions(meta.permissions()), destination)?;
    Ok(true)
}

/// Depth-first with an explicit stack, so a deep tree cannot overflow the thread's stack.
/// Symlinks are recreated (their text kept), specials are skipped.
fn copy_tree(source: &Path, destination: &Path) -> Result<(), FsError> {
    let mut pending: Vec<(PathBuf, PathBuf)> = vec![(source.into(), destination.into())];
    while let Some((from, to)) = pending.pop() {
        with_path(std::fs::create_dir_all(&to), &to)?;
        for entry in with_path(std::fs::read_dir(&from), &from)? {
            let entry = with_path(entry, &from)?;
            let kind = with_path(entry.file_type(), &entry.path())?;
            let target = to.join(entry.file_name());
            if kind.is_dir() {
                pending.push((entry.path(), target));
            } else {
                copy_leaf(kind, &entry.path(), &target)?;
            }
        }
    }
    Ok(())
}

/// Compares real paths, so aliases through symlinks are caught too. The destination may not
/// exist yet: its nearest existing ancestor is resolved and the rest appended.
fn refuse_copy_into_itself(source: &Path, destination: &Path) -> Result<(), FsError> {
    let source = with_path(std::fs::canonicalize(source), source)?;
    let mut existing = destination;
    let mut rest = Vec::new();
    let resolved = loop {
        match std::fs::canonicalize(existing) {
            Ok(real) => break real,
            Err(err) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name);
                    existing = parent;
                }
                _ => return Err(FsError::io(err, destination)),
            },
        }
    };
    let destination = rest
        .iter()
        .rev()
        .fold(resolved, |path, name| path.join(name));
    if destination.starts_with(&source) {
        return Err(FsError::refused(
            "fs/copy cannot copy a directory to itself or one of its descendants",
        ));
    }
    Ok(())
}
