//! The state directory (`--state-dir`): where the daemon keeps what must outlive it, so that a
//! restarted daemon finds its processes again.
//!
//! Only the daemon's user may access it (it will hold output and session ids, which are
//! credentials): the daemon creates it 0700 when missing and refuses one that is a symbolic link,
//! not a directory, someone else's, or open to group or others, or that lies under a directory
//! another user could change (`check_ancestors`); it never chmods one that exists. It is opened
//! once and held by descriptor ([`Dir`]): the checks are made on that descriptor, and nothing in
//! it is ever reached through its path again, so a rename of it or of an ancestor cannot send
//! the daemon's writes elsewhere. One daemon per directory: an exclusive `flock` on `lock`,
//! which the kernel releases however the daemon dies (SIGKILL included), so a successor never
//! has to tell a stale lock from a live one. `version` names the format, and a directory in
//! another format, or with content but no version, is refused rather than misread.
//!
//! An explicit `--state-dir` that cannot be used stops the daemon; the default one only means
//! that state is not kept (a warning), as do `--state-dir none` and a user without a default.

use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// The format this daemon writes, in `version`: 2 names session files by their id's digest
/// (1 named them by the id, a credential; a directory in format 1 is taken over and renamed).
const FORMAT: &str = "2";
const VERSION_PREFIX: &str = "exec-server state ";
const LOCK: &str = "lock";
const VERSION: &str = "version";

/// Where to keep state, resolved from `--state-dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateDirSetting {
    /// `--state-dir DIR`: if it cannot be used, the daemon does not start.
    Explicit(PathBuf),
    /// The default for the daemon's user: if it cannot be used, state is not kept.
    Default(PathBuf),
    /// `--state-dir none`: no state kept, for throwaway daemons.
    Off,
    /// No `--state-dir`, and no default: a user other than root without `XDG_RUNTIME_DIR`.
    NoDefault,
}

