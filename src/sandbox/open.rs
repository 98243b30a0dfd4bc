//! Opening the paths the daemon resolved, without following symbolic links: the daemon's own
//! anchors and protected names ([`openat2_nofollow`], [`open_nofollow`]), and, in the helper,
//! every path of a plan checked against the identity the daemon recorded for it
//! ([`open_verified`]) before a mount or a Landlock grant uses it.

use super::plan::{Identities, Identity};
use crate::path::cstring;
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Why the helper could not open a path of the plan as the daemon resolved it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("`{}` has no identity in the plan", path.display())]
    Unresolved { path: PathBuf },
    #[error("opening `{}`: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("inspecting `{}`: {source}", path.display())]
    Inspect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "`{}` was replaced since the daemon resolved it ({expected}, now {found}); refusing it",
        path.display()
    )]
    Replaced {
        path: PathBuf,
        expected: Identity,
        found: Identity,
    },
}

impl OpenError {
    pub(crate) fn errno(&self) -> Option<i32> {
        match self {
            Self::Open { source, .. } | Self::Inspect { source, .. } => source.raw_os_error(),
            Self::Unresolved { .. } => Some(libc::EINVAL),
            Self::Replaced { .. } => Some(libc::ESTALE),
        }
    }
}

/// Opens `path` without following symbolic links ([`open_nofollow`]) and checks that it is the
/// file the daemon resolved, so neither a link nor a directory renamed into place since then
/// receives what the daemon granted to the original.
pub(crate) fn open_verified(
    path: &Path,
    ids: &Identities,
) -> Result<(OwnedFd, nix::sys::stat::FileStat), OpenError> {
    let expected = *ids.get(path).ok_or_else(|| OpenError::Unresolved {
        path: path.to_path_buf(),
    })?;
    let fd = open_nofollow(path).map_err(|source| OpenError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let stat = nix::sys::stat::fstat(&fd).map_err(|errno| OpenError::Inspect {
        path: path.to_path_buf(),
        source: errno.into(),
    })?;
    let found = Identity::of_stat(&stat);
    if found != expected {
        return Err(OpenError::Replaced {
            path: path.to_path_buf(),
            expected,
            found,
        });
    }
    Ok((fd, stat))
}

pub(crate) fn is_dir(stat: &nix::sys::stat::FileStat) -> bool {
    stat.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// An O_PATH fd for `path`, refusing symbolic links in every component: the daemon checked
/// canonical paths, and a process that swapped one for a link since then (a background process
/// of an earlier sandbox can write there) must not redirect a mount or a grant.
pub(crate) fn open_nofollow(path: &Path) -> std::io::Result<OwnedFd> {
    openat2_nofollow(path).map_err(|err| match err.raw_os_error() {
        Some(libc::ELOOP) => std::io::Error::other(format!(
            "`{}` now contains a symbolic link; refusing to follow it",
            path.display()
        )),
        _ => err,
    })
}

/// [`open_nofollow`] with the kernel's own error (ELOOP for a symbolic link on the way).
pub(crate) fn openat2_nofollow(path: &Path) -> std::io::Result<OwnedFd> {
    let c_path = cstring(path)?;
    // SAFETY: open_how is plain integers, for which all zeroes is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: valid path and a properly sized open_how.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })?;
    // SAFETY: the kernel returned a new fd we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A raw syscall's result: negative is the thread's errno.
pub(super) fn check(rc: libc::c_long) -> std::io::Result<libc::c_long> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_opened_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        open_nofollow(&dir.path().join("real")).unwrap();
        let err = open_nofollow(&dir.path().join("link/x")).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(open_nofollow(&dir.path().join("link")).is_err());
    }
}
