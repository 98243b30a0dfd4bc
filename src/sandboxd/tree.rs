//! The sandbox root as the file API sees it: every path is opened from a descriptor of the
//! root with openat2's RESOLVE_BENEATH, so the kernel, not a check of ours, refuses whatever
//! would leave it (`..`, an absolute or escaping symbolic link, a magic link in /proc), also
//! when a path is swapped meanwhile.

use super::ApiError;
use axum::http::StatusCode;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// A path under the root, as asked for: relative, no `..` (refused up front, with a clearer
/// error than the kernel's), `.` and empty segments dropped; empty is the root itself.
pub(super) struct Relative(PathBuf);

impl Relative {
    /// The contract's "sandbox-relative path", already percent-decoded; a leading `/` is
    /// dropped, as the reference runtimes do.
    pub(super) fn parse(raw: &str) -> Result<Self, ApiError> {
        if raw.contains('\0') {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "the path contains NUL",
            ));
        }
        let mut path = PathBuf::new();
        for component in Path::new(raw).components() {
            match component {
                Component::Normal(name) => path.push(name),
                Component::ParentDir => {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        format!("path traversal outside the sandbox root is forbidden: {raw}"),
                    ))
                }
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        Ok(Self(path))
    }

    pub(super) fn root() -> Self {
        Self(PathBuf::new())
    }

    pub(super) fn is_root(&self) -> bool {
        self.0.as_os_str().is_empty()
    }

    /// The path as the contract shows it: from the root, with a leading `/`.
    pub(super) fn display(&self) -> String {
        format!("/{}", self.0.display())
    }

    fn as_openable(&self) -> &Path {
        if self.is_root() {
            Path::new(".")
        } else {
            &self.0
        }
    }

    /// The last component and the path of its directory.
    pub(super) fn split(&self) -> Option<(Relative, OsString)> {
        let name = self.0.file_name()?.to_owned();
        let parent = self.0.parent().unwrap_or(Path::new("")).to_path_buf();
        Some((Relative(parent), name))
    }
}

/// The root directory, opened once per request (so a root replaced meanwhile is seen whole).
pub(super) fn open_root(root: &Path) -> Result<OwnedFd, ApiError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::open(root, flags, Mode::empty()).map_err(|errno| {
        let message = format!(
            "the sandbox root {} cannot be opened: {errno}",
            root.display()
        );
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    })
}

/// How often [`open`] tries again when the kernel could not rule out a race on `..`.
const EAGAIN_RETRIES: usize = 64;

/// Opens `path` beneath `root` (symbolic links followed only while they stay beneath it).
/// openat2 answers EAGAIN for a lookup through `..` during which anything on the host was
/// renamed or mounted (every sandboxed launch mounts), and asks the caller to try again.
pub(super) fn open(
    root: &OwnedFd,
    path: &Relative,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, ApiError> {
    let flags = flags | OFlags::CLOEXEC;
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root, path.as_openable(), flags, mode, BENEATH) {
            Err(Errno::AGAIN) if tries < EAGAIN_RETRIES => tries += 1,
            opened => return opened.map_err(|errno| error(errno, path)),
        }
    }
}

/// The directory `path` beneath `root`, made with its missing parents (0755) when `create`.
pub(super) fn directory(
    root: &OwnedFd,
    path: &Relative,
    create: bool,
) -> Result<OwnedFd, ApiError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    let mut at = open(root, &Relative::root(), flags, Mode::empty())?;
    let mut prefix = PathBuf::new();
    for name in path.0.iter() {
        prefix.push(name);
        let here = Relative(prefix.clone());
        at = match open(root, &here, flags, Mode::empty()) {
            Err(error) if create && error.status == StatusCode::NOT_FOUND => {
                // Made in the directory already opened beneath the root, then opened again
                // from the root: a name swapped meanwhile for a link is still resolved beneath.
                match rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(self::error(errno, &here)),
                }
                open(root, &here, flags, Mode::empty())?
            }
            other => other?,
        };
    }
    Ok(at)
}

/// The contract's status for an errno met at `path`.
pub(super) fn error(errno: Errno, path: &Relative) -> ApiError {
    let shown = path.display();
    let (status, message) = match errno {
        Errno::XDEV | Errno::LOOP => (
            StatusCode::FORBIDDEN,
            format!("{shown} leads outside the sandbox root (a symbolic link): forbidden"),
        ),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => {
            (StatusCode::FORBIDDEN, format!("{shown}: permission denied"))
        }
        Errno::NOENT | Errno::NOTDIR => (StatusCode::NOT_FOUND, format!("{shown} does not exist")),
        Errno::ISDIR => (StatusCode::BAD_REQUEST, format!("{shown} is a directory")),
        Errno::NOTEMPTY => (
            StatusCode::CONFLICT,
            format!("{shown} is a directory that is not empty: pass recursive=true"),
        ),
        Errno::NOSPC | Errno::DQUOT => (
            StatusCode::INSUFFICIENT_STORAGE,
            format!("{shown}: no space left"),
        ),
        Errno::NAMETOOLONG => (StatusCode::BAD_REQUEST, format!("{shown}: name too long")),
        other => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{shown}: {other}"),
        ),
    };
    ApiError::new(status, message)
}
