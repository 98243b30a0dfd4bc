//! Protection of the daemon's own state from sandboxed writes.
//!
//! The daemon's binary (captured at startup from `/proc/self/exe`) must never be reachable for
//! writing from a sandbox: a sandboxed process that rewrites it would run unsandboxed at the
//! next sandbox launch or daemon restart. A write root is refused when
//! 1. its canonical path contains the binary's canonical path;
//! 2. it is the same directory (device and inode) as one of the binary's ancestors, i.e. an
//!    alias by bind mount;
//! 3. on the same device, its path inside the file system (mount root + path below the mount
//!    point, from `/proc/self/mountinfo`) contains the binary's, so a bind mount in either
//!    direction cannot hide the overlap;
//! 4. the binary has other hard links and one of them is inside the root. The search is
//!    bounded by [`MAX_LINK_SCAN`] entries; a root too large to search is refused.
//!
//! The daemon has no runtime or state directories of its own; [`Guard::protected`] is the list
//! to extend if it gets some. Unrestricted file systems are not guarded: the client asked for
//! no file-system sandbox at all.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Directory entries the hard-link search may visit per write root.
pub const MAX_LINK_SCAN: usize = 200_000;

struct Protected {
    /// What it is, for messages.
    what: &'static str,
    path: PathBuf,
    dev: u64,
    ino: u64,
    nlink: u64,
    /// (device, inode) of every ancestor directory, nearest first.
    ancestors: Vec<(u64, u64)>,
}

pub struct Guard {
    protected: Vec<Protected>,
}

static GUARD: OnceLock<Guard> = OnceLock::new();

/// Captures the daemon's identity; call once at startup, before anything could replace it.
pub fn init() -> &'static Guard {
    GUARD.get_or_init(|| Guard {
        protected: daemon_binary().into_iter().collect(),
    })
}

fn daemon_binary() -> Option<Protected> {
    let meta = std::fs::metadata("/proc/self/exe").ok()?;
    let path = std::fs::read_link("/proc/self/exe").ok()?;
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let ancestors = path
        .ancestors()
        .skip(1)
        .filter_map(|dir| std::fs::metadata(dir).ok())
        .map(|meta| (meta.dev(), meta.ino()))
        .collect();
    Some(Protected {
        what: "the exec-server binary",
        path,
        dev: meta.dev(),
        ino: meta.ino(),
        nlink: meta.nlink(),
        ancestors,
    })
}

impl Guard {
    /// The daemon binary's canonical path, if it could be determined.
    pub fn binary(&self) -> Option<&Path> {
        self.protected.first().map(|item| item.path.as_path())
    }

    /// Whether [`Guard::check_write_root`] may search a root for hard links to the binary.
    pub fn searches_for_links(&self) -> bool {
        self.protected.iter().any(|item| item.nlink > 1)
    }

    /// Err(reason) when a write grant on the canonical directory or file `root` would expose
    /// the daemon's state.
    pub fn check_write_root(&self, root: &Path) -> Result<(), String> {
        let meta = std::fs::metadata(root)
            .map_err(|err| format!("write root `{}` cannot be inspected: {err}", root.display()))?;
        let mounts = Mounts::read();
        for item in &self.protected {
            let refuse = |how: String| {
                Err(format!(
                    "sandbox write grant `{}` would expose {} `{}` ({how}); refusing it",
                    root.display(),
                    item.what,
                    item.path.display()
                ))
            };
            if item.path.starts_with(root) {
                return refuse("it lies inside the grant".into());
            }
            if meta.dev() == item.dev && meta.ino() == item.ino {
                return refuse("the grant is the same file".into());
            }
            if item.ancestors.contains(&(meta.dev(), meta.ino())) {
                return refuse("the grant is an alias of one of its directories".into());
            }
            if meta.dev() == item.dev {
                if let (Some(grant), Some(target)) =
                    (mounts.fs_path(root), mounts.fs_path(&item.path))
                {
                    if target.starts_with(&grant) {
                        return refuse("a bind mount makes it reachable inside the grant".into());
                    }
                }
                if item.nlink > 1 && meta.is_dir() {
                    match find_inode(root, item.dev, item.ino) {
                        Ok(None) => {}
                        Ok(Some(link)) => {
                            return refuse(format!("`{}` is a hard link to it", link.display()))
                        }
                        Err(err) => return refuse(err),
                    }
                }
            }
        }
        Ok(())
    }
}

/// Searches `root` (same device only, no symlinks followed) for a file with this inode.
fn find_inode(root: &Path, dev: u64, ino: u64) -> Result<Option<PathBuf>, String> {
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > MAX_LINK_SCAN {
                return Err(format!(
                    "it has other hard links and the grant has more than {MAX_LINK_SCAN} entries \
                     to search for them"
                ));
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.dev() != dev {
                continue;
            }
            if meta.ino() == ino {
                return Ok(Some(entry.path()));
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(None)
}

/// The mount table, to map a path to its path inside its file system.
struct Mounts {
    /// (mount point, root inside the file system), in table order (later ones are on top).
    entries: Vec<(PathBuf, PathBuf)>,
}

impl Mounts {
    fn read() -> Self {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let entries = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let root = fields.nth(3)?;
                let point = fields.next()?;
                Some((
                    PathBuf::from(unescape(point)),
                    PathBuf::from(unescape(root)),
                ))
            })
            .collect();
        Self { entries }
    }

    fn fs_path(&self, path: &Path) -> Option<PathBuf> {
        let (point, root) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, (point, _))| path.starts_with(point))
            .max_by_key(|(index, (point, _))| (point.components().count(), *index))
            .map(|(_, entry)| entry)?;
        Some(root.join(path.strip_prefix(point).ok()?))
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space...).
pub fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\' && index + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[index + 1..index + 4]).ok();
            if let Some(value) = digits.and_then(|d| u8::from_str_radix(d, 8).ok()) {
                out.push(value);
                index += 4;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_the_binary_directory_and_hard_links_but_not_disjoint_roots() {
        let guard = init();
        let exe = &guard.protected[0].path;
        let err = guard.check_write_root(exe.parent().unwrap()).unwrap_err();
        assert!(err.contains("inside the grant"), "{err}");
        assert!(guard.check_write_root(Path::new("/")).is_err());
        let disjoint = tempfile::tempdir().unwrap();
        guard.check_write_root(disjoint.path()).unwrap();
    }

    #[test]
    fn finds_hard_links_by_inode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/file"), "x").unwrap();
        let meta = std::fs::metadata(dir.path().join("d/file")).unwrap();
        let found = find_inode(dir.path(), meta.dev(), meta.ino()).unwrap();
        assert_eq!(found, Some(dir.path().join("d/file")));
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
