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

/// The protected paths that live sandboxes mount read-only (placeholders and existing ones).
///
/// Invariants, all under its one lock: a path is inspected, created as a placeholder, taken,
/// let go and removed only while the lock is held, so a launch never inspects or mounts a
/// placeholder that another launch's exit is removing; an entry with `count == 0` is a
/// removal under way (decided outside the lock, since it scans every mount namespace), which
/// goes ahead only if no launch took the path meanwhile (`generation` unchanged).
#[derive(Default)]
struct Registry {
    held: HashMap<PathBuf, Held>,
    generations: u64,
}

struct Held {
    count: usize,
    /// Bumped by every launch that takes the path.
    generation: u64,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> std::sync::MutexGuard<'static, Option<Registry>> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Registry {
    fn take(&mut self, path: &Path) {
        self.generations += 1;
        let generation = self.generations;
        self.held
            .entry(path.to_path_buf())
            .and_modify(|held| {
                held.count += 1;
                held.generation = generation;
            })
            .or_insert(Held {
                count: 1,
                generation,
            });
    }

    /// Whether a live sandbox mounts `path`.
    fn holds(&self, path: &Path) -> bool {
        self.held.get(path).is_some_and(|held| held.count > 0)
    }
}

/// Protected paths held by one sandboxed launch; let go on drop.
#[derive(Debug, Default)]
pub struct Leases {
    paths: Vec<PathBuf>,
    /// Some of them were placeholders when taken (the launch's exit then waits for its tree to
    /// be gone before letting go, so that they can be removed at once).
    placeholders: bool,
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
    let mut guard = registry();
    let registry = guard.get_or_insert_with(Registry::default);
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
            match inspect(&dir, name, &path)? {
                Found::Existing { stat, placeholder } => {
                    if *name == ".git" && kind(&stat) == libc::S_IFREG {
                        added.extend(gitdirs(root, &path));
                    }
                    leases.placeholders |= placeholder;
                }
                Found::Created => leases.placeholders = true,
                Found::ReadOnly => continue,
            }
            registry.take(&path);
            leases.paths.push(path.clone());
            added.push(path);
        }
    }
    drop(guard);
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

/// What a protected name of a write root is, once inspected.
enum Found {
    /// A file or directory: the user's, another sandbox's placeholder, or one a killed daemon
    /// left.
    Existing {
        stat: nix::sys::stat::FileStat,
        placeholder: bool,
    },
    /// A placeholder this launch created.
    Created,
    /// Missing, on a read-only file system, where nothing can be created anyway.
    ReadOnly,
}

/// How often a name that appears or vanishes while it is inspected (the host may create or
/// remove it at any time) is inspected again.
const INSPECTIONS: usize = 3;

/// Inspects the name `name` of the root `dir` (`path` for short), creating a placeholder where
/// it is missing, with the registry's lock held.
fn inspect(dir: &OwnedFd, name: &str, path: &Path) -> Result<Found, RpcError> {
    let mut last = Errno::ENOENT;
    for _ in 0..INSPECTIONS {
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if kind(&stat) == libc::S_IFLNK => {
                return Err(RpcError::invalid_params(format!(
                    "protected path `{}` is a symbolic link; the sandbox cannot keep it \
                     read-only",
                    path.display()
                )))
            }
            Ok(stat) => {
                let placeholder = kind(&stat) == libc::S_IFDIR && is_marked(path);
                return Ok(Found::Existing { stat, placeholder });
            }
            Err(Errno::ENOENT) => {}
            Err(err) => {
                return Err(RpcError::invalid_params(format!(
                    "protected path `{}` cannot be inspected: {}",
                    path.display(),
                    std::io::Error::from(err)
                )))
            }
        }
        match mkdirat(dir, name, Mode::from_bits_truncate(0o777)) {
            Ok(()) => {}
            Err(Errno::EROFS) => return Ok(Found::ReadOnly),
            // Created on the host meanwhile: inspect it.
            Err(Errno::EEXIST) => {
                last = Errno::EEXIST;
                continue;
            }
            Err(err) => {
                return Err(RpcError::invalid_params(format!(
                    "cannot create the placeholder protecting `{}`: {}",
                    path.display(),
                    std::io::Error::from(err)
                )))
            }
        }
        match mark(dir, name) {
            Ok(()) => return Ok(Found::Created),
            // Removed or replaced on the host meanwhile: inspect it again.
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => last = Errno::ENOENT,
            Err(err) => {
                let _ = unlinkat(dir, name, UnlinkatFlags::RemoveDir);
                return Err(RpcError::invalid_params(format!(
                    "cannot mark the placeholder protecting `{}`: {err}",
                    path.display()
                )));
            }
        }
    }
    Err(RpcError::invalid_params(format!(
        "protected path `{}` kept changing while the sandbox inspected it: {}",
        path.display(),
        std::io::Error::from(last)
    )))
}

