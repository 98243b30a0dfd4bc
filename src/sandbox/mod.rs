//! Enforcement of the portable permission intent (`process/start.sandbox`) with the kernel's
//! own mechanisms: mount and network namespaces, Landlock, capabilities, seccomp.
//!
//! The daemon resolves the intent ([`policy`]), protects its own state ([`guard`]) and the
//! workspace metadata ([`protected`]), and turns the result into a [`plan::Plan`]. The launch
//! (`crate::launcher`) hands the plan to a sandbox helper (`crate::child::sandbox`), which
//! applies it to itself with [`mounts`], [`landlock`], [`capabilities`] and [`seccomp`], and
//! executes the real program or, for a sandboxed `fs/*` call, runs the operation itself.
//! Everything that cannot be enforced fails the request (-32602) before anything runs.
//! [`denial`] classifies exits as sandbox denials; [`peers`] keeps sandboxed processes off the
//! daemon's own listener.

pub(crate) mod capabilities;
pub mod denial;
mod error;
mod glob;
pub mod guard;
pub(crate) mod landlock;
pub(crate) mod mounts;
pub mod peers;
pub mod plan;
mod policy;

/// The daemon's own private paths (its state directory), never in a sandbox's view: every
/// sandbox helper masks them in its mount namespace while it is pre-started, off the launch
/// path, before any plan (and a write root that holds one clones the mask with it), so no
/// sandboxed process reads other processes' output there or reaches a supervisor's socket,
/// whatever its intent. Set once, at start; the fork server is told in its first frame.
/// A bind mount shows the same directory at another path, which a mask by path misses, so
/// each launch also masks every other place its view shows them (`mounts::hide_aliases`).
static HIDDEN: std::sync::OnceLock<Vec<mounts::Hidden>> = std::sync::OnceLock::new();

/// Records the daemon's private paths, for every later sandbox.
pub fn hide_from_sandboxes(paths: Vec<mounts::Hidden>) {
    let _ = HIDDEN.set(paths);
}

pub fn hidden() -> &'static [mounts::Hidden] {
    HIDDEN.get().map_or(&[], Vec::as_slice)
}
pub(crate) mod protected;
pub(crate) mod seccomp;
mod sockets;

use crate::rpc::RpcError;
use denial::DenialContext;
use exec_server_protocol::process::StartParams;
use exec_server_protocol::sandbox::{
    FileSystemSandboxContext, FsAccess, ManagedNetwork, NetworkAccess,
};
use plan::{FsPlan, Identity, ManagedPlan, Plan};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A resolved intent, ready to wrap a launch.
pub struct Prepared {
    pub(crate) plan: Plan,
    pub(crate) context: Arc<DenialContext>,
    pub(crate) leases: protected::Leases,
}

/// Whether this daemon can enforce sandbox intent at all (otherwise every restricting intent
/// is refused), for `environment/info`.
pub fn enforceable() -> bool {
    unsupported().is_none()
}

/// Why no restricting intent can be enforced here, if none can.
fn unsupported() -> Option<String> {
    landlock::unsupported()
        .map(|why| why.to_string())
        .or_else(|| namespaces_unavailable().as_ref().map(ToString::to_string))
}

/// Whether the daemon may build a sandbox: make the mount and network namespaces (it needs
/// CAP_SYS_ADMIN in its user namespace, and nothing such as a container's seccomp profile or a
/// namespace limit in the way), mount in them (an AppArmor profile may forbid it), and drop
/// every capability (CAP_SETPCAP). Probed once, by doing what a helper does, on a throwaway
/// thread: namespaces, credentials and securebits are the thread's own, and end with it.
fn namespaces_unavailable() -> &'static Option<error::Unsupported> {
    use error::Missing;
    static PROBE: std::sync::OnceLock<Option<error::Unsupported>> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| {
        let probe = std::thread::spawn(|| {
            // SAFETY: plain syscall; it changes only this thread's namespaces (and file-system
            // attributes, which CLONE_NEWNS unshares), and the thread ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) } < 0 {
                return Some(Missing::Namespaces(std::io::Error::last_os_error()));
            }
            if let Err(err) = mounts::follow_host().and_then(|()| mounts::own_proc()) {
                return Some(Missing::Mounts(Box::new(err)));
            }
            capabilities::drop_capabilities()
                .err()
                .map(Missing::Capabilities)
        });
        let missing = probe.join().unwrap_or(Some(Missing::Probe))?;
        Some(missing.into())
    })
}

