//! `fs/walk`: a bounded breadth-first listing of a tree.

use super::FsError;
use exec_server_protocol::fs::{WalkEntry, WalkEntryKind, WalkError, WalkOptions, WalkResult};
use exec_server_protocol::PathUri;
use std::collections::{HashSet, VecDeque};
use std::fs::DirEntry;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

pub(super) const MAX_DEPTH: usize = 64;
pub(super) const MAX_DIRECTORIES: usize = 10_000;
pub(super) const MAX_ENTRIES: usize = 50_000;
/// Budget for the response: each item costs its strings plus this overhead.
pub(super) const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
const ITEM_OVERHEAD: usize = 64;

pub(super) fn validate(options: &WalkOptions) -> Result<(), FsError> {
    let WalkOptions {
        max_depth,
        max_directories,
        max_entries,
        ..
    } = *options;
    if max_depth == 0 || max_directories == 0 || max_entries == 0 {
        return Err(FsError::refused(
            "filesystem walk limits must be greater than zero",
        ));
    }
    if max_depth > MAX_DEPTH || max_directories > MAX_DIRECTORIES || max_entries > MAX_ENTRIES {
        return Err(FsError::refused(format!(
            "filesystem walk limits exceed maximums: depth={MAX_DEPTH}, directories={MAX_DIRECTORIES}, entries={MAX_ENTRIES}"
        )));
    }
    Ok(())
}

struct Walk {
    options: WalkOptions,
    result: WalkResult,
    bytes: usize,
    /// Directories already queued, by (device, inode), when following symlinks.
    seen: HashSet<(u64, u64)>,
}

impl Walk {
    /// Adds an item's cost; false (and truncated) once a budget is spent.
    fn admit(&mut self, path: &PathUri, message: &str) -> bool {
        let cost = ITEM_OVERHEAD + path.as_str().len() + message.len();
        if self.bytes + cost > MAX_RESPONSE_BYTES {
            self.result.truncated = true;
            return false;
        }
        self.bytes += cost;
        true
    }

    fn error(&mut self, path: &Path, err: &std::io::Error) -> bool {
        let Ok(path) = PathUri::from_path(path) else {
            return true;
        };
        let message = err.to_string();
        if !self.admit(&path, &message) {
            return false;
        }
        self.result.errors.push(WalkError { path, message });
        true
    }

    fn entry(&mut self, path: &Path, kind: WalkEntryKind) -> bool {
        if self.result.entries.len() >= self.options.max_entries {
            self.result.truncated = true;
            return false;
        }
        let Ok(path) = PathUri::from_path(path) else {
            return true;
        };
        if !self.admit(&path, "") {
            return false;
        }
        self.result.entries.push(WalkEntry { path, kind });
        true
    }

    /// The entries of `directory`, sorted by name; None when it cannot be read (an error
    /// reported), or a break once the budget for errors is spent.
    fn children(&mut self, directory: &Path) -> ControlFlow<(), Option<Vec<DirEntry>>> {
        let mut children: Vec<_> = match std::fs::read_dir(directory) {
            Ok(read) => read
                .filter_map(|entry| match entry {
                    Ok(entry) => Some(entry),
                    Err(err) => {
                        self.error(directory, &err);
                        None
                    }
                })
                .collect(),
            Err(err) => {
                if !self.error(directory, &err) {
                    return ControlFlow::Break(());
                }
                return ControlFlow::Continue(None);
            }
        };
        children.sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()));
        ControlFlow::Continue(Some(children))
    }

    /// Reports `child`, found at `depth`, and queues it when it is a directory to read; a
    /// break once a budget is spent.
    fn visit(
        &mut self,
        child: DirEntry,
        depth: usize,
        queue: &mut VecDeque<(PathBuf, usize)>,
    ) -> ControlFlow<()> {
        let follow = self.options.follow_directory_symlinks;
        let path = child.path();
        let kind = match child.file_type() {
            Ok(kind) => kind,
            Err(err) => {
                if !self.error(&path, &err) {
                    return ControlFlow::Break(());
                }
                return ControlFlow::Continue(());
            }
        };
        let directory_meta = if kind.is_dir() {
            child.metadata().ok()
        } else if kind.is_symlink() && follow {
            std::fs::metadata(&path).ok().filter(|meta| meta.is_dir())
        } else {
            None
        };
        if let Some(meta) = directory_meta {
            if follow && !self.seen.insert((meta.dev(), meta.ino())) {
                return ControlFlow::Continue(());
            }
            if !self.entry(&path, WalkEntryKind::Directory) {
                return ControlFlow::Break(());
            }
            let hidden = child.file_name().as_bytes().starts_with(b".");
            let prune = hidden && self.options.prune_hidden_directories;
            if depth + 1 < self.options.max_depth && !prune {
                queue.push_back((path, depth + 1));
            }
        } else if kind.is_file() && !self.entry(&path, WalkEntryKind::File) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// A root that is not a directory (or is a symlink while not following) gives an empty
/// outcome. Each directory's entries are sorted by name; only directories and files are
/// reported; symlinks count only when following and pointing at a directory.
pub(super) fn walk(root: &Path, options: WalkOptions) -> WalkResult {
    let follow = options.follow_directory_symlinks;
    let mut walk = Walk {
        options,
        result: WalkResult::default(),
        bytes: 0,
        seen: HashSet::new(),
    };
    let root_meta = if follow {
        std::fs::metadata(root)
    } else {
        std::fs::symlink_metadata(root)
    };
    let root_meta = match root_meta {
        Ok(meta) if meta.is_dir() => meta,
        Ok(_) => return walk.result,
        Err(err) => {
            walk.error(root, &err);
            return walk.result;
        }
    };
    walk.seen.insert((root_meta.dev(), root_meta.ino()));
    let mut queue: VecDeque<(PathBuf, usize)> = VecDeque::from([(root.to_owned(), 0)]);
    let mut directories_read = 0;
    'walk: while let Some((directory, depth)) = queue.pop_front() {
        if directories_read >= options.max_directories {
            walk.result.truncated = true;
            break;
        }
        directories_read += 1;
        let children = match walk.children(&directory) {
            ControlFlow::Continue(Some(children)) => children,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Break(()) => break,
        };
        for child in children {
            if walk.visit(child, depth, &mut queue).is_break() {
                break 'walk;
            }
        }
    }
    walk.result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(depth: usize, dirs: usize, entries: usize) -> WalkOptions {
        WalkOptions {
            max_depth: depth,
            max_directories: dirs,
            max_entries: entries,
            follow_directory_symlinks: false,
            prune_hidden_directories: false,
        }
    }

    #[test]
    fn limits_are_checked_as_the_reference_does() {
        assert_eq!(
            validate(&options(0, 1, 1)).unwrap_err().to_string(),
            "filesystem walk limits must be greater than zero"
        );
        assert_eq!(
            validate(&options(65, 1, 1)).unwrap_err().to_string(),
            "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"
        );
        assert!(validate(&options(64, 10_000, 50_000)).is_ok());
    }
}
