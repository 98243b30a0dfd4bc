//! Protected subpaths of writable roots: repository and agent metadata a sandboxed process must
//! not change, because tools outside the sandbox later trust it (git hooks and config, agent
//! instructions, editor tasks).
//!
//! For every write root `W` and every name in [`NAMES`] that has no explicit rule of its own:
//! * an existing directory or file `W/name` becomes a read rule, i.e. a read-only bind mount;
//!   for a `.git` file (worktree, submodule) the `gitdir:` it points to, and that gitdir's
//!   `commondir`, are protected too when they are writable;
//! * a symbolic link there fails the request: it could be replaced, and protecting its target
//!   would not protect the name;
//! * a missing name gets a placeholder: the daemon creates an empty directory, marks it with
//!   the `trusted.` extended attribute [`MARK`] (only a privileged process can set or remove
//!   it), and the sandbox bind-mounts it read-only over itself, so the name can be neither
//!   created nor replaced (mkdir: EEXIST, writes: EROFS, rename or rmdir of a mount point:
//!   EBUSY). After the process exits the daemon removes the placeholder, but only once no mount
//!   namespace still has a mount on it (removing a mount point from outside would silently
//!   detach it inside a namespace where an escaped background process still runs), and only
//!   if it is still an empty marked directory. Placeholders are shared and reference counted
//!   between concurrent sandboxes; a marked directory left behind by a killed daemon is adopted
//!   and removed by the next sandbox that uses it. While a sandbox runs, the empty placeholder
//!   is visible on the host (git skips an empty `.git` directory and keeps searching upward).

use super::policy::{effective, Rule};
use crate::path::cstring;
use crate::rpc::RpcError;
use exec_server_protocol::sandbox::FsAccess;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Names protected under every writable root.
pub const NAMES: &[&str] = &[".git", ".codex", ".agents", ".vscode"];

/// Extended attribute marking a placeholder the daemon created.
pub const MARK: &str = "trusted.exec-server.placeholder";

/// How often a placeholder still mounted in some namespace is retried.
const RETRY: Duration = Duration::from_millis(500);

static REGISTRY: Mutex<Option<HashMap<PathBuf, usize>>> = Mutex::new(None);

/// Placeholders held by one sandboxed launch; released on drop.
#[derive(Debug, Default)]
pub struct Leases {
    paths: Vec<PathBuf>,
}

/// Adds read rules for the protected subpaths of every write rule.
pub fn protect(rules: &mut Vec<Rule>) -> Result<Leases, RpcError> {
    let explicit: HashSet<PathBuf> = rules.iter().map(|rule| rule.path.clone()).collect();
    let roots: Vec<PathBuf> = rules
        .iter()
        .filter(|rule| rule.access == FsAccess::Write && rule.path.is_dir())
        .map(|rule| rule.path.clone())
        .collect();
    let mut leases = Leases::default();
    let mut added = Vec::new();
    for root in &roots {
        // Inspected and changed through a descriptor opened without following links, so a
        // root replaced by a link meanwhile cannot make the daemon create a placeholder (or
        // inspect a name) somewhere else; the helper checks the root's identity again.
        let dir = super::mounts::open_nofollow(root).map_err(|source| RootError {
            root: root.clone(),
            source,
        })?;
        for name in NAMES {
            let path = root.join(name);
            if explicit.contains(&path) || added.contains(&path) {
                continue;
            }
            match fstatat(&dir, *name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) if kind(&stat) == libc::S_IFLNK => {
                    return Err(RpcError::invalid_params(format!(
                        "protected path `{}` is a symbolic link; the sandbox cannot keep it \
                         read-only",
                        path.display()
                    )))
                }
                // Another sandbox's placeholder (or one a killed daemon left): share it.
                Ok(stat) if kind(&stat) == libc::S_IFDIR && is_marked(&path) => {
                    if leases.acquire(&dir, name, &path)? {
                        added.push(path);
                    }
                }
                Ok(stat) => {
                    if *name == ".git" && kind(&stat) == libc::S_IFREG {
                        added.extend(gitdirs(root, &path));
                    }
                    added.push(path);
                }
                Err(Errno::ENOENT) => {
                    if leases.acquire(&dir, name, &path)? {
                        added.push(path);
                    }
                }
                Err(err) => {
                    return Err(RpcError::invalid_params(format!(
                        "protected path `{}` cannot be inspected: {}",
                        path.display(),
                        std::io::Error::from(err)
                    )))
                }
            }
        }
    }
    for path in added {
        if effective(rules, &path) == Some(FsAccess::Write) {
            rules.push(Rule {
                path,
                access: FsAccess::Read,
            });
        }
    }
    Ok(leases)
}

/// A write root that could not be opened to protect the names in it.
#[derive(Debug, thiserror::Error)]
#[error("write root `{}` cannot be opened to protect its metadata: {source}", root.display())]
struct RootError {
    root: PathBuf,
    source: std::io::Error,
}

impl From<RootError> for RpcError {
    fn from(err: RootError) -> Self {
        RpcError::invalid_params(err.to_string())
    }
}