/// Whether preparing `sandbox` may walk directory trees (glob expansion, the search of write
/// roots for hard links to a library the daemon maps, when one has links), and so belongs off
/// the async workers. Anything else is a few stats and canonicalizations, cheaper than the hop
/// to a blocking thread (measured here: 80–140 µs of a sandboxed launch).
pub fn prepare_walks(sandbox: &FileSystemSandboxContext) -> bool {
    policy::expands_globs(sandbox)
        || (policy::grants_writes(sandbox) && guard::init().searches_for_links())
}

/// Resolves `params.sandbox` and the managed network for a `process/start` in `cwd`.
/// Ok(None): run unsandboxed. `enforceManagedNetwork` always sandboxes the network (only the
/// listed loopback ports are reachable), whatever `sandbox` says of it, and the file system as
/// `sandbox` says (unrestricted without one); `managedNetwork` alone changes nothing.
pub fn prepare_start(params: &StartParams, cwd: &Path) -> Result<Option<Prepared>, RpcError> {
    let managed = managed_plan(params)?;
    let policy = match &params.sandbox {
        Some(sandbox) => policy::resolve(sandbox, cwd)?,
        None => None,
    };
    let policy = match (policy, &managed) {
        (Some(policy), _) => policy,
        (None, Some(_)) => policy::Policy {
            rules: None,
            network: NetworkAccess::Restricted,
            cwd: cwd.to_path_buf(),
        },
        (None, None) => return Ok(None),
    };
    prepare_policy(policy, &params.argv, params.arg0.as_deref(), managed, false).map(Some)
}

/// The managed network `params` asks to enforce, validated; None when it asks for none.
fn managed_plan(params: &StartParams) -> Result<Option<ManagedPlan>, RpcError> {
    let Some(ManagedNetwork {
        loopback_ports,
        allow_local_binding,
    }) = &params.managed_network
    else {
        return match params.enforce_managed_network {
            true => Err(RpcError::invalid_params(
                "enforceManagedNetwork requires managedNetwork (the proxy's loopback ports); \
                 refusing to run without it",
            )),
            false => Ok(None),
        };
    };
    let mut ports = loopback_ports.clone();
    ports.sort_unstable();
    ports.dedup();
    if ports.len() > plan::MAX_PORTS {
        return Err(RpcError::invalid_params(format!(
            "managedNetwork.loopbackPorts lists {} ports; at most {} are supported",
            ports.len(),
            plan::MAX_PORTS
        )));
    }
    if ports.first() == Some(&0) {
        return Err(RpcError::invalid_params(
            "managedNetwork.loopbackPorts: 0 is not a port (1-65535)",
        ));
    }
    if let Some(port) = ports.iter().find(|&&port| peers::is_own_port(port)) {
        return Err(RpcError::invalid_params(format!(
            "managedNetwork.loopbackPorts: {port} is this exec-server's own listener, which no \
             sandbox may reach"
        )));
    }
    Ok(params.enforce_managed_network.then_some(ManagedPlan {
        ports,
        allow_local_binding: *allow_local_binding,
    }))
}

/// Resolves `sandbox` for an fs operation (named `name` in messages) in `cwd`
/// ([`plan::Plan::fs_op`]). Ok(None): the intent needs no enforcement.
pub(crate) fn prepare_fs_op(
    sandbox: &FileSystemSandboxContext,
    cwd: &Path,
    name: &str,
) -> Result<Option<Prepared>, RpcError> {
    match policy::resolve(sandbox, cwd)? {
        None => Ok(None),
        Some(policy) => prepare_policy(policy, &[name.to_owned()], None, None, true).map(Some),
    }
}