impl StateDirSetting {
    /// The setting for `--state-dir` (`flag`, None when not given) of a daemon running as `euid`
    /// with `XDG_RUNTIME_DIR` set to `runtime_dir`.
    pub(crate) fn resolve(
        flag: Option<&Path>,
        euid: u32,
        runtime_dir: Option<&OsStr>,
    ) -> Result<Self, StateDirError> {
        match flag {
            Some(path) if path == Path::new("none") => Ok(Self::Off),
            Some(path) if path.is_absolute() => Ok(Self::Explicit(path.to_owned())),
            Some(path) => Err(StateDirError::Relative {
                path: path.to_owned(),
            }),
            None if euid == 0 => Ok(Self::Default("/run/exec-server".into())),
            // The XDG spec has relative values ignored.
            None => Ok(runtime_dir
                .map(Path::new)
                .filter(|dir| dir.is_absolute())
                .map_or(Self::NoDefault, |dir| {
                    Self::Default(dir.join("exec-server"))
                })),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StateDirError {
    #[error("--state-dir {} is not an absolute path; give one, or `none` to keep no state", path.display())]
    Relative { path: PathBuf },
    #[error("cannot create the state dir {}: {error}; create it (mode 0700) or point --state-dir elsewhere", path.display())]
    Create {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot inspect the state dir {}: {error}", path.display())]
    Inspect {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the state dir {} is a symbolic link, which is not followed; point --state-dir at the directory itself", path.display())]
    Symlink { path: PathBuf },
    #[error("the state dir {} is not a directory; move it away or point --state-dir elsewhere", path.display())]
    NotADirectory { path: PathBuf },
    #[error("the state dir {} belongs to uid {owner}, not to the daemon's uid {euid}; run `chown {euid} {}` or point --state-dir elsewhere", path.display(), path.display())]
    Owner {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
    #[error("the state dir {} has mode {mode:03o}, so group or others may access it; run `chmod 700 {}`", path.display(), path.display())]
    Mode { path: PathBuf, mode: u32 },
    #[error("the state dir {} lies under {} (owner uid {owner}, mode {mode:03o}), which a user other than root and the daemon's can change; put the state dir under directories only they can write (or sticky and root's, as /tmp)", path.display(), ancestor.display())]
    Ancestor {
        path: PathBuf,
        ancestor: PathBuf,
        owner: u32,
        mode: u32,
    },
    #[error("cannot lock {}: {error}", path.display())]
    Lock {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the state dir {} is in use by another exec-server (pid {}); stop that one or point --state-dir elsewhere",
        path.display(),
        holder.map_or_else(|| "unknown".to_owned(), |pid| pid.to_string())
    )]
    Held { path: PathBuf, holder: Option<u32> },
    #[error("the state dir {} was written by an incompatible exec-server (format {found}; this one reads 1 and {FORMAT}); move it away or point --state-dir elsewhere", path.display())]
    Incompatible { path: PathBuf, found: String },
    #[error("the state dir {} holds {entry:?} but no version file, so exec-server did not write it; move it away or point --state-dir elsewhere", path.display())]
    Unversioned { path: PathBuf, entry: String },
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The state directory of this daemon, locked for as long as this lives.
pub(crate) struct StateDir {
    path: PathBuf,
    processes: Dir,
    sessions: Dir,
    /// Held for the daemon's life; dropping it (or any death of the process) unlocks.
    _lock: Flock<File>,
}

impl StateDir {
    /// The state directory of `setting`, created, checked and locked; None when state is not
    /// kept (said in the log). Err only for an explicit `--state-dir`.
    pub(crate) fn open(setting: &StateDirSetting) -> Result<Option<Self>, StateDirError> {
        const NOT_KEPT: &str = "processes will not survive a restart of the daemon";
        match setting {
            StateDirSetting::Explicit(path) => Self::take(path).map(Some),
            // Any failure of the default falls back, "another daemon holds it" included: several
            // daemons on one host (tests, a user's own next to root's) must keep working, and
            // only the first keeps state.
            StateDirSetting::Default(path) => match Self::take(path) {
                Ok(dir) => Ok(Some(dir)),
                Err(err) => {
                    tracing::warn!("state not kept: {err}; {NOT_KEPT}");
                    Ok(None)
                }
            },
            StateDirSetting::Off => {
                tracing::info!("state not kept (--state-dir none); {NOT_KEPT}");
                Ok(None)
            }
            StateDirSetting::NoDefault => {
                tracing::warn!(
                    "state not kept: no --state-dir, and no default without XDG_RUNTIME_DIR; \
                     {NOT_KEPT}"
                );
                Ok(None)
            }
        }
    }

    /// What a successor checks before it says it is ready (its predecessor still holds the
    /// lock): an explicit directory that it could not use (unsafe, or in another format, as
    /// after an upgrade to an incompatible binary) must fail the upgrade while the predecessor
    /// still serves, not after it has exited.
    pub(crate) fn check(setting: &StateDirSetting) -> Result<(), StateDirError> {
        let StateDirSetting::Explicit(path) = setting else {
            return Ok(());
        };
        let dir = open_private(path)?;
        match read_version(&dir, path)? {
            Some(line) => accept_version(&line, path).map(drop),
            None => Ok(()),
        }
    }

    /// The path it was opened at, for messages and the sandbox's protections (the daemon
    /// itself never goes through it again).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn processes(&self) -> &Dir {
        &self.processes
    }

    pub(crate) fn sessions(&self) -> &Dir {
        &self.sessions
    }

    fn take(path: &Path) -> Result<Self, StateDirError> {
        let dir = open_private(path)?;
        let lock = lock(&dir, path)?;
        check_version(&dir, path)?;
        let sub = |name: &str| {
            create_subdir(&dir, name).map_err(|error| StateDirError::Create {
                path: path.join(name),
                error,
            })
        };
        let state = Self {
            processes: sub(PROCESSES)?,
            sessions: sub(SESSIONS)?,
            path: path.to_owned(),
            _lock: lock,
        };
        tracing::info!("keeping state in {}", path.display());
        Ok(state)
    }
}

const PROCESSES: &str = "processes";
const SESSIONS: &str = "sessions";

/// A directory held by descriptor: what is in it is reached with `*at` calls beneath it, never
/// by resolving its path again, so that renaming it or one of its ancestors (and putting
/// another directory at the old path) changes nothing for its holder. Names are single
/// components; no call follows a symbolic link, and files are opened non-blocking and must be
/// regular files (a FIFO or a device put in their place is refused, not waited on).
#[derive(Clone, Debug)]
pub(crate) struct Dir(std::sync::Arc<OwnedFd>);

impl Dir {
    fn open_at(at: Option<BorrowedFd<'_>>, path: &Path) -> std::io::Result<Self> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match at {
            Some(at) => nix::fcntl::openat(at, path, flags, Mode::empty()),
            None => nix::fcntl::open(path, flags, Mode::empty()),
        }?;
        Ok(Self(std::sync::Arc::new(fd)))
    }

    /// The directory `name` in this one.
    pub(crate) fn open_dir(&self, name: &str) -> std::io::Result<Self> {
        Self::open_at(Some(self.0.as_fd()), Path::new(name))
    }

    /// Makes the directory `name` (0700) and opens it.
    pub(crate) fn create_dir(&self, name: &str) -> std::io::Result<Self> {
        nix::sys::stat::mkdirat(self.0.as_fd(), name, Mode::from_bits_truncate(0o700))?;
        self.open_dir(name)
    }

    /// The regular file `name`, opened with `flags` (`O_CREAT` makes it 0600).
    pub(crate) fn open(&self, name: &str, flags: OFlag) -> std::io::Result<File> {
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = nix::fcntl::openat(self.0.as_fd(), name, flags, Mode::from_bits_truncate(0o600))?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::other(format!(
                "{name} is not a regular file"
            )));
        }
        Ok(file)
    }

    /// The whole of the regular file `name`.
    pub(crate) fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        let mut text = Vec::new();
        self.open(name, OFlag::O_RDONLY)?.read_to_end(&mut text)?;
        Ok(text)
    }

    /// Replaces the content of `name` with `data` (created if missing).
    pub(crate) fn write(&self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC;
        self.open(name, flags)?.write_all(data)
    }

    pub(crate) fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        Ok(nix::fcntl::renameat(
            self.0.as_fd(),
            from,
            self.0.as_fd(),
            to,
        )?)
    }

