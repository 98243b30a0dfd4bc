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
//!   EBUSY). The mark's value names the daemon that last took the placeholder ([`OWNER`]):
//!   daemons sharing a write root (several on one host share `/tmp`) each remove only the
//!   placeholders they own, and one that takes another's placeholder makes it its own first,
//!   so a daemon never removes a placeholder another is about to mount.
//!   Once no sandbox has held it for [`LINGER`] the daemon removes the placeholder,
//!   but only once no mount namespace still has a mount on it (removing a mount point from outside would silently
//!   detach it inside a namespace where an escaped background process still runs), and only
//!   if it is still an empty marked directory. Placeholders are shared and reference counted
//!   between concurrent sandboxes; a marked directory left behind by a killed daemon is adopted
//!   and removed by the next sandbox that uses it. While a sandbox runs (and that moment
//!   after), the empty placeholder is visible on the host (git skips an empty `.git` directory
//!   and keeps searching upward).

mod mark;

use super::open::open_nofollow;
use super::policy::{effective, Rule};
use crate::path::cstring;
use exec_server_protocol::sandbox::FsAccess;
use mark::{is_marked, mark, marked_by_us, mounted_elsewhere};
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstatat, mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Names protected under every writable root.
pub(crate) const NAMES: &[&str] = &[".git", ".codex", ".agents", ".vscode"];

/// Extended attribute marking a placeholder the daemon created.
pub(crate) const MARK: &str = "trusted.exec-server.placeholder";

/// This daemon's value of [`MARK`]: which placeholders are its own to remove.
static OWNER: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| uuid::Uuid::new_v4().simple().to_string());

/// How long a placeholder no sandbox holds stays for the next launch that needs it: creating,
/// mounting and removing placeholders for every launch doubled a launch's cost in a
/// workspace without `.codex`, `.agents` and `.vscode`.
const LINGER: Duration = Duration::from_millis(500);

/// The protected paths that live sandboxes mount read-only (placeholders and existing ones),
/// and those no sandbox holds any more, until the reaper removes them.
///
/// Invariants, all under its one lock: a path is inspected, created as a placeholder, taken,
/// let go and removed only while the lock is held, so a launch never inspects or mounts a
/// placeholder that is being removed; an entry with `count == 0` waits for the reaper
/// ([`reap`]), whose removal (decided outside the lock, since it scans every mount namespace)
/// goes ahead only if no launch took the path meanwhile (`generation` unchanged).
#[derive(Default)]
struct Registry {
    held: HashMap<PathBuf, Held>,
    generations: u64,
    /// The reaper thread runs (it ends when no entry waits for it).
    reaping: bool,
}

struct Held {
    count: usize,
    /// Bumped by every launch that takes the path.
    generation: u64,
    /// When the last holder let go.
    unused_since: Instant,
}

static REGISTRY: std::sync::LazyLock<Mutex<Registry>> = std::sync::LazyLock::new(Default::default);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
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
                unused_since: Instant::now(),
            });
    }

    /// Whether a live sandbox mounts `path`.
    fn holds(&self, path: &Path) -> bool {
        self.held.get(path).is_some_and(|held| held.count > 0)
    }

    /// Whether some name no launch holds waits for the reaper.
    fn awaits_reaping(&self) -> bool {
        self.held.values().any(|held| held.count == 0)
    }
}

/// Protected paths held by one sandboxed launch; let go on drop (cheap: the reaper removes
/// placeholders later).
#[derive(Debug, Default)]
pub(crate) struct Leases {
    paths: Vec<PathBuf>,
}

