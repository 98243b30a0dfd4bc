//! Landlock: the file-system allow-list, the signal / abstract-socket scopes, and TCP binding,
//! each where the ABI in use has it (`super::facilities` says which layer carries what
//! otherwise).
//!
//! Handled: every file-system right of the ABI in use when the file system is restricted and
//! Landlock carries it, both scopes from ABI 6 in every sandboxed mode, and `BindTcp` (with no
//! rule) for a managed network without local binding. Read grants get
//! Execute|ReadFile|ReadDir; write grants get everything except MakeChar and MakeBlock (no
//! device nodes even where writing is allowed). The ruleset is created with
//! `HardRequirement`, every grant path is opened by the helper itself, without following
//! symbolic links (a path that cannot be opened fails the launch instead of being skipped), and
//! anything but `FullyEnforced` fails.

use super::error::SetupError;
use super::facilities::Enforcement;
use super::open::{is_dir, open_verified};
use super::plan::{Grant, Identities};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// Where the devices are.
pub(crate) const DEV: &str = "/dev";

/// Device files always usable as in any Unix process (written: /dev/null and friends).
pub(crate) const DEVICES: &[(&str, bool)] = &[
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/full", true),
    ("/dev/tty", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
];

fn crate_abi(version: i32) -> ABI {
    match version {
        ..=1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        9 => ABI::V9,
        _ => ABI::V10,
    }
}

/// Restricts the calling (single) thread as far as `enforcement` has Landlock carry it.
/// `grants`: None when the file system is unrestricted. `no_tcp_bind`: binding TCP sockets is
/// refused (a managed network without local binding; the daemon refused it without ABI 4).
pub(crate) fn restrict(
    enforcement: Enforcement,
    grants: Option<(&[Grant], &Identities)>,
    no_tcp_bind: bool,
) -> Result<(), SetupError> {
    let grants = grants.filter(|_| enforcement.landlock_fs);
    // Below ABI 4 seccomp refuses binds instead (`super::seccomp::Late`).
    let no_tcp_bind = no_tcp_bind && enforcement.tcp_bind();
    if grants.is_none() && !no_tcp_bind && !enforcement.scopes() {
        // Nothing for Landlock here: the other layers carry it all.
        return Ok(());
    }
    let abi = crate_abi(enforcement.landlock_abi);
    let all = AccessFs::from_all(abi);
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let read = AccessFs::from_read(abi);
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    if grants.is_some() {
        ruleset = ruleset.handle_access(all)?;
    }
    if no_tcp_bind {
        // Handled without any rule: every explicit bind(2) of a TCP socket fails (EACCES).
        ruleset = ruleset.handle_access(AccessNet::BindTcp)?;
    }
    if enforcement.scopes() {
        ruleset = ruleset.scope(Scope::from_all(ABI::V6))?;
    }
    let mut created = ruleset.create()?;
    for (grant, ids) in grants
        .into_iter()
        .flat_map(|(grants, ids)| grants.iter().map(move |grant| (grant, ids)))
    {
        let (fd, stat) = open_verified(&grant.path, ids)?;
        let mut access: BitFlags<AccessFs> = if grant.write { write } else { read };
        if !is_dir(&stat) {
            access &= AccessFs::from_file(abi);
            if matches!(stat.st_mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK) {
                access &= !AccessFs::Execute;
            }
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|source| SetupError::Grant {
                path: grant.path.clone(),
                source,
            })?;
    }
    let status = created.restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(SetupError::NotEnforced(status.ruleset));
    }
    Ok(())
}