    pub(crate) fn remove_file(&self, name: &str) -> std::io::Result<()> {
        let flag = nix::unistd::UnlinkatFlags::NoRemoveDir;
        Ok(nix::unistd::unlinkat(self.0.as_fd(), name, flag)?)
    }

    /// Removes the directory `name` with the entries in it (not deeper: process directories
    /// hold files only).
    pub(crate) fn remove_tree(&self, name: &str) -> std::io::Result<()> {
        let dir = self.open_dir(name)?;
        for entry in dir.entries()? {
            if let Some(entry) = entry.to_str() {
                let _ = dir.remove_file(entry);
            }
        }
        let flag = nix::unistd::UnlinkatFlags::RemoveDir;
        Ok(nix::unistd::unlinkat(self.0.as_fd(), name, flag)?)
    }

    /// The names in it, but `.` and `..`.
    pub(crate) fn entries(&self) -> std::io::Result<Vec<std::ffi::OsString>> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut listing = nix::dir::Dir::openat(self.0.as_fd(), ".", flags, Mode::empty())?;
        let mut names = Vec::new();
        for entry in listing.iter() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(&name).to_owned());
            }
        }
        Ok(names)
    }

    /// A path to `name` in it that goes through the descriptor (the kernel resolves
    /// `/proc/self/fd/N` to the open directory), for what takes only a path: binding or
    /// connecting a Unix socket.
    pub(crate) fn through_fd(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.0.as_raw_fd()))
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<OwnedFd> for Dir {
    fn from(fd: OwnedFd) -> Self {
        Self(std::sync::Arc::new(fd))
    }
}

/// Whether a directory owned by `owner` with `mode` lets only root and `euid` change what is in
/// it: its owner is one of them, and group and others cannot write it, unless it is sticky and
/// root's (`/tmp`: others may add names there but not rename or remove ours). As sshd's
/// StrictModes, with the sticky exception.
fn only_ours(owner: u32, mode: u32, euid: u32) -> bool {
    (owner == 0 || owner == euid) && (mode & 0o022 == 0 || (mode & 0o1000 != 0 && owner == 0))
}

