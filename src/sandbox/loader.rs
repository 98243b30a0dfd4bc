//! The names through which the dynamic loader found what this process maps: the helpers,
//! which execute the daemon's binary again, are loaded through the same names, so every
//! symbolic link on them (`/lib64` -> `usr/lib64`, `/usr/lib64/ld-linux-x86-64.so.2` ->
//! `/lib/x86_64-linux-gnu/...`) is as much the daemon's as the files themselves
//! (`super::guard`).

use std::path::{Component, Path, PathBuf};

/// Hops through symbolic links followed for one name, as the kernel's limit.
const MAX_LINKS: usize = 40;

/// Every symbolic link on the names the loader opened for this process, each once.
pub(super) fn links() -> Vec<PathBuf> {
    let mut links: Vec<PathBuf> = names().iter().flat_map(|name| links_on(name)).collect();
    links.sort();
    links.dedup();
    links
}

/// The names the dynamic loader opened for this process (the interpreter as the binary names
/// it, each library as the loader's cache or search found it), which the helpers' loads
/// resolve again.
fn names() -> Vec<PathBuf> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        names: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid info, and `names` is the Vec below.
        let (info, names) = unsafe { (&*info, &mut *(names as *mut Vec<PathBuf>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: a NUL-terminated string of the loader's.
            let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) };
            use std::os::unix::ffi::OsStrExt as _;
            let name = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
            if name.is_absolute() {
                names.push(name.to_path_buf());
            }
        }
        0
    }
    let mut names: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads the loader's entries into `names`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut names as *mut Vec<PathBuf> as *mut _) };
    names
}

/// Each symbolic link met while resolving `name`, in order.
fn links_on(name: &Path) -> Vec<PathBuf> {
    // The components still to resolve, last first; `..` stays a component of its own.
    fn parts(path: &Path) -> impl Iterator<Item = std::ffi::OsString> + '_ {
        path.components()
            .rev()
            .filter_map(|component| match component {
                Component::Normal(part) => Some(part.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
    }
    let mut links = Vec::new();
    let mut current = PathBuf::from("/");
    let mut rest: Vec<std::ffi::OsString> = parts(name).collect();
    let mut hops = 0;
    while let Some(part) = rest.pop() {
        if part == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&part);
        match std::fs::read_link(&next) {
            Ok(target) if hops < MAX_LINKS => {
                hops += 1;
                links.push(next);
                if target.is_absolute() {
                    current = PathBuf::from("/");
                }
                rest.extend(parts(&target));
            }
            _ => current = next,
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_links_on_a_name_are_found_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("real/lib")).unwrap();
        std::fs::write(base.join("real/lib/ld.so"), "").unwrap();
        std::os::unix::fs::symlink("real", base.join("top")).unwrap();
        std::fs::create_dir(base.join("real/lib64")).unwrap();
        std::os::unix::fs::symlink(base.join("top/lib/ld.so"), base.join("real/lib64/ld.so"))
            .unwrap();
        assert_eq!(
            links_on(&base.join("top/lib64/ld.so")),
            [
                base.join("top"),
                base.join("real/lib64/ld.so"),
                base.join("top")
            ]
        );
        assert!(names()
            .iter()
            .any(|name| name.ends_with("ld-linux-x86-64.so.2")
                || name.to_string_lossy().contains("ld-")));
    }
}
