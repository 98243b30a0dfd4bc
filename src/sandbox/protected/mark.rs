//! A placeholder's mark (the `trusted.` attribute [`MARK`] holding the daemon's [`OWNER`]), and
//! which mount namespaces still mount one.

use super::{MARK, OWNER};
use crate::path::cstring;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::collections::HashSet;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Marks the directory `name` in `dir`, opened without following a link.
pub(super) fn mark(dir: &OwnedFd, name: &str) -> std::io::Result<()> {
    let placeholder = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mark = std::ffi::CString::new(MARK).expect("no NUL");
    // SAFETY: a valid fd and NUL-terminated name, and a value of the length given.
    let rc = unsafe {
        libc::fsetxattr(
            placeholder.as_raw_fd(),
            mark.as_ptr(),
            OWNER.as_ptr().cast(),
            OWNER.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether `path` is a placeholder this daemon owns (it created it, or took it last).
pub(super) fn marked_by_us(path: &Path) -> bool {
    mark_of(path).is_some_and(|mark| mark == OWNER.as_bytes())
}

pub(super) fn is_marked(path: &Path) -> bool {
    mark_of(path).is_some()
}

/// The value of `path`'s [`MARK`], if it has one (one longer than any daemon writes reads as
/// empty: marked, and nobody's).
fn mark_of(path: &Path) -> Option<Vec<u8>> {
    let (Ok(path), Ok(name)) = (cstring(path), std::ffi::CString::new(MARK)) else {
        return None;
    };
    let mut value = [0u8; 64];
    // SAFETY: valid strings, and a buffer of the size given.
    let len = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    match usize::try_from(len) {
        Ok(len) => Some(value[..len].to_vec()),
        Err(_) if std::io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) => {
            Some(Vec::new())
        }
        Err(_) => None,
    }
}

/// Which of `paths` some other mount namespace has a mount on.
pub(super) fn mounted_elsewhere<'a>(paths: &[&'a Path]) -> HashSet<&'a Path> {
    let mut mounted = HashSet::new();
    if paths.is_empty() {
        return mounted;
    }
    let own = std::fs::read_link("/proc/self/ns/mnt").ok();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        // Unknown: none is removed.
        return paths.iter().copied().collect();
    };
    let mut seen = HashSet::new();
    for entry in procs.flatten() {
        let name = entry.file_name();
        if !name.as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(ns) = std::fs::read_link(entry.path().join("ns/mnt")) else {
            continue;
        };
        if Some(&ns) == own.as_ref() || !seen.insert(ns) {
            continue;
        }
        let Ok(table) = std::fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        for point in table.lines().filter_map(|line| line.split(' ').nth(4)) {
            let point = crate::sandbox::guard::unescape(point);
            if let Some(path) = paths.iter().find(|path| path.as_os_str() == point.as_str()) {
                mounted.insert(*path);
            }
        }
    }
    mounted
}
