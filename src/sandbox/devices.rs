//! The private `/dev` of a sandbox whose `/dev` is writable (a write grant on `/`, see
//! `super::root_write`): bubblewrap's `--dev`, as codex's own sandbox has it.

use super::landlock::DEVICES;
use super::mount_api::{
    attach, fsmount, fsmount_with, fsopen, make_dir, make_file, open_tree_at, set_attr,
};
use super::open::{check, open_nofollow, open_verified};
use super::plan::{Identities, Identity};
use crate::path::cstring;
use std::os::fd::AsRawFd as _;
use std::path::Path;

pub(super) const SHM: &str = "/dev/shm";

fn is_dir_nofollow(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir())
}

/// The links of a private `/dev`, as bubblewrap's `--dev` makes them (codex's sandbox too).
const DEV_LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
    ("core", "/proc/kcore"),
];

/// A private `/dev` at `path`: a tmpfs (no devices of its own, so nothing made in it is one)
/// holding the host's standard devices, bound one by one, a new `devpts` instance (the
/// sandbox's own terminals, none of the host's), the host's `shm` and [`DEV_LINKS`]. Nothing
/// made there but in `shm` reaches the host.
pub(super) fn make(path: &Path, ids: &Identities, shm_host_ro: bool) -> std::io::Result<Identity> {
    let mut nodes = Vec::new();
    for device in DEVICES.iter().map(|(device, _)| Path::new(device)) {
        if ids.contains_key(device) {
            let (fd, _) = open_verified(device, ids).map_err(std::io::Error::other)?;
            nodes.push((device, open_tree_at(&fd, Path::new(""), 0)?));
        }
    }
    // The host's shared memory, as codex's sandbox keeps it (`/dev/shm` is part of the `/` the
    // intent made writable); a tmpfs of its own where the host has none.
    let shm = Path::new(SHM);
    let shm = match is_dir_nofollow(shm) {
        true => {
            let tree = open_tree_at(
                &open_nofollow(shm)?,
                Path::new(""),
                libc::AT_RECURSIVE as u32,
            )?;
            let clear = if shm_host_ro {
                0
            } else {
                libc::MOUNT_ATTR_RDONLY
            };
            set_attr(tree.as_raw_fd(), Path::new(""), false, 0, clear)?;
            tree
        }
        false => fsmount_with(
            &fsopen("tmpfs", &[("mode", "1777")])?,
            libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        )?,
    };
    let dev = fsmount(&fsopen("tmpfs", &[("mode", "755")])?, 0)?;
    for (device, _) in &nodes {
        make_file(
            &dev,
            Path::new(device.file_name().unwrap_or_default()),
            0o666,
        )?;
    }
    make_dir(&dev, Path::new("pts"), 0o755)?;
    make_dir(&dev, Path::new("shm"), 0o1777)?;
    for (name, target) in DEV_LINKS {
        let (name, target) = (cstring(Path::new(name))?, cstring(Path::new(target))?);
        // SAFETY: valid fd and NUL-terminated strings.
        check(unsafe { libc::symlinkat(target.as_ptr(), dev.as_raw_fd(), name.as_ptr()) }.into())?;
    }
    attach(&dev, path)?;
    for (device, tree) in &nodes {
        attach(tree, &path.join(device.file_name().unwrap_or_default()))?;
    }
    let pts = fsopen("devpts", &[("ptmxmode", "0666"), ("mode", "0620")])?;
    attach(
        &fsmount_with(&pts, libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC)?,
        &path.join("pts"),
    )?;
    attach(&shm, &path.join("shm"))?;
    Ok(Identity::of_stat(&nix::sys::stat::fstat(&open_nofollow(
        path,
    )?)?))
}
