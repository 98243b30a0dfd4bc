//! A file written beside its target and renamed into place, so readers of the target see the
//! old content or the new, never a mix (`fs/writeFile {atomic}`, `fs/open {mode: "replaceOnClose"}`).

use super::host::{refuse_symlinked_parents, regular, symlink_refused, with_path};
use super::FsError;
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Staged files are named `<prefix><32 hex digits><suffix>` beside their target.
const STAGING_PREFIX: &str = ".exec-server-";
const STAGING_SUFFIX: &str = ".tmp";

pub(super) struct StagedFile {
    file: File,
    /// The replaced file's mode, kept on the new one.
    permissions: Option<Permissions>,
    name: StagedName,
}

/// Where a staged file lies and what it replaces. Dropping it removes the staged file, unless
/// it was installed or handed over.
pub(crate) struct StagedName {
    temp: PathBuf,
    target: PathBuf,
    armed: bool,
}

impl StagedFile {
    /// Stages a replacement for `path`. With `follow`, a symlink at `path` is resolved and its
    /// target replaced (the link stays); without, a symlink is refused. An existing directory or
    /// special file is refused like a plain write would refuse it.
    pub(super) fn create(path: &Path, follow: bool) -> Result<Self, FsError> {
        let (target, permissions) = resolve_target(path, follow)?;
        let parent = target.parent().unwrap_or(Path::new("/"));
        let temp = parent.join(format!(
            "{STAGING_PREFIX}{}{STAGING_SUFFIX}",
            uuid::Uuid::new_v4().simple()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&temp)
            .map_err(|err| FsError::io(err, &target))?;
        Ok(Self {
            file,
            permissions,
            name: StagedName::new(temp, target),
        })
    }

    /// A staged file the sandbox helper created: its open `file` came over the socket. The
    /// daemon removes `temp` unconfined when the upload is dropped, so it must be a staging name
    /// and that very file, not a path the helper merely claims.
    pub(super) fn from_parts(
        file: File,
        temp: PathBuf,
        target: PathBuf,
        mode: Option<u32>,
    ) -> Result<Self, FsError> {
        let staging_name = temp
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| {
                name.strip_prefix(STAGING_PREFIX)
                    .and_then(|rest| rest.strip_suffix(STAGING_SUFFIX))
                    .is_some_and(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
            });
        let same_file = match (file.metadata(), std::fs::symlink_metadata(&temp)) {
            (Ok(open), Ok(named)) => (open.dev(), open.ino()) == (named.dev(), named.ino()),
            _ => false,
        };
        if !staging_name || !same_file {
            return Err(FsError::internal(format!(
                "the sandboxed helper passed a staged file that is not `{}`",
                temp.display()
            )));
        }
        Ok(Self {
            file,
            permissions: mode.map(Permissions::from_mode),
            name: StagedName::new(temp, target),
        })
    }

    /// The parts [`from_parts`](Self::from_parts) takes; the staged file is no longer removed
    /// here, its new owner does that.
    pub(super) fn into_parts(self) -> (File, PathBuf, PathBuf, Option<u32>) {
        let (temp, target) = self.name.disarm();
        let mode = self.permissions.map(|p| p.mode());
        (self.file, temp, target, mode)
    }

    pub(super) fn file(&self) -> &File {
        &self.file
    }

    /// Makes the staged bytes durable, then atomically replaces the target and makes the
    /// rename durable too.
    pub(super) fn commit(self) -> Result<(), FsError> {
        self.seal()?.install()
    }

    /// Makes the staged bytes durable and gives them the replaced file's mode (both through
    /// the open file); what remains is the rename.
    pub(super) fn seal(self) -> Result<StagedName, FsError> {
        let target = &self.name.target;
        with_path(self.file.sync_all(), target)?;
        if let Some(permissions) = self.permissions {
            with_path(self.file.set_permissions(permissions), target)?;
        }
        Ok(self.name)
    }
}

impl StagedName {
    pub(crate) fn new(temp: PathBuf, target: PathBuf) -> Self {
        Self {
            temp,
            target,
            armed: true,
        }
    }

    /// Renames the staged file over the target and makes the rename durable.
    pub(crate) fn install(mut self) -> Result<(), FsError> {
        with_path(std::fs::rename(&self.temp, &self.target), &self.target)?;
        self.armed = false;
        let parent = self.target.parent().unwrap_or(Path::new("/"));
        with_path(
            File::open(parent).and_then(|dir| dir.sync_all()),
            &self.target,
        )
    }

    /// The staged file and its target, no longer removed on drop.
    pub(crate) fn disarm(mut self) -> (PathBuf, PathBuf) {
        self.armed = false;
        (
            std::mem::take(&mut self.temp),
            std::mem::take(&mut self.target),
        )
    }
}

impl Drop for StagedName {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The file to replace and its current mode, if it exists.
fn resolve_target(path: &Path, follow: bool) -> Result<(PathBuf, Option<Permissions>), FsError> {
    refuse_symlinked_parents(path, follow)?;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok((path.to_owned(), None)),
        Err(err) => return Err(FsError::io(err, path)),
    };
    let (target, meta) = if meta.file_type().is_symlink() {
        if !follow {
            return Err(symlink_refused(path));
        }
        let target = with_path(std::fs::canonicalize(path), path)?;
        let meta = with_path(std::fs::metadata(&target), path)?;
        (target, meta)
    } else {
        (path.to_owned(), meta)
    };
    regular(&meta, path)?;
    Ok((target, Some(meta.permissions())))
}
