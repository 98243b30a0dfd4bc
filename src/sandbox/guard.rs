//! Protection of the daemon's own state from sandboxed writes.
//!
//! What the daemon and its helpers load must never be reachable for writing from a sandbox:
//! the daemon re-executes its own binary as the sandbox helper, as root with every
//! capability, so a sandboxed process that rewrites the binary, a library it maps, the
//! dynamic loader or its configuration (`/etc/ld.so.preload`!) would run unsandboxed at the
//! next launch or daemon restart. Protected ([`init`], captured at startup): the binary
//! (`/proc/self/exe`), every file mapped into the daemon (`/proc/self/maps`: the loader and
//! the shared libraries), every symbolic link on the names the loader found them by
//! (`super::loader`), and [`LOADER_CONFIG`], whether it exists or not. A write root is
//! refused when
//! 1. its canonical path contains a protected path, or lies inside one (a directory such as
//!    `/etc/ld.so.conf.d`);
//! 2. it is the same file (device and inode) as a protected one or one of its ancestors, i.e.
//!    an alias by bind mount;
//! 3. on the same device, its path inside the file system (mount root + path below the mount
//!    point, from `/proc/self/mountinfo`) contains a protected one's, or lies inside it, so a
//!    bind mount in either direction cannot hide the overlap;
//! 4. a protected file that a sandbox could write through another name has other hard links,
//!    and one of them is inside the root. The search is bounded by [`MAX_LINK_SCAN`] entries;
//!    a root too large to search is refused.
//!
//! The binary itself needs no such search, whatever its links (cargo hard-links
//! `target/release/exec-server`): the kernel refuses every write to a file that a process is
//! executing (ETXTBSY, through any of its names), and the daemon, its fork server and every
//! supervisor and helper execute it for as long as any sandboxed process lives. [`init`]
//! checks that this kernel does so, by opening the running binary for writing; where it
//! would let the write through, the binary is searched for like the libraries, which the
//! kernel does not protect that way (a write to a mapped library reaches every process
//! mapping it).
//!
//! The state directory ([`protect_state_dir`], once it is open) is protected the same way: a
//! write grant that contains it or any of its ancestors could rename one and put a directory
//! of its own at the path (the daemon holds the real one by descriptor, but a successor, the
//! masks and the operator go by the path), and one inside it could read and forge what the
//! daemon keeps. Unrestricted file systems are not guarded: the client asked for no
//! file-system sandbox at all.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Directory entries the hard-link search may visit per write root.
pub(crate) const MAX_LINK_SCAN: usize = 200_000;

/// What the dynamic loader reads before it maps anything: a write grant on one of these
/// (`/etc` included) would let a sandbox preload a library into the next helper.
pub(crate) const LOADER_CONFIG: &[&str] = &[
    "/etc/ld.so.preload",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
];

const BINARY: &str = "the exec-server binary";

struct Protected {
    /// What it is, for messages.
    what: &'static str,
    /// Canonical; for a missing file, its canonical directory joined with its name.
    path: PathBuf,
    /// (device, inode); None while it does not exist.
    id: Option<(u64, u64)>,
    /// Its device, or its directory's while it does not exist.
    dev: u64,
    /// A regular file with other hard links that a sandbox could write through.
    linked: bool,
    /// (device, inode) of every ancestor directory, nearest first.
    ancestors: Vec<(u64, u64)>,
}

pub struct Guard {
    protected: Vec<Protected>,
    /// What the operator should know, logged once logging is set up ([`Guard::warn`]).
    warnings: Vec<String>,
}

static GUARD: OnceLock<Guard> = OnceLock::new();
static STATE_DIR: OnceLock<Protected> = OnceLock::new();

/// Protects the state directory `path` from write grants, from now on.
pub(crate) fn protect_state_dir(path: &Path) {
    if let Some(state) = protected("the daemon's state directory", path) {
        let _ = STATE_DIR.set(state);
    }
}

