//! The kernel's mount API (`open_tree`, `move_mount`, `fsopen`, `fsmount`, `mount_setattr`)
//! and the few file operations on a detached mount that the view (`super::mounts`) and the
//! private `/dev` (`super::devices`) are built with.

use super::open::{check, open_nofollow};
use crate::path::cstring;
use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::path::Path;

pub(super) fn is_read_only(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path)
        .is_ok_and(|stat| stat.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

pub(super) fn set_attr(
    dirfd: RawFd,
    path: &Path,
    recursive: bool,
    set: u64,
    clear: u64,
) -> std::io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: mount_attr is plain integers, for which all zeroes is a valid value.
    let mut attr: libc::mount_attr = unsafe { std::mem::zeroed() };
    attr.attr_set = set;
    attr.attr_clr = clear;
    let mut flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    if path.as_bytes().is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: valid fd/path and a properly sized mount_attr.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    check(rc).map(drop)
}

/// Clones the mount tree at `path` below `dir` (`""`: `dir` itself).
pub(super) fn open_tree_at(
    dir: &OwnedFd,
    path: &Path,
    extra: libc::c_uint,
) -> std::io::Result<OwnedFd> {
    let path = cstring(path)?;
    let mut flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | extra;
    if path.as_bytes().is_empty() {
        flags |= libc::AT_EMPTY_PATH as libc::c_uint;
    }
    // SAFETY: valid fd and path.
    let fd = check(unsafe {
        libc::syscall(libc::SYS_open_tree, dir.as_raw_fd(), path.as_ptr(), flags)
    })?;
    // SAFETY: the kernel returned a new fd we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Mounts `tree` on `target`, resolved now (through what is already attached) and without
/// following symbolic links.
pub(super) fn attach(tree: &OwnedFd, target: &Path) -> std::io::Result<()> {
    let target = open_nofollow(target)?;
    let empty = CString::default();
    // SAFETY: valid fds and paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            target.as_raw_fd(),
            empty.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(rc).map(drop)
}

/// A new, configured instance of file system `fstype`, ready for [`fsmount`].
pub(super) fn fsopen(fstype: &str, options: &[(&str, &str)]) -> std::io::Result<OwnedFd> {
    let name = cstring(Path::new(fstype))?;
    // SAFETY: valid string.
    let fd =
        check(unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), libc::FSOPEN_CLOEXEC) })?;
    // SAFETY: new fd we own.
    let fs = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    for (key, value) in options {
        let (key, value) = (cstring(Path::new(key))?, cstring(Path::new(value))?);
        // SAFETY: valid fd and strings.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                libc::FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        })?;
    }
    // SAFETY: valid fd; the command takes no key or value.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })?;
    Ok(fs)
}

/// A detached mount of `fs`, never with devices, setuid or executables, plus `attrs`.
pub(super) fn fsmount(fs: &OwnedFd, attrs: u64) -> std::io::Result<OwnedFd> {
    fsmount_with(
        fs,
        libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC | attrs,
    )
}

/// A detached mount of `fs` with exactly `attrs`.
pub(super) fn fsmount_with(fs: &OwnedFd, attrs: u64) -> std::io::Result<OwnedFd> {
    // SAFETY: valid fd.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            attrs,
        )
    })?;
    // SAFETY: new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(super) fn make_dir(dir: &OwnedFd, path: &Path, mode: libc::mode_t) -> std::io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: valid fd and path.
    match check(unsafe { libc::mkdirat(dir.as_raw_fd(), path.as_ptr(), mode) }.into()) {
        Err(err) if err.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other.map(drop),
    }
    .and_then(|()| chmod_at(dir, &path, mode))
}

pub(super) fn make_file(dir: &OwnedFd, path: &Path, mode: libc::mode_t) -> std::io::Result<()> {
    let path = cstring(path)?;
    // SAFETY: valid fd and path.
    let fd = check(
        unsafe {
            libc::openat(
                dir.as_raw_fd(),
                path.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                mode,
            )
        }
        .into(),
    )?;
    // SAFETY: new fd we own; closing it at once.
    drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
    chmod_at(dir, &path, mode)
}

/// The umask must not widen or narrow the mask's modes.
fn chmod_at(dir: &OwnedFd, path: &CString, mode: libc::mode_t) -> std::io::Result<()> {
    // SAFETY: valid fd and path.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), path.as_ptr(), mode, 0) }.into()).map(drop)
}