/// Every directory above the state dir `path` (as given, and as its links resolve) must be
/// changeable only by root and the daemon's user: whoever else could rename one could put a
/// directory of their own where the next daemon looks.
fn check_ancestors(path: &Path, euid: u32) -> Result<(), StateDirError> {
    let inspect = |path: &Path, error| StateDirError::Inspect {
        path: path.to_owned(),
        error,
    };
    let parent = path.parent().unwrap_or(Path::new("/"));
    let resolved = std::fs::canonicalize(parent).map_err(|error| inspect(parent, error))?;
    let given = parent.ancestors().map(|dir| (dir, false));
    let real = resolved.ancestors().map(|dir| (dir, true));
    for (dir, follow) in given.chain(real) {
        let meta = if follow {
            std::fs::metadata(dir)
        } else {
            std::fs::symlink_metadata(dir)
        }
        .map_err(|error| inspect(dir, error))?;
        // A link's own mode means nothing; who owns it is who may change where it points.
        let mode = if meta.file_type().is_symlink() {
            0
        } else {
            meta.mode() & 0o7777
        };
        if !only_ours(meta.uid(), mode, euid) {
            return Err(StateDirError::Ancestor {
                path: path.to_owned(),
                ancestor: dir.to_owned(),
                owner: meta.uid(),
                mode,
            });
        }
    }
    Ok(())
}

/// Creates `path` (and its missing parents) 0700 when missing, and opens it; then it must be a
/// directory, not a symbolic link, the daemon's own and closed to group and others, under
/// directories only root and the daemon's user can change. The checks are made on the open
/// descriptor, which is what the daemon then uses.
fn open_private(path: &Path) -> Result<Dir, StateDirError> {
    let euid = nix::unistd::geteuid().as_raw();
    let owned = path.to_owned();
    let opened = match Dir::open_at(None, path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|error| StateDirError::Create {
                    path: owned.clone(),
                    error,
                })?;
            Dir::open_at(None, path)
        }
        opened => opened,
    };
    let dir = match opened {
        Ok(dir) => dir,
        // O_NOFOLLOW with O_DIRECTORY says ENOTDIR for a link too.
        Err(err) if matches!(err.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            let link = std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_symlink());
            return Err(match link {
                true => StateDirError::Symlink { path: owned },
                false => StateDirError::NotADirectory { path: owned },
            });
        }
        Err(error) => return Err(StateDirError::Inspect { path: owned, error }),
    };
    let found = nix::sys::stat::fstat(dir.as_fd()).map_err(|errno| StateDirError::Inspect {
        path: owned.clone(),
        error: errno.into(),
    })?;
    let mode = found.st_mode & 0o7777;
    if found.st_uid != euid {
        return Err(StateDirError::Owner {
            path: owned,
            owner: found.st_uid,
            euid,
        });
    }
    if mode & 0o077 != 0 {
        return Err(StateDirError::Mode { path: owned, mode });
    }
    check_ancestors(path, euid)?;
    Ok(dir)
}

/// Locks `lock` in the state dir and writes the daemon's pid in it, for a refused successor's
/// message.
fn lock(dir: &Dir, path: &Path) -> Result<Flock<File>, StateDirError> {
    let failed = |error| StateDirError::Lock {
        path: path.join(LOCK),
        error,
    };
    // O_CLOEXEC: no child holds the lock past its exec.
    let file = dir
        .open(LOCK, OFlag::O_RDWR | OFlag::O_CREAT)
        .map_err(failed)?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(StateDirError::Held {
                path: path.to_owned(),
                holder: holder.trim().parse().ok(),
            });
        }
        Err((_, errno)) => return Err(failed(errno.into())),
    };
    lock.set_len(0)
        .and_then(|()| lock.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(failed)?;
    Ok(lock)
}

/// The first line of `version`, None when there is none.
fn read_version(dir: &Dir, path: &Path) -> Result<Option<String>, StateDirError> {
    match dir.read(VERSION) {
        Ok(text) => Ok(Some(
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned(),
        )),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(StateDirError::Io {
            action: "read",
            path: path.join(VERSION),
            error,
        }),
    }
}

