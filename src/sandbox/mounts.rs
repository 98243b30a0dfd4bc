//! The sandbox's file-system view, built by the helper in a private mount namespace before
//! Landlock, from the operations the daemon planned (`super::view`); and the masks every helper
//! puts over the daemon's own directories ([`Hidden`]) and, with the network restricted, over
//! the host's sockets.
//!
//! Landlock only adds access, so carve-outs need mounts. The helper makes every mount
//! read-only (so metadata changes outside write roots, which Landlock does not control,
//! fail with EROFS), then, from the shallowest path to the deepest:
//! * `Bind { writable: true }`: a write root gets a writable bind of itself (its submounts
//!   stay read-only; a root that is read-only on the host stays read-only);
//! * `Bind { writable: false }`: a read rule inside a write root (protected subpaths) gets a
//!   read-only bind of itself; a grant inside a masked path is revealed the same way;
//! * `Bind { writable: true }` also pins each directory between a writable area and a deny
//!   rule inside it (see `super::view::pins`), so the denied path cannot be moved away;
//! * `Mask`: a deny rule inside a readable or writable area is covered by an empty,
//!   read-only tmpfs directory with mode 000 (mode 111 with bare mount points when grants
//!   inside it must stay reachable), or by an empty mode-000 file. With capabilities dropped,
//!   the process gets EACCES there.
//!
//! Bind sources are cloned (`open_tree`) from the read-only host view before anything is
//! attached, so a grant under a mask still reaches the real directory.

use super::devices;
use super::error::SetupError;
use super::mount_api::{
    attach, fsmount, fsopen, is_read_only, make_dir, make_file, open_tree_at, set_attr,
};
use super::open::{check, is_dir, open_nofollow, open_verified};
use super::plan::{Identities, MountOp};
use crate::path::cstring;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};

/// Builds the view; the caller has unshared the mount namespace. A private `/dev` is made
/// here, so its identity (for the Landlock grant on it) is taken here too.
pub(crate) fn apply(ops: &[MountOp], ids: &mut Identities) -> Result<(), SetupError> {
    // Nothing done here may reach the host's mount table.
    propagation(libc::MS_PRIVATE).map_err(SetupError::MakePrivate)?;
    let host_read_only: Vec<bool> = ops
        .iter()
        .map(|op| match op {
            MountOp::Bind {
                path,
                writable: true,
            } => is_read_only(path),
            _ => false,
        })
        .collect();
    // Before the view is read-only: the host's own access to its shared memory.
    let shm_host_ro = is_read_only(Path::new(devices::SHM));
    set_attr(
        libc::AT_FDCWD,
        Path::new("/"),
        true,
        libc::MOUNT_ATTR_RDONLY,
        0,
    )
    .map_err(SetupError::ReadOnlyView)?;
    let sources = clone_sources(ops, ids, host_read_only)?;
    let mut kinds = std::collections::HashMap::new();
    for op in ops {
        if let MountOp::Mask { path, keep } = op {
            for path in keep.iter().chain(std::iter::once(path)) {
                let (_, stat) = open_verified(path, ids)?;
                kinds.insert(path.clone(), is_dir(&stat));
            }
        }
    }
    for (op, source) in ops.iter().zip(sources) {
        match (op, source) {
            (MountOp::Bind { path, .. }, Some(tree)) => {
                attach(&tree, path).map_err(|source| SetupError::Mount {
                    path: path.clone(),
                    source,
                })?
            }
            (MountOp::Mask { path, keep }, _) => {
                let masked = match path.parent() {
                    None => mask_tree(path, keep, &kinds).and_then(|tree| enter_root(&tree)),
                    Some(_) => mask(path, keep, &kinds),
                };
                masked.map_err(|source| SetupError::Mask {
                    path: path.clone(),
                    source,
                })?
            }
            (MountOp::Devices { path }, _) => {
                let id =
                    devices::make(path, ids, shm_host_ro).map_err(|source| SetupError::Mount {
                        path: path.clone(),
                        source,
                    })?;
                ids.insert(path.clone(), id);
            }
            (MountOp::Bind { .. }, None) => unreachable!("every bind has a source"),
        }
    }
    Ok(())
}