fn kind(stat: &nix::sys::stat::FileStat) -> libc::mode_t {
    stat.st_mode & libc::S_IFMT
}

/// The directories a `.git` file points to (its `gitdir:` and that gitdir's `commondir`).
fn gitdirs(root: &Path, git_file: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Some(gitdir) = pointer(git_file, "gitdir:", root) else {
        return found;
    };
    if let Some(common) = pointer(&gitdir.join("commondir"), "", &gitdir) {
        found.push(common);
    }
    found.push(gitdir);
    found
}

fn pointer(file: &Path, prefix: &str, base: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let target = text.lines().next()?.strip_prefix(prefix)?.trim();
    std::fs::canonicalize(base.join(target)).ok()
}

impl Leases {
    /// Creates (or shares, or adopts) the placeholder `name` in the root `dir`, `path` for
    /// short. Ok(false) when the root is on a read-only file system, where nothing can be
    /// created anyway.
    fn acquire(&mut self, dir: &OwnedFd, name: &str, path: &Path) -> Result<bool, RpcError> {
        let mut registry = REGISTRY.lock().unwrap();
        let counts = registry.get_or_insert_with(HashMap::new);
        if let Some(count) = counts.get_mut(path) {
            *count += 1;
            self.paths.push(path.to_path_buf());
            return Ok(true);
        }
        match mkdirat(dir, name, Mode::from_bits_truncate(0o777)) {
            Ok(()) => {}
            Err(Errno::EROFS) => return Ok(false),
            Err(Errno::EEXIST) if is_marked(path) => {}
            Err(err) => {
                return Err(RpcError::invalid_params(format!(
                    "cannot create the placeholder protecting `{}`: {}",
                    path.display(),
                    std::io::Error::from(err)
                )))
            }
        }
        if let Err(err) = mark(dir, name) {
            let _ = unlinkat(dir, name, UnlinkatFlags::RemoveDir);
            return Err(RpcError::invalid_params(format!(
                "cannot mark the placeholder protecting `{}`: {err}",
                path.display()
            )));
        }
        counts.insert(path.to_path_buf(), 1);
        self.paths.push(path.to_path_buf());
        Ok(true)
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        let mut unused = Vec::new();
        {
            let mut registry = REGISTRY.lock().unwrap();
            let counts = registry.get_or_insert_with(HashMap::new);
            for path in self.paths.drain(..) {
                if let Some(count) = counts.get_mut(&path) {
                    *count -= 1;
                    if *count == 0 {
                        counts.remove(&path);
                        unused.push(path);
                    }
                }
            }
        }
        let busy: Vec<PathBuf> = unused.into_iter().filter(|p| !try_remove(p)).collect();
        if !busy.is_empty() {
            std::thread::spawn(move || retry_removal(busy));
        }
    }
}

fn retry_removal(mut busy: Vec<PathBuf>) {
    while !busy.is_empty() {
        std::thread::sleep(RETRY);
        busy.retain(|path| {
            let registry = REGISTRY.lock().unwrap();
            // Reacquired meanwhile: the new holder removes it later.
            if registry
                .as_ref()
                .is_some_and(|counts| counts.contains_key(path))
            {
                return false;
            }
            drop(registry);
            !try_remove(path)
        });
    }
}

/// Removes an unused placeholder; false while some mount namespace still mounts on it.
fn try_remove(path: &Path) -> bool {
    if mounted_anywhere(path) {
        return false;
    }
    if is_marked(path) {
        // Fails (and leaves it) when someone outside put files into it meanwhile.
        let _ = std::fs::remove_dir(path);
    }
    true
}

/// Marks the directory `name` in `dir`, opened without following a link.
fn mark(dir: &OwnedFd, name: &str) -> std::io::Result<()> {
    let placeholder = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mark = std::ffi::CString::new(MARK).expect("no NUL");
    // SAFETY: a valid fd and NUL-terminated name, and a one-byte value.
    let rc = unsafe {
        libc::fsetxattr(
            placeholder.as_raw_fd(),
            mark.as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn is_marked(path: &Path) -> bool {
    let (Ok(path), Ok(name)) = (cstring(path), std::ffi::CString::new(MARK)) else {
        return false;
    };
    // SAFETY: valid strings; a NULL buffer of size 0 asks for the value's size only.
    unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) >= 0 }
}

/// Whether any other mount namespace has a mount on `path`.
fn mounted_anywhere(path: &Path) -> bool {
    let own = std::fs::read_link("/proc/self/ns/mnt").ok();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    let mut seen = HashSet::new();
    for entry in procs.flatten() {
        let name = entry.file_name();
        if !name.as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(ns) = std::fs::read_link(entry.path().join("ns/mnt")) else {
            continue;
        };
        if Some(&ns) == own.as_ref() || !seen.insert(ns) {
            continue;
        }
        let Ok(table) = std::fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        let mounted = table.lines().any(|line| {
            line.split(' ')
                .nth(4)
                .is_some_and(|point| Path::new(&super::guard::unescape(point)) == path)
        });
        if mounted {
            return true;
        }
    }
    false
}