/// Captures what the daemon loads; call once at startup, before anything could replace it.
pub fn init() -> &'static Guard {
    GUARD.get_or_init(|| {
        let mut binary = std::fs::read_link("/proc/self/exe")
            .ok()
            .and_then(|path| protected(BINARY, &path));
        let mut warnings = Vec::new();
        if let Some(binary) = binary.as_mut().filter(|binary| binary.linked) {
            binary.linked = !running_binary_is_write_protected();
            if binary.linked {
                warnings.push(
                    "this kernel lets the running exec-server binary be opened for writing; \
                     every sandboxed write root is searched for hard links to it"
                        .to_owned(),
                );
            }
        }
        warnings.extend(
            binary
                .as_ref()
                .and_then(|binary| writable_by_others(&binary.path)),
        );
        let config = LOADER_CONFIG
            .iter()
            .filter_map(|path| protected("the dynamic loader's configuration", Path::new(path)));
        let mapped: Vec<Protected> = mapped_files()
            .into_iter()
            .filter(|path| binary.as_ref().is_none_or(|binary| binary.path != *path))
            .filter_map(|path| protected("a file the daemon and its helpers load", &path))
            .collect();
        // A link replaced on the way to the loader or a library swaps what the next helper
        // loads as surely as the file itself.
        let links = super::loader::links()
            .into_iter()
            .filter_map(|link| protected_link("a link on the loader's path", &link));
        Guard {
            protected: binary
                .into_iter()
                .chain(config)
                .chain(mapped)
                .chain(links)
                .chain(kernel_helper_programs())
                .collect(),
            warnings,
        }
    })
}

/// The programs the kernel runs as root outside every sandbox when any process triggers them
/// (`super::kernel_helpers`), and what the module loader reads: a write grant that
/// reached one would let a sandbox have the kernel run its code (a replaced `modprobe`, an
/// `install` line, a module).
fn kernel_helper_programs() -> Vec<Protected> {
    let helpers = super::kernel_helpers::all();
    let module_loader = helpers
        .iter()
        .any(|(what, _)| *what == super::kernel_helpers::MODULE_LOADER);
    let reads: &[&str] = match module_loader {
        true => super::kernel_helpers::MODULE_LOADER_READS,
        false => &[],
    };
    let loader_reads = reads
        .iter()
        .filter_map(|path| protected("what the kernel's module loader reads", Path::new(path)));
    // The program, and the name the kernel runs it by when that is a link (`/sbin/modprobe`
    // -> `kmod`): replacing the link swaps the program as surely.
    let named = helpers.iter().flat_map(|(what, program)| {
        let link = std::fs::symlink_metadata(program)
            .is_ok_and(|meta| meta.file_type().is_symlink())
            .then(|| protected_link(what, program))
            .flatten();
        protected(what, program).into_iter().chain(link)
    });
    named.chain(loader_reads).collect()
}

/// Whether the kernel refuses to open the running binary for writing (ETXTBSY), as every
/// Linux release does; a read-only file system or a binary the daemon may not write protects
/// it as well (a sandbox runs as the daemon's user, with fewer rights).
fn running_binary_is_write_protected() -> bool {
    // Opened, never written: dropped at once.
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/exe")
        .is_err()
}

/// A binary that others may write is one they can make the next start of the daemon run: the
/// kernel refuses writes only while it runs, and a sandbox that reached a hard link to it
/// could have changed its mode (as of any file of the daemon's user in its write roots).
fn writable_by_others(binary: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(binary).ok()?.permissions().mode();
    (mode & 0o022 != 0).then(|| {
        format!(
            "the exec-server binary `{}` is writable by its group or others (mode {:o}): \
             whoever can write it runs code as this daemon's user at its next start",
            binary.display(),
            mode & 0o7777
        )
    })
}

/// The files mapped into this process (the binary, the loader, shared libraries).
fn mapped_files() -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut files: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| path.starts_with('/'))
        .map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| path.into()))
        .collect();
    files.sort();
    files.dedup();
    files
}

/// `path` as protected, if it or at least its directory exists.
fn protected(what: &'static str, path: &Path) -> Option<Protected> {
    let meta = std::fs::metadata(path).ok();
    let path = match std::fs::canonicalize(path) {
        Ok(path) => path,
        Err(_) => std::fs::canonicalize(path.parent()?)
            .ok()?
            .join(path.file_name()?),
    };
    protected_as(what, path, meta)
}

/// The symbolic link `link` itself as protected (not what it names).
fn protected_link(what: &'static str, link: &Path) -> Option<Protected> {
    let meta = std::fs::symlink_metadata(link).ok();
    let path = std::fs::canonicalize(link.parent()?)
        .ok()?
        .join(link.file_name()?);
    protected_as(what, path, meta)
}

/// The canonical `path`, of metadata `meta` (None: missing), as protected.
fn protected_as(
    what: &'static str,
    path: PathBuf,
    meta: Option<std::fs::Metadata>,
) -> Option<Protected> {
    let ancestors: Vec<(u64, u64)> = path
        .ancestors()
        .skip(1)
        .filter_map(|dir| std::fs::metadata(dir).ok())
        .map(|meta| (meta.dev(), meta.ino()))
        .collect();
    Some(Protected {
        what,
        id: meta.as_ref().map(|meta| (meta.dev(), meta.ino())),
        dev: meta
            .as_ref()
            .map(MetadataExt::dev)
            .or_else(|| ancestors.first().map(|(dev, _)| *dev))?,
        linked: meta
            .as_ref()
            .is_some_and(|meta| meta.is_file() && meta.nlink() > 1),
        path,
        ancestors,
    })
}