/// The source of each bind of `ops`, cloned from the read-only host view before anything is
/// attached, writable where the op says and the host allows (`host_read_only`).
fn clone_sources(
    ops: &[MountOp],
    ids: &Identities,
    host_read_only: Vec<bool>,
) -> Result<Vec<Option<OwnedFd>>, SetupError> {
    let mut sources: Vec<Option<OwnedFd>> = Vec::with_capacity(ops.len());
    for (op, host_ro) in ops.iter().zip(host_read_only) {
        sources.push(match op {
            MountOp::Bind { path, writable } => {
                let (fd, _) = open_verified(path, ids)?;
                let tree = open_tree_at(&fd, Path::new(""), libc::AT_RECURSIVE as u32).map_err(
                    |source| SetupError::Clone {
                        path: path.clone(),
                        source,
                    },
                )?;
                let (set, clear) = if *writable && !host_ro {
                    (0, libc::MOUNT_ATTR_RDONLY)
                } else {
                    (libc::MOUNT_ATTR_RDONLY, 0)
                };
                // Writable: only the top mount; read-only: everything below too.
                set_attr(tree.as_raw_fd(), Path::new(""), !*writable, set, clear).map_err(
                    |source| SetupError::SetAccess {
                        path: path.clone(),
                        source,
                    },
                )?;
                Some(tree)
            }
            MountOp::Mask { .. } | MountOp::Devices { .. } => None,
        });
    }
    Ok(sources)
}

/// For a helper's new mount namespace (the caller has unshared it): host mounts keep
/// propagating in until a launch's view makes them private, and nothing done here propagates
/// out.
pub(crate) fn follow_host() -> Result<(), SetupError> {
    propagation(libc::MS_SLAVE).map_err(SetupError::FollowHost)
}

/// Mounts a new procfs instance over `/proc`, read-only, with `hidepid=invisible`: a
/// `/proc/<pid>` directory then exists only for processes the viewer may ptrace-read, which
/// Landlock refuses across domains and capabilities refuse towards any process that holds
/// some. So the sandbox sees its own processes only: not the daemon (its cmdline, its
/// `net/tcp`), not another launch. Procfs options are per instance (Linux 5.8), so the host's
/// `/proc` is unchanged. The exempt group (`gid=`, root's by default) is one the process is
/// not in, and cannot join without CAP_SETGID.
pub(crate) fn own_proc() -> Result<(), SetupError> {
    let groups = nix::unistd::getgroups().unwrap_or_default();
    let own = [nix::unistd::getgid(), nix::unistd::getegid()];
    let exempt = (1..u32::MAX)
        .rev()
        .map(nix::unistd::Gid::from_raw)
        .find(|gid| !groups.contains(gid) && !own.contains(gid))
        .ok_or(SetupError::NoFreeGroup)?
        .to_string();
    let options = [("hidepid", "invisible"), ("gid", exempt.as_str())];
    let mounted = fsopen("proc", &options).and_then(|fs| {
        let tree = fsmount(&fs, libc::MOUNT_ATTR_RDONLY)?;
        attach(&tree, Path::new("/proc"))
    });
    mounted.map_err(SetupError::OwnProc)
}

/// Covers the directory `path` with an empty mask (see [`mask`]) in this mount namespace.
pub(crate) fn hide(path: &Path) -> Result<(), SetupError> {
    mask(path, &[], &Default::default()).map_err(|source| SetupError::Mask {
        path: path.to_owned(),
        source,
    })
}

/// A directory of the daemon's own that no sandbox may see: its canonical path, masked when a
/// helper starts, and what finds it under any other mount point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Hidden {
    pub path: PathBuf,
    dev: u64,
    ino: u64,
    /// Its path inside its file system (mount root + path below the mount point).
    in_fs: PathBuf,
}

