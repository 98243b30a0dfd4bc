//! `--envd-sandbox` on file operations: with a restricting profile, every envd file operation
//! runs through the same confined route as a sandboxed `fs/*` call (`crate::fs::sandbox`): a
//! sandbox helper confines itself to the profile, then makes the change or opens the file, so
//! the kernel, not a check of ours, decides. Changes (make, move, remove, write) and opened
//! files (download, upload) are the helper's own; Stat and ListDir, whose answers need what the
//! helper's replies do not carry (owners, modes), are read from descriptors the helper opened
//! and passed back, so the daemon never resolves a path the tenant can swap. Watches are
//! refused (`watch`).

use super::connect::{Code, ConnectError};
use super::entry::{blocking, describe, is_artifact};
use super::messages::{EntryInfo, ListDirResponse};
use super::users::Account;
use super::Envd;
use crate::fs::sandbox::{route, Confined};
use crate::fs::{Failure, FsError, OneShot};
use crate::ipc::message::Inspect;
use exec_server_protocol::fs::*;
use exec_server_protocol::methods as m;
use exec_server_protocol::PathUri;
use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

impl Envd {
    /// The confined route of `account`'s file operations under a restricting `--envd-sandbox`
    /// (anchored at its home, where relative paths start); None when they run in the daemon.
    /// Another account is refused: the helper runs as the daemon's user, as commands do.
    pub(super) fn confined(&self, account: &Account) -> Result<Option<Confined>, ConnectError> {
        let home = uri(&account.home)?;
        let Some(sandbox) = self.sandbox(&home) else {
            return Ok(None);
        };
        if account.is_other() {
            return Err(ConnectError::new(
                Code::PermissionDenied,
                format!(
                    "user '{}': under --envd-sandbox, files are handled as the daemon's user",
                    account.name
                ),
            ));
        }
        Ok(route(Some(sandbox)).map_err(connect_error)?.confined())
    }
}

pub(super) fn uri(path: &Path) -> Result<PathUri, ConnectError> {
    PathUri::from_path(path).map_err(|err| {
        ConnectError::new(
            Code::InvalidArgument,
            format!("invalid path {}: {err}", path.display()),
        )
    })
}

/// Runs `M` in the sandbox.
pub(super) async fn run<M: OneShot>(
    confined: &Confined,
    params: M::Params,
) -> Result<Value, ConnectError> {
    confined.one_shot::<M>(params).await.map_err(connect_error)
}

/// `path` opened by the sandbox (`crate::fs::confined::Inspect`), as a file to read metadata
/// or entries from.
async fn inspect(
    confined: &Confined,
    path: &Path,
    follow: bool,
    list: bool,
) -> Result<File, ConnectError> {
    let inspect = Inspect {
        path: path.to_path_buf(),
        follow,
        list,
    };
    let fd = confined.inspect(&inspect).await.map_err(connect_error)?;
    Ok(File::from(fd))
}

/// `path`'s entry as the sandbox sees it, read from what the sandbox opened: the entry itself
/// (a link not followed) and, for a link, its target as the sandbox resolves it.
pub(super) async fn stat(confined: &Confined, path: &Path) -> Result<EntryInfo, ConnectError> {
    let own = OwnedFd::from(inspect(confined, path, false, false).await?);
    let (meta, text) = blocking(move || {
        let meta = File::from(own.try_clone().map_err(|err| metadata_error(&err))?)
            .metadata()
            .map_err(|err| metadata_error(&err))?;
        // The link's own text, read from the descriptor of the link itself.
        let text = (meta.is_symlink()).then(|| link_text(&own, OsStr::new("")));
        Ok((meta, text))
    })
    .await?;
    let link = match text {
        Some(text) => Some(link_target(confined, path, text).await),
        None => None,
    };
    Ok(describe(path, &meta, link))
}

