//! A write grant on `/` (codex's `root` write), which `super::guard` would refuse because
//! everything the daemon loads lies below it: instead the grant is narrowed, in the rules
//! themselves, so the mount view keeps what the guard protects read-only and everything else
//! writable ([`narrow`] before the workspace metadata is protected, [`carve`] after).
//!
//! * `/` itself becomes read-only, each directory directly below it a write root of its own:
//!   the root's links (`/lib64` -> `usr/lib64`, through which the kernel finds the loader) and
//!   its other entries cannot be replaced, nor can a new entry be made there.
//! * `/proc` and `/sys` stay read-only (the kernel's own interfaces), and `/dev` is the private
//!   minimal one ([`super::plan::MountOp::Devices`]): the standard devices, nothing of the
//!   host's disks or memory, new files only in the sandbox's own tmpfs (unless a rule of the
//!   intent names `/dev` itself, which then decides as in any intent).
//! * The directory of every protected file (the daemon's binary, each library it maps, the
//!   loader, the loader's configuration, `/etc/ld.so.preload` whether present or not, every
//!   symbolic link on the names the loader used: `/usr/lib64/ld-linux-x86-64.so.2` ->
//!   `/lib/...`) is bound read-only: writes, renames, unlinks, links and new
//!   names there fail with EROFS or EBUSY. The directories between a writable one and these are
//!   pinned (`super::view`), so none can be moved away and replaced.
//! * The state directory, which every helper masks, is pinned the same way.
//!
//! The sandbox gets less than it asked for there (a new file in `/etc`, a file at `/` itself),
//! never more; the rest of the disk is written as asked. A host whose kernel runs a helper
//! program of its own ([`kernel_helpers::first`]) refuses the grant.

use super::guard::{Guard, GuardError};
use super::kernel_helpers;
use super::landlock::DEV;
use super::policy::{effective, Rule};
use super::view::Extra;
use exec_server_protocol::sandbox::FsAccess;
use std::path::{Path, PathBuf};

/// Kernel interfaces that stay read-only under a root write, and the private `/dev`.
const KERNEL: &[&str] = &["/proc", "/sys", "/dev"];

/// Whether this host allows a root write now (no [`kernel_helpers::first`], no protected file
/// with other links: [`Guard::check_root_write`]), for `environment/info`.
pub(crate) fn supported() -> bool {
    kernel_helpers::first().is_none() && super::guard::init().check_root_write().is_ok()
}

/// Turns a write rule on `/` into a read rule, after checking that no protected file has
/// other hard links and that the kernel runs no helper; true when there was one (then
/// [`carve`] must follow).
pub(super) fn narrow(rules: &mut [Rule], guard: &Guard) -> Result<bool, GuardError> {
    let Some(root) = rules
        .iter_mut()
        .find(|rule| rule.path == Path::new("/") && rule.access == FsAccess::Write)
    else {
        return Ok(false);
    };
    if let Some((what, program)) = kernel_helpers::first() {
        return Err(GuardError::KernelHelper { what, program });
    }
    guard.check_root_write()?;
    root.access = FsAccess::Read;
    Ok(true)
}

/// The rest of the root write's rules (module docs), added where the client's own rules say
/// nothing narrower, and what the view adds: the private `/dev` unless a rule names `/dev`
/// itself (then it decides), the state directory held in place.
pub(super) fn carve(rules: &mut Vec<Rule>, guard: &Guard) -> Extra {
    let add = |rules: &mut Vec<Rule>, path: PathBuf, access: FsAccess| {
        if !rules.iter().any(|rule| rule.path == path) {
            rules.push(Rule { path, access });
        }
    };
    for entry in std::fs::read_dir("/").into_iter().flatten().flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if is_dir && !KERNEL.iter().any(|kernel| path == Path::new(kernel)) {
            add(rules, path, FsAccess::Write);
        }
    }
    let mut read_only: Vec<PathBuf> = guard
        .protected_paths()
        .filter(|path| Some(*path) != guard.state_dir())
        .filter_map(|path| path.parent().map(Path::to_path_buf))
        .collect();
    read_only.sort();
    read_only.dedup();
    for dir in read_only {
        if effective(rules, &dir) == Some(FsAccess::Write) && !in_kernel(&dir) {
            rules.retain(|rule| rule.path != dir);
            rules.push(Rule {
                path: dir,
                access: FsAccess::Read,
            });
        }
    }
    let private_dev = !rules.iter().any(|rule| rule.path == Path::new(DEV));
    // Masked by every helper already (`super::mounts::hide`): only kept in place.
    let held = guard
        .state_dir()
        .filter(|state| effective(rules, state) == Some(FsAccess::Write))
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    Extra { held, private_dev }
}

fn in_kernel(path: &Path) -> bool {
    KERNEL.iter().any(|kernel| path.starts_with(kernel))
}
