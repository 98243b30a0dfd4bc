//! envd's `EntryInfo` (as `Stat`, `ListDir` and watch events describe a path) from metadata,
//! whoever read it: the daemon (`entry_info`), or the sandbox's descriptors (`confine`).

use super::connect::{Code, ConnectError};
use super::messages::*;
use super::users;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ConnectError> + Send + 'static,
) -> Result<T, ConnectError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ConnectError::new(Code::Internal, err.to_string()))?
}

pub(super) fn internal(what: &str, err: std::io::Error) -> ConnectError {
    ConnectError::new(Code::Internal, format!("{what}: {err}"))
}

/// `path`'s entry as envd describes it: a symlink's type and mode are its target's.
pub(super) fn entry_info(path: &Path) -> Result<EntryInfo, ConnectError> {
    let meta = std::fs::symlink_metadata(path).map_err(|err| match err.kind() {
        ErrorKind::NotFound => ConnectError::new(Code::NotFound, format!("file not found: {err}")),
        _ => internal("error getting file info", err),
    })?;
    let link = meta.file_type().is_symlink().then(|| {
        let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let typed = std::fs::metadata(&target).ok();
        (target, typed)
    });
    Ok(describe(path, &meta, link))
}

/// The entry at `path` whose own metadata is `meta`; a symlink's `link` is where it leads and
/// that target's metadata, if it may be read (its type and mode are the entry's).
pub(super) fn describe(
    path: &Path,
    meta: &std::fs::Metadata,
    link: Option<(PathBuf, Option<std::fs::Metadata>)>,
) -> EntryInfo {
    let (symlink_target, typed) = match link {
        Some((target, typed)) => (Some(target), typed),
        None => (None, Some(meta.clone())),
    };
    let kind = match &typed {
        Some(meta) if meta.is_file() => FileType::File,
        Some(meta) if meta.is_dir() => FileType::Directory,
        _ => FileType::Unspecified,
    };
    let modified = meta.modified().ok().and_then(Timestamp::of);
    EntryInfo {
        name: (path.file_name()).map_or_else(
            || "/".to_owned(),
            |name| name.to_string_lossy().into_owned(),
        ),
        kind: kind.into(),
        path: path.display().to_string(),
        size: meta.len() as i64,
        mode: typed.map_or(0, |meta| meta.permissions().mode() & 0o777),
        permissions: go_mode_string(meta.mode()),
        owner: users::user_name(meta.uid()),
        group: users::group_name(meta.gid()),
        modified_time: modified,
        symlink_target: symlink_target.map(|target| target.display().to_string()),
        metadata: Default::default(),
    }
}

/// A mode as Go's `os.FileMode.String` writes it (`drwxr-xr-x`, `Lrwxrwxrwx`, `dtrwxrwxrwx`).
fn go_mode_string(mode: u32) -> String {
    let format = mode & libc::S_IFMT;
    let mut out = String::new();
    for (set, letter) in [
        (format == libc::S_IFDIR, 'd'),
        (format == libc::S_IFLNK, 'L'),
        (format == libc::S_IFBLK || format == libc::S_IFCHR, 'D'),
        (format == libc::S_IFIFO, 'p'),
        (format == libc::S_IFSOCK, 'S'),
        (mode & libc::S_ISUID != 0, 'u'),
        (mode & libc::S_ISGID != 0, 'g'),
        (format == libc::S_IFCHR, 'c'),
        (mode & libc::S_ISVTX != 0, 't'),
    ] {
        if set {
            out.push(letter);
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    for (bit, letter) in (0..9).rev().zip("rwxrwxrwx".chars()) {
        out.push(if mode & (1 << bit) != 0 { letter } else { '-' });
    }
    out
}

/// The placeholders the daemon keeps for sandboxes' protected names are artifacts, which no
/// listing shows (as `fs/readDirectory` leaves them out).
pub(super) fn is_artifact(path: &Path) -> bool {
    crate::sandbox::protected::is_placeholder(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_go_writes_them() {
        assert_eq!(go_mode_string(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(go_mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(
            go_mode_string(libc::S_IFDIR | libc::S_ISVTX | 0o777),
            "dtrwxrwxrwx"
        );
        assert_eq!(go_mode_string(libc::S_IFLNK | 0o777), "Lrwxrwxrwx");
    }
}