impl Hidden {
    /// The canonical directory `path`, as it is now.
    pub(crate) fn of(path: PathBuf) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(&path)?;
        let in_fs = super::guard::Mounts::read()
            .fs_path(&path)
            .ok_or_else(|| std::io::Error::other("not in the mount table"))?;
        Ok(Self {
            path,
            dev: meta.dev(),
            ino: meta.ino(),
            in_fs,
        })
    }
}

/// Masks every place other than their own path where this view shows `hidden` directories, or
/// part of them: each mount whose root contains one (a bind mount of it or of an ancestor) at
/// the path below it, when that is the very directory (device and inode); and each mount of
/// the same device whose root lies inside one (a bind mount of a subdirectory), whole.
pub(crate) fn hide_aliases(hidden: &[Hidden]) -> Result<(), SetupError> {
    use std::os::unix::fs::MetadataExt as _;
    if hidden.is_empty() {
        return Ok(());
    }
    let mounts = super::guard::Mounts::read();
    for item in hidden {
        for (point, root) in mounts.entries() {
            let alias = match item.in_fs.strip_prefix(root) {
                Ok(below) => point.join(below),
                Err(_) if root.starts_with(&item.in_fs) => point.clone(),
                Err(_) => continue,
            };
            let Ok(meta) = std::fs::symlink_metadata(&alias) else {
                continue;
            };
            let same = (meta.dev(), meta.ino()) == (item.dev, item.ino);
            let inside = meta.dev() == item.dev && alias == *point && root != &item.in_fs;
            if alias != item.path && (same || inside) {
                hide(&alias)?;
            }
        }
    }
    Ok(())
}

/// Covers each host socket of `sockets` (`super::sockets`) with an empty, read-only mode-000
/// file, all clones of one: a `connect` or `sendto` to its path then fails with EACCES (the
/// sandbox has no CAP_DAC_OVERRIDE). One tmpfs for all and two calls per socket, where a mask
/// each would cost a file system each. A socket gone since the daemon listed it, under a mask
/// already, or whose path now passes through a link (a network-enabled sandbox may bind and
/// then replace sockets in its own write roots, which are another launch's outside) is not
/// there to cover, and does not fail the launch.
pub(crate) fn hide_sockets(sockets: &[PathBuf]) -> Result<(), SetupError> {
    let Some(first) = sockets.first() else {
        return Ok(());
    };
    let failed = |path: &Path| {
        let path = path.to_owned();
        move |source| SetupError::Mask { path, source }
    };
    let cover = fsopen("tmpfs", &[("mode", "755")])
        .and_then(|fs| fsmount(&fs, 0))
        .and_then(|mnt| {
            make_file(&mnt, Path::new("socket"), 0o000)?;
            set_attr(
                mnt.as_raw_fd(),
                Path::new(""),
                true,
                libc::MOUNT_ATTR_RDONLY,
                0,
            )?;
            Ok(mnt)
        })
        .map_err(failed(first))?;
    for path in sockets {
        let tree = open_tree_at(&cover, Path::new("socket"), 0).map_err(failed(path))?;
        match attach(&tree, path) {
            Err(err)
                if matches!(
                    err.raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                ) => {}
            attached => attached.map_err(failed(path))?,
        }
    }
    Ok(())
}

fn mask(
    path: &Path,
    keep: &[PathBuf],
    kinds: &std::collections::HashMap<PathBuf, bool>,
) -> std::io::Result<()> {
    attach(&mask_tree(path, keep, kinds)?, path)
}

