//! Anchors: the workspace roots and working directory an intent is bound to, resolved to
//! canonical directories strictly ([`anchor`]), following only symbolic links no sandbox can
//! have planted ([`system_link`]). `super::policy` materializes the intent's entries against
//! them.

use super::open::openat2_nofollow;
use crate::path::normalize;
use std::path::{Component, Path, PathBuf};

/// Symbolic links an [`anchor`] may follow at most (the kernel allows 40 in one lookup).
const MAX_LINK_HOPS: usize = 8;

/// Why a workspace root or working directory cannot anchor a sandbox.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnchorError {
    #[error("sandbox {what} `{}` cannot be resolved: {source}", path.display())]
    Unresolvable {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "sandbox {what} `{}` passes through the symbolic link `{}` (to `{}`), which a sandboxed \
         process could have put there; refusing to follow it (name the directory it points to)",
        path.display(),
        link.display(),
        target.display()
    )]
    ThroughLink {
        what: &'static str,
        path: PathBuf,
        link: PathBuf,
        target: PathBuf,
    },
    #[error(
        "sandbox {what} `{}` passes through the symbolic link `{}`, which this intent makes \
         writable; refusing to follow it",
        path.display(),
        link.display()
    )]
    WritableLink {
        what: &'static str,
        path: PathBuf,
        link: PathBuf,
    },
}

/// A directory an intent is anchored at (workspace root, cwd), resolved.
pub(super) struct Anchored {
    pub(super) what: &'static str,
    pub(super) requested: PathBuf,
    pub(super) canonical: PathBuf,
    /// The system links followed on the way (see [`system_link`]).
    pub(super) links: Vec<PathBuf>,
}

/// Resolves a workspace root or working directory (absolute, no `..`) to its canonical path,
/// following only system links ([`system_link`]): any other symbolic link on the way could
/// have been planted by a sandboxed process that could write there (`rm -r pkg; ln -s /x pkg`)
/// to redirect the grants of a later launch anchored at `pkg`. The result had no symbolic
/// link at the moment it was opened; the helper opens it again the same way and compares
/// identities, so a link or directory put in its place afterwards fails the launch.
pub(super) fn anchor(path: &Path, what: &'static str) -> Result<Anchored, AnchorError> {
    let mut current = normalize(path);
    let mut links = Vec::new();
    loop {
        let unresolvable = |source| AnchorError::Unresolvable {
            what,
            path: path.to_path_buf(),
            source,
        };
        // The common case costs one openat2: nothing on the way is a link.
        match openat2_nofollow(&current) {
            Ok(_) => {
                return Ok(Anchored {
                    what,
                    requested: path.to_path_buf(),
                    canonical: current,
                    links,
                })
            }
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {}
            Err(err) => return Err(unresolvable(err)),
        }
        let loop_error = || unresolvable(std::io::Error::from_raw_os_error(libc::ELOOP));
        if links.len() == MAX_LINK_HOPS {
            return Err(loop_error());
        }
        // Substitute the first link on the way and start over.
        let mut prefix = PathBuf::new();
        let mut substituted = None;
        for component in current.components() {
            prefix.push(component);
            let meta = std::fs::symlink_metadata(&prefix).map_err(unresolvable)?;
            if !meta.file_type().is_symlink() {
                continue;
            }
            let target = std::fs::read_link(&prefix).map_err(unresolvable)?;
            if !system_link(&prefix, &meta) {
                return Err(AnchorError::ThroughLink {
                    what,
                    path: path.to_path_buf(),
                    link: prefix,
                    target,
                });
            }
            let rest = current.strip_prefix(&prefix).expect("a prefix of the path");
            let parent = prefix.parent().unwrap_or(Path::new("/"));
            substituted = Some(normalize(&parent.join(target).join(rest)));
            links.push(prefix);
            break;
        }
        // No link any more: it changed meanwhile.
        current = substituted.ok_or_else(loop_error)?;
    }
}

/// A symbolic link no sandbox can have planted: owned by root, directly in `/` or in a
/// top-level directory (`/lib`, `/var/run`), and in a directory only root may change. Links
/// deeper down (a workspace, `/tmp/...`) are refused: the daemon cannot know which of those
/// an earlier intent made writable. A top-level directory an intent makes writable (`/srv`)
/// is the residue; the links in this intent's own write grants are refused afterwards.
fn system_link(link: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let depth = link
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let parent_is_roots = || {
        link.parent()
            .and_then(|parent| std::fs::metadata(parent).ok())
            .is_some_and(|parent| parent.uid() == 0 && parent.mode() & 0o022 == 0)
    };
    meta.uid() == 0 && depth <= 2 && parent_is_roots()
}