/// Whether `path` (followed) is a directory, None where nothing is: as the sandbox sees it
/// when there is one (the daemon does not look), else as the daemon does.
pub(super) async fn is_dir(
    confined: Option<&Confined>,
    path: &Path,
) -> Result<Option<bool>, ConnectError> {
    let meta = match confined {
        Some(confined) => match inspect(confined, path, true, false).await {
            Ok(file) => blocking(move || file.metadata().map_err(|err| metadata_error(&err))).await,
            Err(error) => Err(error),
        },
        None => {
            let path = path.to_path_buf();
            blocking(move || {
                std::fs::metadata(&path).map_err(|err| match err.kind() {
                    std::io::ErrorKind::NotFound => {
                        ConnectError::new(Code::NotFound, err.to_string())
                    }
                    _ => metadata_error(&err),
                })
            })
            .await
        }
    };
    match meta {
        Ok(meta) => Ok(Some(meta.is_dir())),
        Err(error) if error.code == Code::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// The text of the link `name` in `dir` (the link itself when `name` is empty).
fn link_text(dir: &OwnedFd, name: &OsStr) -> PathBuf {
    nix::fcntl::readlinkat(dir, name).map_or_else(|_| PathBuf::new(), PathBuf::from)
}

/// Where the link at `path` (whose text is `text`) leads and what is there, as the sandbox
/// resolves it; a target it may not reach is the link's text, without metadata.
async fn link_target(
    confined: &Confined,
    path: &Path,
    text: PathBuf,
) -> (PathBuf, Option<Metadata>) {
    let Ok(target) = inspect(confined, path, true, false).await else {
        return (text, None);
    };
    let found = blocking(move || {
        // The path of what the sandbox opened, as the kernel names it.
        let resolved = std::fs::read_link(format!("/proc/self/fd/{}", target.as_raw_fd()));
        Ok((resolved.unwrap_or(text), target.metadata().ok()))
    })
    .await;
    found.unwrap_or_default()
}

/// The entries under `dir` down to `depth` levels, as the sandbox may list them: every
/// directory is opened by the sandbox and read from its descriptor (a subdirectory it may not
/// list shows no entries), each entry's metadata read relative to that descriptor without
/// following it, a link's target resolved by the sandbox. Entries are named by the path asked
/// for; those vanishing meanwhile are left out.
pub(super) async fn list_dir(
    confined: &Confined,
    dir: &Path,
    depth: u32,
) -> Result<ListDirResponse, ConnectError> {
    let mut entries = Vec::new();
    let mut pending: Vec<(PathBuf, u32)> = vec![(PathBuf::new(), 1)];
    while let Some((relative, level)) = pending.pop() {
        let at = dir.join(&relative);
        let opened = match inspect(confined, &at, true, true).await {
            Ok(opened) => opened,
            Err(error) if relative.as_os_str().is_empty() => return Err(error),
            Err(_) => continue,
        };
        for (name, meta, text) in blocking(move || read_entries(opened)).await? {
            let path = at.join(&name);
            if is_artifact(&path) {
                continue;
            }
            if meta.is_dir() && level < depth {
                pending.push((relative.join(&name), level + 1));
            }
            let link = match text {
                Some(text) => Some(link_target(confined, &path, text).await),
                None => None,
            };
            entries.push(describe(&path, &meta, link));
        }
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(ListDirResponse { entries })
}

/// The entries of the open directory `dir`, each with its own metadata (not followed) and, for
/// a link, its text.
type Entries = Vec<(OsString, Metadata, Option<PathBuf>)>;

fn read_entries(dir: File) -> Result<Entries, ConnectError> {
    use nix::fcntl::OFlag;
    let fd = OwnedFd::from(dir);
    let listing = nix::dir::Dir::from_fd(fd.try_clone().map_err(|err| metadata_error(&err))?)
        .map_err(|errno| metadata_error(&errno.into()))?;
    let mut entries = Vec::new();
    for entry in listing.into_iter().flatten() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        // One component, not followed: the entry in the directory the sandbox opened.
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(own) = nix::fcntl::openat(&fd, name, flags, nix::sys::stat::Mode::empty()) else {
            continue;
        };
        if let Ok(meta) = File::from(own).metadata() {
            let text = meta.is_symlink().then(|| link_text(&fd, name));
            entries.push((name.to_owned(), meta, text));
        }
    }
    Ok(entries)
}

fn metadata_error(err: &std::io::Error) -> ConnectError {
    ConnectError::new(Code::Internal, format!("error getting file info: {err}"))
}

/// Makes `dir` and its missing parents in the sandbox.
pub(super) async fn make_dirs(confined: &Confined, dir: &Path) -> Result<(), ConnectError> {
    let params = CreateDirectoryParams {
        path: uri(dir)?,
        recursive: Some(true),
        follow_symlinks: None,
        sandbox: None,
    };
    run::<m::FsCreateDirectory>(confined, params)
        .await
        .map(drop)
}

/// Opens `path` in the sandbox, for reading or (created or truncated) writing.
pub(super) async fn open(
    confined: &Confined,
    path: &Path,
    mode: OpenMode,
) -> Result<std::fs::File, ConnectError> {
    let params = OpenParams {
        handle_id: None,
        path: uri(path)?,
        mode: Some(mode),
        follow_symlinks: None,
        sandbox: None,
    };
    let (file, _) = confined.open(params).await.map_err(connect_error)?;
    Ok(file)
}

/// The helper's error as envd words it: a denial (the sandbox's, or the OS refusing access)
/// is `permission_denied`, a missing path `not_found`, the rest `internal`.
pub(super) fn connect_error(error: FsError) -> ConnectError {
    let failure = Failure::from(error);
    let code = match failure.errno {
        _ if failure.sandbox_denied => Code::PermissionDenied,
        Some(libc::EACCES | libc::EPERM | libc::EROFS) => Code::PermissionDenied,
        Some(libc::ENOENT) => Code::NotFound,
        Some(libc::ENOTDIR | libc::ELOOP) => Code::InvalidArgument,
        _ => Code::Internal,
    };
    ConnectError::new(code, failure.message)
}