/// The format of a `version` line this daemon reads: its own, or format 1 (sessions named by
/// their id, which adoption renames to their digest).
fn accept_version<'a>(line: &'a str, path: &Path) -> Result<&'a str, StateDirError> {
    match line.strip_prefix(VERSION_PREFIX) {
        Some(format @ (FORMAT | "1")) => Ok(format),
        Some(format) => Err(StateDirError::Incompatible {
            path: path.to_owned(),
            found: format.to_owned(),
        }),
        None => Err(StateDirError::Incompatible {
            path: path.to_owned(),
            found: format!("{line:?}"),
        }),
    }
}

/// Writes `version` in a directory that holds nothing but the lock; otherwise it must name a
/// format this daemon reads, and names this one's from now on.
fn check_version(dir: &Dir, path: &Path) -> Result<(), StateDirError> {
    let io = |action, error| StateDirError::Io {
        action,
        path: path.join(VERSION),
        error,
    };
    match read_version(dir, path)? {
        Some(line) if accept_version(&line, path)? == FORMAT => return Ok(()),
        Some(_) => {}
        None => {
            for name in dir.entries().map_err(|error| io("list", error))? {
                if name != LOCK {
                    return Err(StateDirError::Unversioned {
                        path: path.to_owned(),
                        entry: name.to_string_lossy().into_owned(),
                    });
                }
            }
        }
    }
    dir.write(VERSION, format!("{VERSION_PREFIX}{FORMAT}\n").as_bytes())
        .map_err(|error| io("write", error))
}

/// The subdirectory `name`, made 0700 when missing. Inside a directory only the daemon's user
/// can write to, so only that user (or root) could have put something else there, which is
/// refused.
fn create_subdir(dir: &Dir, name: &str) -> std::io::Result<Dir> {
    match dir.create_dir(name) {
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => dir.open_dir(name),
        created => created,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(flag: Option<&str>, euid: u32, runtime_dir: Option<&str>) -> StateDirSetting {
        StateDirSetting::resolve(flag.map(Path::new), euid, runtime_dir.map(OsStr::new)).unwrap()
    }

    #[test]
    fn root_defaults_to_run_and_users_to_their_runtime_dir() {
        let default = |path: &str| StateDirSetting::Default(path.into());
        assert_eq!(resolve(None, 0, None), default("/run/exec-server"));
        assert_eq!(
            resolve(None, 0, Some("/run/user/0")),
            default("/run/exec-server")
        );
        assert_eq!(
            resolve(None, 1000, Some("/run/user/1000")),
            default("/run/user/1000/exec-server")
        );
        assert_eq!(resolve(None, 1000, None), StateDirSetting::NoDefault);
        assert_eq!(resolve(None, 1000, Some("")), StateDirSetting::NoDefault);
        assert_eq!(
            resolve(None, 1000, Some("run/user/1000")),
            StateDirSetting::NoDefault
        );
    }

    #[test]
    fn only_root_and_the_daemons_user_may_change_an_ancestor() {
        assert!(only_ours(0, 0o755, 1000));
        assert!(only_ours(1000, 0o700, 1000));
        assert!(only_ours(0, 0o1777, 1000), "sticky and root's, as /tmp");
        assert!(
            !only_ours(1000, 0o1777, 0),
            "sticky but another user's: they may rename"
        );
        assert!(!only_ours(0, 0o775, 1000), "group-writable");
        assert!(!only_ours(0, 0o757, 1000), "writable by others");
        assert!(!only_ours(65534, 0o755, 1000), "another user's");
    }

    #[test]
    fn a_flag_is_explicit_or_none() {
        assert_eq!(
            resolve(Some("/srv/state"), 1000, None),
            StateDirSetting::Explicit("/srv/state".into())
        );
        assert_eq!(resolve(Some("none"), 0, None), StateDirSetting::Off);
        assert!(matches!(
            StateDirSetting::resolve(Some(Path::new("state")), 0, None),
            Err(StateDirError::Relative { .. })
        ));
    }
}
