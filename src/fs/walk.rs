//! `fs/walk`: a bounded breadth-first listing of a tree.

use super::FsError;
use exec_server_protocol::fs::{WalkEntry, WalkEntryKind, WalkError, WalkOptions, WalkResult};
use exec_server_protocol::PathUri;
use std::collections::{HashSet, VecDeque};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

pub(super) const MAX_DEPTH: usize = 64;
pub(super) const MAX_DIRECTORIES: usize = 10_000;
pub(super) const MAX_ENTRIES: usize = 50_000;
/// Budget for the response: each item costs its strings plus this overhead.
pub(super) const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
const ITEM_OVERHEAD: usize = 64;

/// Upstream's checks, before the root is looked at: `maxDepth` 0 is valid (the root's own
/// entries only).
pub(super) fn validate(options: &WalkOptions) -> Result<(), FsError> {
    let WalkOptions {
        max_depth,
        max_directories,
        max_entries,
        ..
    } = *options;
    if max_directories == 0 || max_entries == 0 {
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
    /// Identities of the directories entered or queued: the canonical path when following
    /// symlinks, else the path itself.
    visited: HashSet<PathBuf>,
    /// Directories entered or queued, the root included.
    directories: usize,
    /// Names listed so far, whether reported or skipped.
    listed: usize,
    queue: VecDeque<(PathBuf, usize)>,
}

impl Walk {
    /// Adds an item's cost; false (and truncated) once the reply budget is spent.
    fn admit(&mut self, path: &PathUri, message: &str) -> bool {
        let cost = ITEM_OVERHEAD + path.as_str().len() + message.len();
        if self.bytes + cost > MAX_RESPONSE_BYTES {
            self.result.truncated = true;
            return false;
        }
        self.bytes += cost;
        true
    }

    fn error(&mut self, path: &Path, err: &std::io::Error) -> ControlFlow<()> {
        let Ok(path) = PathUri::from_path(path) else {
            return ControlFlow::Continue(());
        };
        let message = err.to_string();
        if !self.admit(&path, &message) {
            return ControlFlow::Break(());
        }
        self.result.errors.push(WalkError { path, message });
        ControlFlow::Continue(())
    }

    /// The names in `directory` as upstream's listing gives them: lossy UTF-8, dangling
    /// symlinks left out, sorted.
    fn names(directory: &Path) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(directory)? {
            let entry = entry?;
            let dangling =
                entry.file_type()?.is_symlink() && std::fs::metadata(entry.path()).is_err();
            if !dangling {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Lists one directory found at `depth` (the root's entries are depth 0).
    fn list(&mut self, directory: &Path, depth: usize) -> ControlFlow<()> {
        let names = match Self::names(directory) {
            Ok(names) => names,
            Err(err) => return self.error(directory, &err),
        };
        for name in names {
            if self.listed == self.options.max_entries {
                self.result.truncated = true;
                return ControlFlow::Break(());
            }
            self.listed += 1;
            self.visit(directory.join(&name), &name, depth)?;
        }
        ControlFlow::Continue(())
    }

    /// Reports one listed name, and queues it when it is a directory to enter.
    fn visit(&mut self, path: PathBuf, name: &str, depth: usize) -> ControlFlow<()> {
        let follow = self.options.follow_directory_symlinks;
        // A name that is not UTF-8 was made lossy, so it fails here, as upstream reports it.
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(err) => return self.error(&path, &err),
        };
        let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        if link && (!follow || !meta.is_dir()) {
            return ControlFlow::Continue(());
        }
        let kind = if meta.is_dir() {
            WalkEntryKind::Directory
        } else if meta.is_file() {
            WalkEntryKind::File
        } else {
            return ControlFlow::Continue(());
        };
        let Ok(uri) = PathUri::from_path(&path) else {
            return ControlFlow::Continue(());
        };
        if !self.admit(&uri, "") {
            return ControlFlow::Break(());
        }
        self.result.entries.push(WalkEntry { path: uri, kind });
        let prune = self.options.prune_hidden_directories && name.starts_with('.');
        if kind != WalkEntryKind::Directory || depth >= self.options.max_depth || prune {
            return ControlFlow::Continue(());
        }
        // A pruned hidden directory claims no identity: a visible alias of it is still walked.
        let identity = if follow {
            match std::fs::canonicalize(&path) {
                Ok(canonical) => canonical,
                Err(err) => return self.error(&path, &err),
            }
        } else {
            path.clone()
        };
        if !self.visited.insert(identity) {
            return ControlFlow::Continue(());
        }
        if self.directories == self.options.max_directories {
            self.result.truncated = true;
        } else {
            self.directories += 1;
            self.queue.push_back((path, depth + 1));
        }
        ControlFlow::Continue(())
    }
}

/// Upstream's walk: breadth first, each directory's names sorted; a missing or unreadable
/// root fails the call; a root that is not a directory (or is a symlink while not following)
/// gives an empty outcome; only directories and files are reported, symlinks only when
/// following and pointing at a directory; a directory already visited under another name
/// is listed but not entered.
pub(super) fn walk(root: &Path, options: WalkOptions) -> Result<WalkResult, FsError> {
    let follow = options.follow_directory_symlinks;
    let meta = std::fs::metadata(root).map_err(|err| FsError::io(err, root))?;
    let link = std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink());
    if !meta.is_dir() || (link && !follow) {
        return Ok(WalkResult::default());
    }
    let identity = if follow {
        std::fs::canonicalize(root).map_err(|err| FsError::io(err, root))?
    } else {
        root.to_owned()
    };
    let mut walk = Walk {
        options,
        result: WalkResult::default(),
        bytes: 0,
        visited: HashSet::from([identity]),
        directories: 1,
        listed: 0,
        queue: VecDeque::from([(root.to_owned(), 0)]),
    };
    while let Some((directory, depth)) = walk.queue.pop_front() {
        if walk.list(&directory, depth).is_break() {
            break;
        }
    }
    Ok(walk.result)
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
            validate(&options(1, 0, 1)).unwrap_err().to_string(),
            "filesystem walk limits must be greater than zero"
        );
        assert!(validate(&options(0, 1, 1)).is_ok());
        assert_eq!(
            validate(&options(65, 1, 1)).unwrap_err().to_string(),
            "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"
        );
        assert!(validate(&options(64, 10_000, 50_000)).is_ok());
    }
}