impl Guard {
    /// Logs what [`init`] found worth a warning.
    pub fn warn(&self) {
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
    }

    /// The canonical path of everything protected (what the daemon loads, the loader's
    /// configuration, whether present or not) and of the state directory.
    pub(super) fn protected_paths(&self) -> impl Iterator<Item = &Path> {
        self.protected
            .iter()
            .chain(STATE_DIR.get())
            .map(|item| item.path.as_path())
    }

    /// The state directory, once protected.
    pub(super) fn state_dir(&self) -> Option<&Path> {
        STATE_DIR.get().map(|item| item.path.as_path())
    }

    /// A write grant on `/` keeps the protected files read-only instead of being refused
    /// (`super::root_write`), which holds only for their names: a hard link to one anywhere
    /// else (perf's build-id cache links every library it saw under `~/.debug`) would stay
    /// writable, and no search of a whole disk fits in a launch. So a protected file with
    /// other links now refuses it, except the running binary where the kernel refuses writes
    /// through every name (ETXTBSY).
    pub(super) fn check_root_write(&self) -> Result<(), GuardError> {
        for item in &self.protected {
            let links = std::fs::metadata(&item.path).map_or(1, |meta| match meta.is_file() {
                true => meta.nlink(),
                false => 1,
            });
            if links > 1 && !(item.what == BINARY && running_binary_is_write_protected()) {
                return Err(GuardError::Exposes {
                    root: PathBuf::from("/"),
                    what: item.what,
                    protected: item.path.clone(),
                    how: Overlap::Linked(links),
                });
            }
        }
        Ok(())
    }

    /// Whether [`Guard::check_write_root`] may search a root for hard links to a protected
    /// file.
    pub fn searches_for_links(&self) -> bool {
        self.protected.iter().any(|item| item.linked)
    }

    /// Err(reason) when a write grant on the canonical directory or file `root` would expose
    /// the daemon's state.
    pub fn check_write_root(&self, root: &Path) -> Result<(), GuardError> {
        let meta = std::fs::metadata(root).map_err(|source| GuardError::Inspect {
            root: root.to_path_buf(),
            source,
        })?;
        let mounts = Mounts::current();
        let grant_in_fs = mounts.fs_path(root);
        for item in self.protected.iter().chain(STATE_DIR.get()) {
            let refuse = |how: Overlap| {
                Err(GuardError::Exposes {
                    root: root.to_path_buf(),
                    what: item.what,
                    protected: item.path.clone(),
                    how,
                })
            };
            if item.path.starts_with(root) {
                return refuse(Overlap::Inside);
            }
            if root.starts_with(&item.path) {
                return refuse(Overlap::Contains);
            }
            if item.id == Some((meta.dev(), meta.ino())) {
                return refuse(Overlap::Same);
            }
            if item.ancestors.contains(&(meta.dev(), meta.ino())) {
                return refuse(Overlap::Alias);
            }
            if meta.dev() == item.dev {
                if let (Some(grant), Some(target)) = (&grant_in_fs, mounts.fs_path(&item.path)) {
                    if target.starts_with(grant) || grant.starts_with(&target) {
                        return refuse(Overlap::BindMount);
                    }
                }
                if let (true, true, Some((dev, ino))) = (item.linked, meta.is_dir(), item.id) {
                    match find_inode(root, dev, ino) {
                        Ok(None) => {}
                        Ok(Some(link)) => return refuse(Overlap::HardLink(link)),
                        Err(too_large) => return refuse(too_large),
                    }
                }
            }
        }
        Ok(())
    }
}

/// Why a write grant is refused.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("write root `{}` cannot be inspected: {source}", root.display())]
    Inspect {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "sandbox write grant `{}` would expose {what} `{}` ({how}); refusing it",
        root.display(),
        protected.display()
    )]
    Exposes {
        root: PathBuf,
        what: &'static str,
        protected: PathBuf,
        how: Overlap,
    },
    #[error(
        "sandbox write grant `/` would let a sandbox replace {what} `{}`, which the kernel runs \
         as root outside every sandbox, and what it loads; refusing it",
        program.display()
    )]
    KernelHelper {
        what: &'static str,
        program: PathBuf,
    },
}