/// The launch of `argv` under `policy`, with `managed` network if any; `fs_op`: an fs
/// operation runs in its place.
fn prepare_policy(
    policy: policy::Policy,
    argv: &[String],
    arg0: Option<&str>,
    managed: Option<ManagedPlan>,
    fs_op: bool,
) -> Result<Prepared, RpcError> {
    let Some(program) = argv.first() else {
        return Err(RpcError::invalid_params("argv must not be empty"));
    };
    if let Some(reason) = unsupported() {
        return Err(RpcError::invalid_params(reason));
    }
    // Canonical when the file system is restricted: the helper opens it without following links.
    let cwd = policy.cwd.as_path();
    let mut leases = protected::Leases::default();
    let fs = match policy.rules {
        None => None,
        Some(mut rules) => {
            let guard = guard::init();
            for rule in rules.iter().filter(|rule| rule.access == FsAccess::Write) {
                guard
                    .check_write_root(&rule.path)
                    .map_err(|err| RpcError::invalid_params(err.to_string()))?;
            }
            leases = protected::protect(&mut rules)?;
            Some(rules)
        }
    };
    let network_restricted = policy.network == NetworkAccess::Restricted || managed.is_some();
    let mut shown = vec![arg0.unwrap_or(program).to_owned()];
    shown.extend(argv.iter().skip(1).cloned());
    let plan = Plan {
        program: program.to_owned(),
        argv: shown,
        cwd: cwd.to_path_buf(),
        env: Default::default(),
        network_restricted,
        managed_network: managed.clone(),
        fs_op,
        // The fs operation's own code connects no socket: nothing to hide from it.
        fs: fs
            .as_deref()
            .map(|rules| fs_plan(rules, cwd, network_restricted && !fs_op))
            .transpose()?,
    };
    let context = Arc::new(DenialContext {
        rules: fs,
        network_restricted,
        managed_network: managed,
        cwd: cwd.to_path_buf(),
        program: program.clone(),
    });
    Ok(Prepared {
        plan,
        context,
        leases,
    })
}

/// A path of the plan that could not be inspected for its identity.
#[derive(Debug, thiserror::Error)]
#[error("sandbox path `{}` cannot be inspected: {source}", path.display())]
struct InspectError {
    path: PathBuf,
    source: std::io::Error,
}

impl From<InspectError> for RpcError {
    fn from(err: InspectError) -> Self {
        RpcError::invalid_params(err.to_string())
    }
}

/// Records the identity of `path` (once) for the helper to check.
fn record(identities: &mut mounts::Identities, path: &Path) -> Result<(), InspectError> {
    if !identities.contains_key(path) {
        let id = Identity::stat(path).map_err(|source| InspectError {
            path: path.to_path_buf(),
            source,
        })?;
        identities.insert(path.to_path_buf(), id);
    }
    Ok(())
}

/// Mounts and grants for `rules`, with the identity of each of their paths and of `cwd`, and
/// the host's sockets to hide when `hide_sockets` (network restricted).
fn fs_plan(rules: &[policy::Rule], cwd: &Path, hide_sockets: bool) -> Result<FsPlan, InspectError> {
    let mounts = mounts::plan(rules);
    let mut identities = mounts::Identities::new();
    let mut grants = Vec::new();
    for rule in rules.iter().filter(|rule| rule.access != FsAccess::Deny) {
        record(&mut identities, &rule.path)?;
        grants.push(landlock::Grant {
            path: rule.path.clone(),
            write: rule.access == FsAccess::Write,
        });
    }
    for (path, write) in landlock::DEVICES {
        // Missing devices are not granted.
        if let Ok(id) = Identity::stat(Path::new(path)) {
            identities.insert(path.into(), id);
            grants.push(landlock::Grant {
                path: path.into(),
                write: *write,
            });
        }
    }
    for op in &mounts {
        record(&mut identities, mounts::op_path(op))?;
    }
    record(&mut identities, cwd)?;
    let hidden_sockets = if hide_sockets {
        sockets::outside_write_roots(rules)
    } else {
        Vec::new()
    };
    Ok(FsPlan {
        mounts,
        grants,
        identities,
        hidden_sockets,
    })
}