impl Leases {
    pub fn holds_placeholders(&self) -> bool {
        self.placeholders
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        let mut unused = Vec::new();
        {
            let mut guard = registry();
            let registry = guard.get_or_insert_with(Registry::default);
            for path in self.paths.drain(..) {
                if let Some(held) = registry.held.get_mut(&path) {
                    held.count -= 1;
                    if held.count == 0 {
                        unused.push((path, held.generation));
                    }
                }
            }
        }
        unused.retain(|(path, generation)| !try_remove(path, *generation));
        if !unused.is_empty() {
            std::thread::spawn(move || retry_removal(unused));
        }
    }
}

fn retry_removal(mut busy: Vec<(PathBuf, u64)>) {
    while !busy.is_empty() {
        std::thread::sleep(RETRY);
        busy.retain(|(path, generation)| !try_remove(path, *generation));
    }
}

/// Removes a placeholder no launch holds any more (`generation`: when it was last taken);
/// false while some mount namespace still mounts on it. A name that is no placeholder (it
/// existed before, or a client's `fs/createDirectory` claimed it) is only forgotten.
fn try_remove(path: &Path, generation: u64) -> bool {
    // Scanning every namespace takes a while: outside the lock, and checked again inside.
    if is_marked(path) && mounted_anywhere(path) {
        return false;
    }
    let mut guard = registry();
    let registry = guard.get_or_insert_with(Registry::default);
    if registry
        .held
        .get(path)
        .is_some_and(|held| held.count == 0 && held.generation == generation)
    {
        registry.held.remove(path);
        if is_marked(path) {
            // Fails (and leaves it) when someone outside put files into it meanwhile.
            let _ = std::fs::remove_dir(path);
        }
    }
    // Otherwise a launch took it meanwhile: whoever lets go of it last removes it.
    true
}

/// For the daemon's own `fs/*` calls that create `path`: a placeholder there becomes the
/// client's directory, kept when the sandboxes that protect it end.
pub fn claim(path: &Path) {
    let Some(path) = protected_name(path) else {
        return;
    };
    let guard = registry();
    // None in a sandbox helper, whose fs operation may not change the mark anyway.
    if guard.is_some() && is_marked(&path) {
        if let (Ok(path), Ok(mark)) = (cstring(&path), std::ffi::CString::new(MARK)) {
            // SAFETY: valid NUL-terminated strings.
            unsafe { libc::lremovexattr(path.as_ptr(), mark.as_ptr()) };
        }
    }
}

/// The daemon's own `fs/remove` of `path`, which `remove` carries out. A protected name that
/// live sandboxes mount read-only must not be unlinked on the host, which would silently lift
/// their protection (the kernel detaches mounts on a dentry removed in another namespace): its
/// contents go and the directory itself stays as a placeholder, removed when the last of them
/// ends (`held` maps the error of that). Any other protected name is removed under the lock, so
/// that no launch inspects it meanwhile.
pub fn remove_with<E>(
    path: &Path,
    remove: impl FnOnce() -> Result<(), E>,
    held: impl FnOnce(std::io::Error) -> E,
) -> Result<(), E> {
    let Some(canonical) = protected_name(path) else {
        return remove();
    };
    let guard = registry();
    if guard
        .as_ref()
        .is_some_and(|registry| registry.holds(&canonical))
    {
        return empty_into_placeholder(&canonical).map_err(held);
    }
    remove()
}

/// The daemon's own `fs/rename` of `source` to `destination`, which `rename` carries out,
/// under the lock when either is a protected name; Err(the held path) when live sandboxes
/// mount either (a rename of it or over it would lift that).
pub fn rename_with<T>(
    source: &Path,
    destination: &Path,
    rename: impl FnOnce() -> T,
) -> Result<T, PathBuf> {
    let names: Vec<PathBuf> = [source, destination]
        .into_iter()
        .filter_map(protected_name)
        .collect();
    if names.is_empty() {
        return Ok(rename());
    }
    let guard = registry();
    if let Some(registry) = guard.as_ref() {
        if let Some(held) = names.into_iter().find(|name| registry.holds(name)) {
            return Err(held);
        }
    }
    Ok(rename())
}

/// Removes what `path` holds and marks it a placeholder (the registry's lock held).
fn empty_into_placeholder(path: &Path) -> std::io::Result<()> {
    if !std::fs::symlink_metadata(path)?.is_dir() {
        return Err(std::io::Error::other(format!(
            "`{}` is kept read-only by running sandboxed processes; it can be removed once \
             they exit",
            path.display()
        )));
    }
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        // Neither follows a symbolic link.
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    mark(&super::mounts::open_nofollow(parent)?, name)
}

/// Whether `path` is a placeholder that a live sandbox holds: an artifact of the daemon, which
/// its listings leave out.
pub fn is_placeholder(path: &Path) -> bool {
    protected_name(path).is_some_and(|canonical| {
        registry()
            .as_ref()
            .is_some_and(|registry| registry.holds(&canonical))
            && is_marked(&canonical)
    })
}

/// `path` with its directory canonicalized, if its name is a protected one.
fn protected_name(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    if !NAMES.iter().any(|protected| name == *protected) {
        return None;
    }
    Some(std::fs::canonicalize(path.parent()?).ok()?.join(name))
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
