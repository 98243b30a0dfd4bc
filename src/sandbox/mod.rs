//! Enforcement of the portable permission intent (`process/start.sandbox`) with the kernel's
//! own mechanisms: mount and network namespaces, Landlock, capabilities, seccomp.
//!
//! The daemon resolves the intent ([`policy`]), protects its own state ([`guard`]) and the
//! workspace metadata ([`protected`]), and turns the result into a [`plan::Plan`]
//! ([`prepare`]). The launch (`crate::launcher`) hands the plan to a sandbox helper
//! (`crate::child::sandbox`), which applies it to itself with [`mounts`], [`landlock`],
//! [`capabilities`] and [`seccomp`], and executes the real program or, for a sandboxed `fs/*`
//! call, runs the operation itself. Everything that cannot be enforced fails the request
//! (-32602) before anything runs. [`denial`] classifies exits as sandbox denials; [`peers`]
//! keeps sandboxed processes off the daemon's own listener.

mod anchor;
pub(crate) mod capabilities;
pub(crate) mod denial;
mod devices;
mod error;
pub(crate) mod facilities;
mod glob;
pub(crate) mod guard;
mod kernel_helpers;
pub(crate) mod landlock;
mod loader;
mod mount_api;
pub(crate) mod mounts;
pub(crate) mod open;
pub(crate) mod peers;
pub(crate) mod plan;
mod policy;
pub(crate) mod prepare;
pub(crate) mod profile;
pub(crate) mod protected;
pub(crate) mod root_write;
pub(crate) mod seccomp;
mod sock_diag;
mod sockets;
mod view;

pub(crate) use prepare::{enforceable, prepare_fs_op, prepare_start, prepare_walks, Prepared};

/// The daemon's own private paths (its state directory), never in a sandbox's view: every
/// sandbox helper masks them in its mount namespace while it is pre-started, off the launch
/// path, before any plan (and a write root that holds one clones the mask with it), so no
/// sandboxed process reads other processes' output there or reaches a supervisor's socket,
/// whatever its intent. Set once, at start; the fork server is told in its first frame.
/// A bind mount shows the same directory at another path, which a mask by path misses, so
/// each launch also masks every other place its view shows them (`mounts::hide_aliases`).
static HIDDEN: std::sync::OnceLock<Vec<mounts::Hidden>> = std::sync::OnceLock::new();

/// Records the daemon's private paths, for every later sandbox.
pub(crate) fn hide_from_sandboxes(paths: Vec<mounts::Hidden>) {
    let _ = HIDDEN.set(paths);
}

pub(crate) fn hidden() -> &'static [mounts::Hidden] {
    HIDDEN.get().map_or(&[], Vec::as_slice)
}

/// What the daemon tells its fork server for every helper: the paths to hide, the enforcement.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct HelperSettings {
    hidden: Vec<mounts::Hidden>,
    enforcement: facilities::Enforcement,
}

impl HelperSettings {
    pub(crate) fn current() -> Self {
        Self {
            hidden: hidden().to_vec(),
            enforcement: facilities::Enforcement::current(),
        }
    }

    /// In the fork server, before any helper.
    pub(crate) fn install(self) {
        hide_from_sandboxes(self.hidden);
        self.enforcement.install();
    }
}

/// The backend that enforces a process started with `sandbox_type` (this daemon's is one for
/// all its sandboxes, decided at start).
pub(crate) fn backend_for(
    sandbox_type: exec_server_protocol::process::SandboxType,
) -> Option<exec_server_protocol::process::SandboxBackend> {
    (sandbox_type != exec_server_protocol::process::SandboxType::None)
        .then(|| facilities::Enforcement::current().backend())
}
