//! Landlock: the file-system allow-list, the signal / abstract-socket scopes, and TCP binding.
//!
//! Handled: every file-system right of the running ABI (at least [`MIN_ABI`]) when the file
//! system is restricted, both scopes in every sandboxed mode, and `BindTcp` (with no rule) for
//! a managed network without local binding. Read grants get
//! Execute|ReadFile|ReadDir; write grants get everything except MakeChar and MakeBlock (no
//! device nodes even where writing is allowed). The ruleset is created with
//! `HardRequirement`, every grant path is opened by the helper itself, without following
//! symbolic links (a path that cannot be opened fails the launch instead of being skipped), and
//! anything but `FullyEnforced` fails.

use super::error::{Missing, SetupError, Unsupported};
use super::open::{is_dir, open_verified};
use super::plan::{Grant, Identities};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// Scopes (ABI 6) keep a sandboxed root process from signalling the daemon; truncation (3) and
/// device ioctls (5) come with it.
pub(crate) const MIN_ABI: i32 = 6;

/// Device files always usable as in any Unix process (written: /dev/null and friends).
pub(crate) const DEVICES: &[(&str, bool)] = &[
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/full", true),
    ("/dev/tty", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
];

/// The kernel's Landlock ABI version (0 or negative: unavailable).
pub(crate) fn kernel_abi() -> i32 {
    // SAFETY: the documented version query: NULL attributes, size 0.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(version).unwrap_or(0)
}

/// Why the kernel cannot enforce the intent, if it cannot.
pub(crate) fn unsupported() -> Option<Unsupported> {
    let offered = kernel_abi();
    (offered < MIN_ABI).then(|| {
        Missing::LandlockAbi {
            required: MIN_ABI,
            offered,
        }
        .into()
    })
}

fn crate_abi(version: i32) -> ABI {
    match version {
        ..=6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        9 => ABI::V9,
        _ => ABI::V10,
    }
}

/// Restricts the calling (single) thread. `grants`: None when the file system is unrestricted.
/// `no_tcp_bind`: binding TCP sockets is refused (a managed network without local binding).
pub(crate) fn restrict(
    grants: Option<(&[Grant], &Identities)>,
    no_tcp_bind: bool,
) -> Result<(), SetupError> {
    if let Some(unsupported) = unsupported() {
        return Err(unsupported.into());
    }
    let version = kernel_abi();
    let abi = crate_abi(version);
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
    let mut created = ruleset.scope(Scope::from_all(ABI::V6))?.create()?;
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