/// How a grant would overlap a protected file.
#[derive(Debug, thiserror::Error)]
pub enum Overlap {
    #[error("it lies inside the grant")]
    Inside,
    #[error("the grant lies inside it")]
    Contains,
    #[error("the grant is the same file")]
    Same,
    #[error("the grant is an alias of one of its directories")]
    Alias,
    #[error("a bind mount makes the grant overlap it")]
    BindMount,
    #[error("`{}` is a hard link to it", .0.display())]
    HardLink(PathBuf),
    #[error("it has {0} hard links, which no sandbox view can keep read-only")]
    Linked(u64),
    #[error(
        "it has other hard links and the grant has more than {MAX_LINK_SCAN} entries to search \
         for them"
    )]
    TooLarge,
}

/// Searches `root` (same device only, no symlinks followed) for a file with this inode.
fn find_inode(root: &Path, dev: u64, ino: u64) -> Result<Option<PathBuf>, Overlap> {
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > MAX_LINK_SCAN {
                return Err(Overlap::TooLarge);
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
pub(super) struct Mounts {
    /// (mount point, root inside the file system), in table order (later ones are on top).
    entries: Vec<(PathBuf, PathBuf)>,
}

/// The daemon's mount table as last read, and its `mountinfo`, open to be told of changes.
struct CachedMounts {
    file: std::fs::File,
    mounts: std::sync::Arc<Mounts>,
}

impl Mounts {
    pub(super) fn read() -> Self {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Self::parse(&text)
    }

    /// This process's mount table, read again only when it changed since the last read: an
    /// open `mountinfo` polls exceptional after a mount or unmount in its namespace
    /// (proc(5)). Generating the table costs the kernel more than the rest of a sandboxed
    /// start's checks, and it is consulted for every write root of every start.
    pub(super) fn current() -> std::sync::Arc<Self> {
        static CACHE: std::sync::Mutex<Option<CachedMounts>> = std::sync::Mutex::new(None);
        let mut cache = CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = cache.as_ref().filter(|cached| !changed(&cached.file)) {
            return cached.mounts.clone();
        }
        let reread = cache.take().map(|cached| cached.file).map_or_else(
            || std::fs::File::open("/proc/self/mountinfo"),
            |mut file| std::io::Seek::rewind(&mut file).map(|()| file),
        );
        let mut text = String::new();
        let Ok(mut file) = reread else {
            return std::sync::Arc::new(Self::read());
        };
        if std::io::Read::read_to_string(&mut file, &mut text).is_err() {
            return std::sync::Arc::new(Self::read());
        }
        let mounts = std::sync::Arc::new(Self::parse(&text));
        *cache = Some(CachedMounts {
            file,
            mounts: mounts.clone(),
        });
        mounts
    }

    fn parse(text: &str) -> Self {
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

    /// (mount point, its root inside its file system) of each mount.
    pub(super) fn entries(&self) -> &[(PathBuf, PathBuf)] {
        &self.entries
    }

    pub(super) fn fs_path(&self, path: &Path) -> Option<PathBuf> {
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

/// Whether the mount table `mountinfo` shows changed since it was last polled or opened (or
/// cannot tell).
fn changed(mountinfo: &std::fs::File) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd as _;
    let mut fds = [PollFd::new(mountinfo.as_fd(), PollFlags::POLLPRI)];
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

/// Undoes mountinfo's octal escapes (`\040` for a space...).
pub(crate) fn unescape(field: &str) -> String {
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

    /// The cached table stays while nothing is mounted, and is read again after a mount (this
    /// test mounts a tmpfs on a directory of its own, on the host, and unmounts it).
    #[test]
    fn the_mount_table_is_read_again_only_after_a_mount() {
        let first = Mounts::current();
        assert!(std::sync::Arc::ptr_eq(&first, &Mounts::current()));
        let dir = tempfile::tempdir().unwrap();
        let mount = |args: &[&std::ffi::OsStr]| {
            let status = std::process::Command::new(args[0])
                .args(&args[1..])
                .status();
            assert!(status.unwrap().success(), "{args:?}");
        };
        let point = dir.path().as_os_str();
        mount(&[
            "mount".as_ref(),
            "-t".as_ref(),
            "tmpfs".as_ref(),
            "t".as_ref(),
            point,
        ]);
        let after = Mounts::current();
        mount(&["umount".as_ref(), point]);
        assert!(after.entries().iter().any(|(at, _)| at == dir.path()));
        let unmounted = Mounts::current();
        assert!(!unmounted.entries().iter().any(|(at, _)| at == dir.path()));
    }

    #[test]
    fn refuses_the_binary_directory_and_hard_links_but_not_disjoint_roots() {
        let guard = init();
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        let err = guard.check_write_root(exe.parent().unwrap()).unwrap_err();
        assert!(err.to_string().contains("inside the grant"), "{err}");
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
