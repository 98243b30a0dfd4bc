//! What the host's kernel offers the sandbox, and which layer carries each guarantee
//! ([`Enforcement`]), decided once at start and handed to every helper.
//!
//! Landlock is used at whatever ABI the kernel has, for what that ABI enforces; the rest falls
//! to the other layers (docs/sandbox.md, "Backends"):
//! * the file-system allow-list: Landlock from ABI 2 (ABI 1 refuses every rename or link
//!   between directories, even inside a write root), else the mount view alone (only granted
//!   paths are in it: the **mount-view** backend);
//! * signals: Landlock's scope from ABI 6, else a PID namespace per launch;
//! * abstract Unix sockets: Landlock's scope from ABI 6, else the launch's own network
//!   namespace; a launch that shares the host's network cannot be held from them then but by
//!   seccomp refusing `socket(AF_UNIX)` (`socketpair` still works): narrower than the intent,
//!   never wider;
//! * TCP binding under a managed network without local binding: Landlock from ABI 4, else
//!   seccomp refusing every `bind` (Unix ones too: narrower, never wider).

use exec_server_protocol::environment::SandboxFacilities;
use exec_server_protocol::process::SandboxBackend;
use serde::{Deserialize, Serialize};

/// What an operator asks of the file-system layer (`--sandbox-backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BackendChoice {
    /// Landlock where the kernel has ABI 2 or newer, the mount view otherwise.
    #[default]
    Auto,
    /// Landlock only: without ABI 2 every restricting intent is refused.
    Landlock,
    /// The mount view, even where Landlock exists (bubblewrap's semantics); Landlock still
    /// carries the scopes and TCP binding where the kernel has them.
    MountView,
}

/// How this daemon's sandboxes are enforced: the Landlock ABI they use (0: none) and whether
/// Landlock carries the file-system allow-list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Enforcement {
    pub landlock_abi: i32,
    pub landlock_fs: bool,
    /// `--sandbox-backend landlock` on a kernel without Landlock ABI 2: nothing is enforceable.
    #[serde(default)]
    pub landlock_required: bool,
}

/// The ABI from which Landlock carries the file system (see the module's documentation).
const FS_ABI: i32 = 2;
/// Scopes for signals and abstract Unix sockets.
const SCOPE_ABI: i32 = 6;
/// `BindTcp`.
const TCP_ABI: i32 = 4;

static ENFORCEMENT: std::sync::OnceLock<Enforcement> = std::sync::OnceLock::new();

impl Enforcement {
    /// What the kernel offers (`kernel_abi`), at most `abi_cap`, under the operator's choice.
    pub(crate) fn decide(kernel_abi: i32, abi_cap: Option<i32>, choice: BackendChoice) -> Self {
        let abi = kernel_abi.max(0).min(abi_cap.unwrap_or(i32::MAX));
        let landlock_fs = abi >= FS_ABI && choice != BackendChoice::MountView;
        Self {
            landlock_abi: abi,
            landlock_fs,
            landlock_required: choice == BackendChoice::Landlock && !landlock_fs,
        }
    }

    /// Set once at start by the daemon (and by the fork server, from the daemon's first frame).
    pub(crate) fn install(self) {
        let _ = ENFORCEMENT.set(self);
    }

    /// This process's enforcement: as installed, else what the kernel offers.
    pub(crate) fn current() -> Self {
        *ENFORCEMENT.get_or_init(|| Self::decide(kernel_abi(), None, BackendChoice::Auto))
    }

    pub(crate) fn backend(self) -> SandboxBackend {
        if self.landlock_fs {
            SandboxBackend::Landlock
        } else {
            SandboxBackend::MountView
        }
    }

    /// Landlock's signal and abstract-socket scopes are available.
    pub(crate) fn scopes(self) -> bool {
        self.landlock_abi >= SCOPE_ABI
    }

    /// Landlock can refuse TCP binds.
    pub(crate) fn tcp_bind(self) -> bool {
        self.landlock_abi >= TCP_ABI
    }

    /// Each launch gets its own PID namespace: signals cannot be scoped by Landlock.
    pub(crate) fn own_pid_namespace(self) -> bool {
        !self.scopes()
    }
}

/// A form of intent that needs a facility this host lacks: refused, never widened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Form {
    #[error(
        "--sandbox-backend landlock needs Landlock ABI {FS_ABI} or newer; this host offers {}",
        Enforcement::current().landlock_abi
    )]
    LandlockRequired,
}

/// What the host offers the sandbox, for `environment/info` and `/readyz`.
pub(crate) fn report(enforceable: bool) -> SandboxFacilities {
    let enforcement = Enforcement::current();
    SandboxFacilities {
        backend: (enforceable && !enforcement.landlock_required).then(|| enforcement.backend()),
        landlock_abi: kernel_abi().max(0),
        landlock_abi_used: enforcement.landlock_abi,
        user_namespaces: read_number("/proc/sys/user/max_user_namespaces").is_some_and(|n| n > 0),
        pid_namespaces: std::path::Path::new("/proc/self/ns/pid").exists(),
        // SAFETY: PR_GET_SECCOMP takes no pointers.
        seccomp: unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0
            && std::path::Path::new("/proc/sys/kernel/seccomp/actions_avail").exists(),
        cgroup_delegation: cgroup_delegated(),
    }
}

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

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The daemon's own cgroup v2 directory exists and the daemon may create groups below it.
fn cgroup_delegated() -> bool {
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    let Some(path) = own.lines().find_map(|line| line.strip_prefix("0::")) else {
        return false;
    };
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let point = fields.nth(1)?;
            (fields.next()? == "cgroup2").then_some(point)
        })
        .any(|point| {
            let dir = std::path::Path::new(point).join(path.trim_start_matches('/'));
            crate::path::cstring(&dir)
                // SAFETY: a valid NUL-terminated path.
                .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_guarantee_falls_to_the_layer_the_abi_leaves() {
        let auto = |abi| Enforcement::decide(abi, None, BackendChoice::Auto);
        assert_eq!(auto(7).backend(), SandboxBackend::Landlock);
        assert!(auto(7).scopes() && !auto(7).own_pid_namespace());
        assert_eq!(auto(1).backend(), SandboxBackend::MountView);
        assert_eq!(auto(0).backend(), SandboxBackend::MountView);
        assert!(auto(4).tcp_bind() && !auto(3).tcp_bind());
        let capped = Enforcement::decide(7, Some(2), BackendChoice::Auto);
        assert_eq!(capped.landlock_abi, 2);
        let view = Enforcement::decide(7, None, BackendChoice::MountView);
        assert_eq!(view.backend(), SandboxBackend::MountView);
        assert!(view.scopes());
        assert!(Enforcement::decide(1, None, BackendChoice::Landlock).landlock_required);
        assert!(!Enforcement::decide(2, None, BackendChoice::Landlock).landlock_required);
    }
}
