//! Host Unix sockets a sandbox with network restricted must not reach.
//!
//! A pathname socket is reached through the file system (`connect`, `sendto` to its path), and
//! neither the network namespace, nor Landlock before its `RESOLVE_UNIX` right, nor seccomp
//! (which cannot read the address) stops that; the read-only view does not either, a socket is
//! no file to write. So the daemon lists the sockets bound in its network namespace (the
//! host's: `/proc/net/unix`) and the helper covers each one outside the launch's write roots
//! with an empty mode-000 file (`super::mounts::hide_sockets`): without CAP_DAC_OVERRIDE the
//! sandbox gets EACCES. Abstract sockets are Landlock's scope (`super::landlock`).

use super::policy::{effective, Rule};
use exec_server_protocol::sandbox::FsAccess;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

/// The sockets bound in the daemon's network namespace, at their canonical paths, that `rules`
/// do not make writable, but those in what every sandbox's view hides already (the state
/// directory, where each kept process has a socket).
pub(super) fn outside_write_roots(rules: &[Rule]) -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    // A listener's accepted connections carry its path too: each path is looked at once.
    let bound: std::collections::BTreeSet<&str> = bound_paths(&table).collect();
    let hidden = super::hidden();
    let mut sockets: Vec<PathBuf> = bound
        .into_iter()
        .filter(|path| {
            !hidden
                .iter()
                .any(|dir| Path::new(path).starts_with(&dir.path))
        })
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .filter(|path| {
            std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
        })
        .filter(|path| effective(rules, path) != Some(FsAccess::Write))
        .collect();
    sockets.sort();
    sockets.dedup();
    sockets
}

/// The pathname column of `/proc/net/unix` (after seven fields; abstract names start with `@`).
fn bound_paths(table: &str) -> impl Iterator<Item = &str> {
    table.lines().skip(1).filter_map(|line| {
        let path = line.split_whitespace().nth(7)?;
        path.starts_with('/').then_some(path)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_pathname_sockets_are_listed() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20 /run/docker.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 21 @abstract\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 22\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 23 /run/systemd/notify\n";
        let paths: Vec<&str> = super::bound_paths(table).collect();
        assert_eq!(paths, ["/run/docker.sock", "/run/systemd/notify"]);
    }
}