/// Makes `tree` the root of this mount namespace, and of this process (`pivot_root`, as runc
/// does it): the mount view alone masking `/`, whose grants are bound onto it afterwards from
/// sources cloned before. The old root is detached; nothing of the host is left in reach but
/// what those binds bring. `tree` is attached on `/proc` first, which every helper's view has,
/// because `pivot_root` takes a mount point of this namespace.
fn enter_root(tree: &OwnedFd) -> std::io::Result<()> {
    let old_root = open_nofollow(Path::new("/"))?;
    attach(tree, Path::new("/proc"))?;
    let new_root = open_nofollow(Path::new("/proc"))?;
    nix::unistd::fchdir(&new_root)?;
    let here = cstring(Path::new("."))?;
    // SAFETY: two valid NUL-terminated paths.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, here.as_ptr(), here.as_ptr()) })?;
    // The old root is now stacked on the new one, at `/`: detach it from there.
    nix::unistd::fchdir(&old_root)?;
    // SAFETY: a valid NUL-terminated path.
    check(unsafe { libc::umount2(here.as_ptr(), libc::MNT_DETACH) }.into())?;
    std::env::set_current_dir("/")
}

/// A detached mask for `path` (see [`mask`]), ready to attach.
fn mask_tree(
    path: &Path,
    keep: &[PathBuf],
    kinds: &std::collections::HashMap<PathBuf, bool>,
) -> std::io::Result<OwnedFd> {
    let is_dir = kinds.get(path).copied().unwrap_or(true);
    let mode = if keep.is_empty() { "0" } else { "111" };
    let fs = fsopen("tmpfs", &[("mode", if is_dir { mode } else { "755" })])?;
    let mnt = fsmount(&fs, 0)?;
    let tree = if is_dir {
        for kept in keep {
            let relative = kept.strip_prefix(path).expect("kept paths are inside");
            let mut current = PathBuf::new();
            let components: Vec<_> = relative.components().collect();
            for (index, component) in components.iter().enumerate() {
                current.push(component);
                let last = index + 1 == components.len();
                if last && !kinds.get(kept).copied().unwrap_or(true) {
                    make_file(&mnt, &current, 0o000)?;
                } else {
                    make_dir(&mnt, &current, 0o111)?;
                }
            }
        }
        mnt
    } else {
        make_file(&mnt, Path::new("masked"), 0o000)?;
        open_tree_at(&mnt, Path::new("masked"), 0)?
    };
    if path.parent().is_none() {
        copy_root_links(&tree, keep)?;
    }
    set_attr(
        tree.as_raw_fd(),
        Path::new(""),
        true,
        libc::MOUNT_ATTR_RDONLY,
        0,
    )?;
    Ok(tree)
}

/// The host root's symbolic links (`/bin` -> `usr/bin` on a merged-/usr system), made again in
/// a new root: Landlock lets a path pass through any link, so `/bin/sh` works wherever its
/// target is granted, and the mount view alone must say the same. A link grants nothing: what
/// it names is in the view or not. Names the view mounts on are left as they are.
fn copy_root_links(root: &OwnedFd, keep: &[PathBuf]) -> std::io::Result<()> {
    for entry in std::fs::read_dir("/")?.flatten() {
        let name = Path::new("/").join(entry.file_name());
        let is_link = entry.file_type().is_ok_and(|kind| kind.is_symlink());
        if !is_link || keep.iter().any(|kept| kept.starts_with(&name)) {
            continue;
        }
        let target = cstring(&std::fs::read_link(&name)?)?;
        let name = cstring(Path::new(&entry.file_name()))?;
        // SAFETY: valid fd and NUL-terminated strings.
        check(unsafe { libc::symlinkat(target.as_ptr(), root.as_raw_fd(), name.as_ptr()) }.into())?;
    }
    Ok(())
}

/// Sets the propagation of every mount (`MS_PRIVATE`, `MS_SLAVE`).
fn propagation(kind: libc::c_ulong) -> std::io::Result<()> {
    let root = cstring(Path::new("/"))?;
    // SAFETY: valid strings; NULL source, type and data are allowed for a propagation change.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | kind,
            std::ptr::null(),
        )
    };
    check(rc.into()).map(drop)
}
