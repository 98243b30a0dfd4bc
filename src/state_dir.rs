//! The state directory (`--state-dir`): where the daemon keeps what must outlive it, so that a
//! restarted daemon finds its processes again.
//!
//! Only the daemon's user may access it (it will hold output and session ids, which are
//! credentials): the daemon creates it 0700 when missing and refuses one that is a symbolic link,
//! not a directory, someone else's, or open to group or others; it never chmods one that exists.
//! One daemon per directory: an exclusive `flock` on `lock`, which the kernel releases however
//! the daemon dies (SIGKILL included), so a successor never has to tell a stale lock from a live
//! one. `version` names the format, and a directory in another format, or with content but no
//! version, is refused rather than misread.
//!
//! An explicit `--state-dir` that cannot be used stops the daemon; the default one only means
//! that state is not kept (a warning), as do `--state-dir none` and a user without a default.

use nix::fcntl::{Flock, FlockArg};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The format this daemon writes and reads, in `version`.
const FORMAT: &str = "1";
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
    #[error("the state dir {} was written by an incompatible exec-server (format {found}; this one reads {FORMAT}); move it away or point --state-dir elsewhere", path.display())]
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
        check_private(path)?;
        if path.join(VERSION).exists() {
            check_version(path)?;
        }
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn processes_dir(&self) -> PathBuf {
        self.path.join("processes")
    }

    pub(crate) fn sessions_dir(&self) -> PathBuf {
        self.path.join("sessions")
    }

    fn take(path: &Path) -> Result<Self, StateDirError> {
        check_private(path)?;
        let lock = lock(path)?;
        check_version(path)?;
        let dir = Self {
            path: path.to_owned(),
            _lock: lock,
        };
        for sub in [dir.processes_dir(), dir.sessions_dir()] {
            create_subdir(&sub)?;
        }
        tracing::info!("keeping state in {}", dir.path().display());
        Ok(dir)
    }
}

/// Creates `path` (and its missing parents) 0700 when missing; then it must be a directory, not
/// a symbolic link, the daemon's own and closed to group and others.
fn check_private(path: &Path) -> Result<(), StateDirError> {
    let inspect = |error| StateDirError::Inspect {
        path: path.to_owned(),
        error,
    };
    let found = match std::fs::symlink_metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|error| StateDirError::Create {
                    path: path.to_owned(),
                    error,
                })?;
            std::fs::symlink_metadata(path).map_err(inspect)?
        }
        found => found.map_err(inspect)?,
    };
    let path = path.to_owned();
    let euid = nix::unistd::geteuid().as_raw();
    let mode = found.mode() & 0o7777;
    if found.file_type().is_symlink() {
        Err(StateDirError::Symlink { path })
    } else if !found.is_dir() {
        Err(StateDirError::NotADirectory { path })
    } else if found.uid() != euid {
        Err(StateDirError::Owner {
            path,
            owner: found.uid(),
            euid,
        })
    } else if mode & 0o077 != 0 {
        Err(StateDirError::Mode { path, mode })
    } else {
        Ok(())
    }
}

/// Locks `dir/lock` and writes the daemon's pid in it, for a refused successor's message.
fn lock(dir: &Path) -> Result<Flock<File>, StateDirError> {
    let path = dir.join(LOCK);
    let failed = |error| StateDirError::Lock {
        path: path.clone(),
        error,
    };
    // std opens with O_CLOEXEC: no child holds the lock past its exec.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(failed)?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(StateDirError::Held {
                path: dir.to_owned(),
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

/// Writes `dir/version` in a directory that holds nothing but the lock; otherwise it must name
/// this format.
fn check_version(dir: &Path) -> Result<(), StateDirError> {
    let path = dir.join(VERSION);
    let io = |action, error| StateDirError::Io {
        action,
        path: path.clone(),
        error,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let line = text.lines().next().unwrap_or("");
            if line == format!("{VERSION_PREFIX}{FORMAT}") {
                return Ok(());
            }
            let found = match line.strip_prefix(VERSION_PREFIX) {
                Some(format) => format.to_owned(),
                None => format!("{line:?}"),
            };
            Err(StateDirError::Incompatible {
                path: dir.to_owned(),
                found,
            })
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let entries = std::fs::read_dir(dir).map_err(|error| io("list", error))?;
            for entry in entries {
                let name = entry.map_err(|error| io("list", error))?.file_name();
                if name != LOCK {
                    return Err(StateDirError::Unversioned {
                        path: dir.to_owned(),
                        entry: name.to_string_lossy().into_owned(),
                    });
                }
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut file| {
                    file.write_all(format!("{VERSION_PREFIX}{FORMAT}\n").as_bytes())
                })
                .map_err(|error| io("write", error))
        }
        Err(err) => Err(io("read", err)),
    }
}

fn create_subdir(path: &Path) -> Result<(), StateDirError> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            // Inside a directory only the daemon's user can write to, so only that user (or
            // root) could have put something else there.
            let found =
                std::fs::symlink_metadata(path).map_err(|error| StateDirError::Inspect {
                    path: path.to_owned(),
                    error,
                })?;
            if found.is_dir() {
                Ok(())
            } else {
                Err(StateDirError::NotADirectory {
                    path: path.to_owned(),
                })
            }
        }
        created => created.map_err(|error| StateDirError::Create {
            path: path.to_owned(),
            error,
        }),
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