/// Adds read rules for the protected subpaths of every write rule.
pub(crate) fn protect(rules: &mut Vec<Rule>) -> Result<Leases, ProtectError> {
    let explicit: HashSet<PathBuf> = rules.iter().map(|rule| rule.path.clone()).collect();
    let roots: Vec<PathBuf> = rules
        .iter()
        .filter(|rule| rule.access == FsAccess::Write && rule.path.is_dir())
        .map(|rule| rule.path.clone())
        .collect();
    let mut leases = Leases::default();
    let mut added = Vec::new();
    // Declared after `leases`, so dropped before it on an early return: letting go of what
    // was taken so far locks the registry again.
    let mut registry = registry();
    for root in &roots {
        // Inspected and changed through a descriptor opened without following links, so a
        // root replaced by a link meanwhile cannot make the daemon create a placeholder (or
        // inspect a name) somewhere else; the helper checks the root's identity again.
        let dir = open_nofollow(root).map_err(|source| ProtectError::OpenRoot {
            root: root.clone(),
            source,
        })?;
        for name in NAMES {
            let path = root.join(name);
            if added.contains(&path) {
                continue;
            }
            if explicit.contains(&path) {
                // A placeholder the intent names itself (`project_roots/.codex`, resolved
                // while an earlier sandbox held it) is held all the same: otherwise the reaper
                // removes it under this launch, whose start then fails.
                if is_marked(&path) {
                    registry.take(&path);
                    leases.paths.push(path);
                }
                continue;
            }
            match inspect(&dir, name, &path)? {
                Found::Existing(stat) => {
                    if *name == ".git" && kind(&stat) == libc::S_IFREG {
                        added.extend(gitdirs(root, &path));
                    }
                    // Another daemon's placeholder (or a killed one's) becomes ours before we
                    // mount it, so that its owner no longer removes it. Best effort: one
                    // vanishing meanwhile fails the mount, and the start with it.
                    if is_marked(&path) {
                        let _ = mark(&dir, name);
                    }
                }
                Found::Created => {}
                Found::ReadOnly => continue,
            }
            registry.take(&path);
            leases.paths.push(path.clone());
            added.push(path);
        }
    }
    drop(registry);
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

/// Why the protected names of a write root could not be made read-only.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProtectError {
    #[error("write root `{}` cannot be opened to protect its metadata: {source}", root.display())]
    OpenRoot {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "protected path `{}` is a symbolic link; the sandbox cannot keep it read-only",
        path.display()
    )]
    Link { path: PathBuf },
    #[error("protected path `{}` cannot be inspected: {source}", path.display())]
    Inspect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the placeholder protecting `{}`: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot mark the placeholder protecting `{}`: {source}", path.display())]
    Mark {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The name appeared or vanished at every one of the [`INSPECTIONS`]; `source`: the last
    /// reason to look again.
    #[error(
        "protected path `{}` kept changing while the sandbox inspected it: {source}",
        path.display()
    )]
    KeptChanging {
        path: PathBuf,
        source: std::io::Error,
    },
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
    Existing(nix::sys::stat::FileStat),
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
fn inspect(dir: &OwnedFd, name: &str, path: &Path) -> Result<Found, ProtectError> {
    let mut last = Errno::ENOENT;
    for _ in 0..INSPECTIONS {
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if kind(&stat) == libc::S_IFLNK => {
                return Err(ProtectError::Link {
                    path: path.to_path_buf(),
                })
            }
            Ok(stat) => return Ok(Found::Existing(stat)),
            Err(Errno::ENOENT) => {}
            Err(err) => {
                return Err(ProtectError::Inspect {
                    path: path.to_path_buf(),
                    source: err.into(),
                })
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
                return Err(ProtectError::Create {
                    path: path.to_path_buf(),
                    source: err.into(),
                })
            }
        }
        match mark(dir, name) {
            Ok(()) => return Ok(Found::Created),
            // Removed or replaced on the host meanwhile: inspect it again.
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => last = Errno::ENOENT,
            Err(source) => {
                let _ = unlinkat(dir, name, UnlinkatFlags::RemoveDir);
                return Err(ProtectError::Mark {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
    Err(ProtectError::KeptChanging {
        path: path.to_path_buf(),
        source: last.into(),
    })
}

impl Drop for Leases {
    fn drop(&mut self) {
        let mut registry = registry();
        let now = Instant::now();
        for path in self.paths.drain(..) {
            if let Some(held) = registry.held.get_mut(&path) {
                held.count -= 1;
                held.unused_since = now;
            }
        }
        if !registry.reaping && registry.awaits_reaping() {
            registry.reaping = true;
            std::thread::spawn(reap);
        }
    }
}

/// Removes the placeholders no launch has held for [`LINGER`], once no mount namespace mounts
/// them any more (a background process that outlived its sandbox's leader keeps them), and
/// forgets the other names no launch holds; ends when no entry is left to wait for.
fn reap() {
    loop {
        std::thread::sleep(LINGER / 2);
        {
            let mut registry = registry();
            if !registry.awaits_reaping() {
                registry.reaping = false;
                return;
            }
        }
        reap_idle_for(LINGER);
    }
}

/// At shutdown, once the daemon's trees are gone: removes every placeholder no launch holds
/// without waiting for [`LINGER`], so that a stopped daemon leaves none in a workspace. One
/// still mounted in a namespace that is going away (a sandbox's, dropped on a blocking thread
/// after its exit; an fs helper's being retired) is looked at again until it is not, for at
/// most [`RELEASE_WAIT`]: a single look left them behind now and then.
pub(crate) async fn release_placeholders() {
    let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
    loop {
        reap_idle_for(Duration::ZERO);
        if !registry().awaits_reaping() || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long a stopping daemon waits for the namespaces that still mount a placeholder to go.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// One round of [`reap`]: the names no launch has held for `idle`.
fn reap_idle_for(idle: Duration) {
    let candidates: Vec<(PathBuf, u64)> = registry()
        .held
        .iter()
        .filter(|(_, held)| held.count == 0 && held.unused_since.elapsed() >= idle)
        .map(|(path, held)| (path.clone(), held.generation))
        .collect();
    if candidates.is_empty() {
        return;
    }
    // One scan of every namespace for all of them, outside the lock.
    let placeholders: Vec<&Path> = candidates
        .iter()
        .map(|(path, _)| path.as_path())
        .filter(|path| marked_by_us(path))
        .collect();
    let mounted = mounted_elsewhere(&placeholders);
    let mut registry = registry();
    for (path, generation) in &candidates {
        let unchanged = registry
            .held
            .get(path)
            .is_some_and(|held| held.count == 0 && held.generation == *generation);
        // Taken again meanwhile, or still mounted: the next round looks again.
        if !unchanged || mounted.contains(path.as_path()) {
            continue;
        }
        registry.held.remove(path);
        if marked_by_us(path) {
            // Fails (and leaves it) when someone outside put files into it meanwhile.
            let _ = std::fs::remove_dir(path);
        }
    }
}

/// For the daemon's own `fs/*` calls that create `path`: a placeholder there becomes the
/// client's directory, kept when the sandboxes that protect it end.
pub(crate) fn claim(path: &Path) {
    let Some(path) = protected_name(path) else {
        return;
    };
    // Under the lock, so that no launch inspects the name meanwhile. (A sandbox helper's fs
    // operation may not remove the mark: it is a trusted attribute.)
    let _registry = registry();
    if is_marked(&path) {
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
pub(crate) fn remove_with<E>(
    path: &Path,
    remove: impl FnOnce() -> Result<(), E>,
    held: impl FnOnce(std::io::Error) -> E,
) -> Result<(), E> {
    let Some(canonical) = protected_name(path) else {
        return remove();
    };
    let registry = registry();
    if registry.holds(&canonical) {
        return empty_into_placeholder(&canonical).map_err(held);
    }
    remove()
}

/// The daemon's own `fs/rename` of `source` to `destination`, which `rename` carries out,
/// under the lock when either is a protected name; Err(the held path) when live sandboxes
/// mount either (a rename of it or over it would lift that).
pub(crate) fn rename_with<T>(
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
    let registry = registry();
    if let Some(held) = names.into_iter().find(|name| registry.holds(name)) {
        return Err(held);
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
    mark(&open_nofollow(parent)?, name)
}

/// Whether `path` is a placeholder the daemon keeps (for live sandboxes, or for the next
/// launch a moment longer): an artifact, which its listings leave out.
pub(crate) fn is_placeholder(path: &Path) -> bool {
    protected_name(path)
        .is_some_and(|canonical| registry().held.contains_key(&canonical) && is_marked(&canonical))
}

/// `path` with its directory canonicalized, if its name is a protected one.
fn protected_name(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    if !NAMES.iter().any(|protected| name == *protected) {
        return None;
    }
    Some(std::fs::canonicalize(path.parent()?).ok()?.join(name))
}
