//! Opening a path beneath a directory as openat2's `RESOLVE_BENEATH` does, but by hand, one
//! step at a time from descriptors: no step, symbolic links included, leaves the directory
//! (EXDEV, as openat2 answers). By hand because the sandbox helper, where agent-sandbox's
//! runtime file routes run under `--runtime-sandbox`, answers openat2 with ENOSYS
//! (`crate::sandbox::seccomp`); the daemon's own route runs the same code, so both confine
//! alike.

use crate::ipc::message::{Access, OpenBeneath};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// As the kernel's limit on links followed in one lookup.
const MAX_LINKS: usize = 40;

/// Opens `request.path` beneath `request.base` for its access.
pub(crate) fn open(request: &OpenBeneath) -> io::Result<OwnedFd> {
    let (base, path) = (&request.base, &request.path);
    let none = Mode::empty();
    match request.access {
        Access::Find => open_beneath(base, path, OFlag::O_PATH, none),
        // Never blocking on a FIFO, never taking a terminal as the controlling one.
        Access::Read => {
            let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
            open_beneath(base, path, flags, none)
        }
        Access::List => open_beneath(base, path, OFlag::O_RDONLY | OFlag::O_DIRECTORY, none),
        Access::Create => create_beneath(base, path),
    }
}

/// The names of `path`, `..` kept (resolved against the directories walked), `.` dropped.
fn names(path: &Path) -> VecDeque<OsString> {
    (path.components())
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// Opens `relative` beneath `base` with `flags` (`mode` for a file it creates), `relative`
/// empty being the base itself. Each step is opened without following it; a link is read and
/// its text walked in its place (an absolute one leads out), `..` goes back to the directory
/// walked before (above the base leads out).
fn open_beneath(base: &Path, relative: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    let step_flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let directory = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut walked = vec![nix::fcntl::open(base, directory, Mode::empty())?];
    let mut pending = names(relative);
    let mut links = 0;
    loop {
        let at = walked.last().expect("the base is never left");
        let Some(name) = pending.pop_front() else {
            // The path ended on a directory walked into (by `..` or a link): that one.
            return Ok(openat(at, ".", flags | OFlag::O_CLOEXEC, mode)?);
        };
        if name == ".." {
            if walked.len() == 1 {
                return Err(Errno::EXDEV.into());
            }
            walked.pop();
            continue;
        }
        let last = pending.is_empty();
        let step = match openat(at, name.as_os_str(), step_flags, Mode::empty()) {
            Ok(step) => step,
            Err(Errno::ENOENT) if last => return open_last(at, &name, flags, mode),
            Err(errno) => return Err(errno.into()),
        };
        let kind = SFlag::from_bits_truncate(fstat(&step)?.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP.into());
            }
            let text = PathBuf::from(nix::fcntl::readlinkat(&step, "")?);
            if text.is_absolute() {
                return Err(Errno::EXDEV.into());
            }
            for name in names(&text).into_iter().rev() {
                pending.push_front(name);
            }
        } else if last {
            return open_last(at, &name, flags, mode);
        } else if kind == SFlag::S_IFDIR {
            walked.push(step);
        } else {
            return Err(Errno::ENOTDIR.into());
        }
    }
}

/// The last step, opened as asked; a link swapped in since it was looked at is not followed.
fn open_last(at: &OwnedFd, name: &OsStr, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(openat(at, name, flags, mode)?)
}

/// Creates (or truncates) `relative` beneath `base`, its missing parents first, each made in
/// a directory opened beneath the base, so no symbolic link leads a `mkdir` out.
fn create_beneath(base: &Path, relative: &Path) -> io::Result<OwnedFd> {
    let directory = OFlag::O_PATH | OFlag::O_DIRECTORY;
    let mut parent = PathBuf::new();
    if let Some(parents) = relative.parent() {
        for name in parents.components() {
            let at = open_beneath(base, &parent, directory, Mode::empty())?;
            match mkdirat(&at, name.as_os_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(errno) => return Err(errno.into()),
            }
            parent.push(name);
        }
    }
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC;
    open_beneath(base, relative, flags, Mode::from_bits_truncate(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(base: &Path, path: &str, access: Access) -> OpenBeneath {
        OpenBeneath {
            base: base.to_owned(),
            path: path.into(),
            access,
        }
    }

    #[test]
    fn links_inside_are_followed_and_every_way_out_is_exdev() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        std::fs::create_dir_all(base.join("sub")).unwrap();
        std::fs::write(base.join("sub/file"), "in").unwrap();
        std::fs::write(dir.path().join("secret"), "out").unwrap();
        std::os::unix::fs::symlink("sub/file", base.join("inside")).unwrap();
        std::os::unix::fs::symlink("../secret", base.join("out")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), base.join("absolute")).unwrap();
        std::os::unix::fs::symlink("loop", base.join("loop")).unwrap();
        let read = |path| open(&request(&base, path, Access::Read));
        let text = |fd: OwnedFd| std::io::read_to_string(std::fs::File::from(fd));
        assert_eq!(text(read("inside").unwrap()).unwrap(), "in");
        assert_eq!(text(read("sub/../sub/./file").unwrap()).unwrap(), "in");
        for way_out in ["out", "absolute", "..", "sub/../../secret"] {
            let errno = read(way_out).unwrap_err().raw_os_error();
            assert_eq!(errno, Some(libc::EXDEV), "{way_out}");
        }
        assert_eq!(read("loop").unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(
            read("sub/file/x").unwrap_err().raw_os_error(),
            Some(libc::ENOTDIR)
        );
        assert!(open(&request(&base, "", Access::List)).is_ok());
    }

    #[test]
    fn create_makes_parents_beneath_and_never_through_a_link_out() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        std::fs::create_dir(&base).unwrap();
        std::os::unix::fs::symlink(dir.path(), base.join("up")).unwrap();
        open(&request(&base, "a/b/c", Access::Create)).unwrap();
        assert!(base.join("a/b/c").is_file());
        let errno = open(&request(&base, "up/new/planted", Access::Create)).unwrap_err();
        assert_eq!(errno.raw_os_error(), Some(libc::EXDEV));
        assert!(!dir.path().join("new").exists());
    }
}
