//! Path helpers the daemon's modules share.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

/// `path` without `.` components, and `..` applied lexically (without looking at the file
/// system; `..` at the root stays there).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `path` for a system call; a NUL inside it is EINVAL, as the kernel would say of a path it
/// cannot take.
pub(crate) fn cstring(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c/")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), Path::new("/x"));
        assert_eq!(
            cstring(Path::new("a\0b")).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
