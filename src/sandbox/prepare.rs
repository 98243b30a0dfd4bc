//! The daemon's side of a sandboxed launch: from the intent of a `process/start` or an `fs/*`
//! call to a [`Prepared`] plan. It resolves the intent ([`super::policy`]), checks write roots
//! against the daemon's own state ([`super::guard`]), protects the workspace metadata
//! ([`super::protected`]), plans the view ([`super::view`]) and records the identity of every
//! path the helper will open. Each failing step is a [`PrepareError`], turned into the
//! request's JSON-RPC error (-32602, nothing ran) in one place.

use super::denial::DenialContext;
use super::error::{Missing, Unsupported};
use super::facilities::{Enforcement, Form};
use super::plan::{FsPlan, Grant, Identities, Identity, ManagedPlan, Plan, MAX_PORTS};
use super::policy::{self, Policy, PolicyError, Rule};
use super::protected::{self, ProtectError};
use super::{guard, landlock, mounts, peers, root_write, sockets, view};
use crate::rpc::RpcError;
use exec_server_protocol::process::StartParams;
use exec_server_protocol::sandbox::{
    FileSystemSandboxContext, FsAccess, ManagedNetwork, NetworkAccess,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A resolved intent, ready to wrap a launch.
pub(crate) struct Prepared {
    pub(crate) plan: Plan,
    pub(crate) context: Arc<DenialContext>,
    pub(crate) leases: protected::Leases,
}

/// Why an intent cannot be prepared: the request's fault, or what this host cannot enforce.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    #[error(
        "enforceManagedNetwork requires managedNetwork (the proxy's loopback ports); refusing to \
         run without it"
    )]
    NoManagedNetwork,
    #[error(
        "managedNetwork.loopbackPorts lists {count} ports; at most {} are supported",
        MAX_PORTS
    )]
    TooManyPorts { count: usize },
    #[error("managedNetwork.loopbackPorts: 0 is not a port (1-65535)")]
    PortZero,
    #[error(
        "managedNetwork.loopbackPorts: {0} is this exec-server's own listener, which no sandbox \
         may reach"
    )]
    OwnPort(u16),
    #[error("argv must not be empty")]
    EmptyArgv,
    /// The intent has a form this host's facilities cannot enforce (`super::facilities`).
    #[error("sandbox intent cannot be enforced on this executor: {0}")]
    Form(#[from] Form),
    /// The daemon cannot build namespaces here (probed once).
    #[error(transparent)]
    Namespaces(&'static Unsupported),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A write root exposes the daemon's own state.
    #[error(transparent)]
    WriteRoot(#[from] guard::GuardError),
    #[error(transparent)]
    Protect(#[from] ProtectError),
    /// A path of the plan could not be inspected for its identity.
    #[error("sandbox path `{}` cannot be inspected: {source}", path.display())]
    Inspect {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The one mapping to the wire: every preparation failure refuses the request's parameters,
/// with the error's message.
impl From<PrepareError> for RpcError {
    fn from(err: PrepareError) -> Self {
        RpcError::invalid_params(err.to_string())
    }
}

/// Whether this daemon can enforce sandbox intent at all (otherwise every restricting intent
/// is refused), for `environment/info`.
pub(crate) fn enforceable() -> bool {
    unsupported().is_none()
}

/// Why no restricting intent can be enforced here, if none can.
fn unsupported() -> Option<PrepareError> {
    if Enforcement::current().landlock_required {
        return Some(Form::LandlockRequired.into());
    }
    namespaces_unavailable()
        .as_ref()
        .map(PrepareError::Namespaces)
}

/// Whether the daemon may build a sandbox: make the mount and network namespaces (and a PID
/// namespace where Landlock cannot scope signals; it needs
/// CAP_SYS_ADMIN in its user namespace, and nothing such as a container's seccomp profile or a
/// namespace limit in the way), mount in them (an AppArmor profile may forbid it), and drop
/// every capability (CAP_SETPCAP). Probed once, by doing what a helper does, on a throwaway
/// thread: namespaces, credentials and securebits are the thread's own, and end with it.
fn namespaces_unavailable() -> &'static Option<Unsupported> {
    static PROBE: std::sync::OnceLock<Option<Unsupported>> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| {
        let probe = std::thread::spawn(|| {
            // SAFETY: unshare takes flags only; it changes only this thread's namespaces (and file-system
            // attributes, which CLONE_NEWNS unshares), and the thread ends right after.
            let pid = match Enforcement::current().own_pid_namespace() {
                true => libc::CLONE_NEWPID,
                false => 0,
            };
            // SAFETY: unshare takes flags only, on this thread, which ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET | pid) } < 0 {
                return Some(Missing::Namespaces(std::io::Error::last_os_error()));
            }
            if let Err(err) = mounts::follow_host().and_then(|()| mounts::own_proc()) {
                return Some(Missing::Mounts(Box::new(err)));
            }
            super::capabilities::drop_capabilities()
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
pub(crate) fn prepare_walks(sandbox: &FileSystemSandboxContext) -> bool {
    policy::expands_globs(sandbox)
        || (policy::grants_writes(sandbox) && guard::init().searches_for_links())
}

/// Resolves `params.sandbox` and the managed network for a `process/start` in `cwd`.
/// Ok(None): run unsandboxed. `enforceManagedNetwork` always sandboxes the network (only the
/// listed loopback ports are reachable), whatever `sandbox` says of it, and the file system as
/// `sandbox` says (unrestricted without one); `managedNetwork` alone changes nothing. `proxied`:
/// the ports of the process's own proxy, enforced instead of `managedNetwork`'s.
pub(crate) fn prepare_start(
    params: &StartParams,
    cwd: &Path,
    proxied: Option<ManagedPlan>,
) -> Result<Option<Prepared>, PrepareError> {
    let managed = match proxied {
        Some(plan) => Some(plan),
        None => managed_plan(params)?,
    };
    let policy = match &params.sandbox {
        Some(sandbox) => policy::resolve(sandbox, cwd)?,
        None => None,
    };
    let policy = match (policy, &managed) {
        (Some(policy), _) => policy,
        (None, Some(_)) => Policy {
            rules: None,
            network: NetworkAccess::Restricted,
            cwd: cwd.to_path_buf(),
        },
        (None, None) => return Ok(None),
    };
    prepare_policy(policy, &params.argv, params.arg0.as_deref(), managed, false).map(Some)
}

/// The managed network `params` asks to enforce, validated; None when it asks for none.
fn managed_plan(params: &StartParams) -> Result<Option<ManagedPlan>, PrepareError> {
    let Some(ManagedNetwork {
        loopback_ports,
        allow_local_binding,
    }) = &params.managed_network
    else {
        return match params.enforce_managed_network {
            true => Err(PrepareError::NoManagedNetwork),
            false => Ok(None),
        };
    };
    let mut ports = loopback_ports.clone();
    ports.sort_unstable();
    ports.dedup();
    if ports.len() > MAX_PORTS {
        return Err(PrepareError::TooManyPorts { count: ports.len() });
    }
    if ports.first() == Some(&0) {
        return Err(PrepareError::PortZero);
    }
    if let Some(&port) = ports.iter().find(|&&port| peers::is_own_port(port)) {
        return Err(PrepareError::OwnPort(port));
    }
    Ok(params.enforce_managed_network.then_some(ManagedPlan {
        ports,
        allow_local_binding: *allow_local_binding,
        transparent_tcp: false,
    }))
}

/// Resolves `sandbox` for an fs operation (named `name` in messages) in `cwd`
/// ([`Plan::fs_op`]). Ok(None): the intent needs no enforcement.
pub(crate) fn prepare_fs_op(
    sandbox: &FileSystemSandboxContext,
    cwd: &Path,
    name: &str,
) -> Result<Option<Prepared>, PrepareError> {
    match policy::resolve(sandbox, cwd)? {
        None => Ok(None),
        Some(policy) => prepare_policy(policy, &[name.to_owned()], None, None, true).map(Some),
    }
}

/// The launch of `argv` under `policy`, with `managed` network if any; `fs_op`: an fs
/// operation runs in its place.
fn prepare_policy(
    policy: Policy,
    argv: &[String],
    arg0: Option<&str>,
    managed: Option<ManagedPlan>,
    fs_op: bool,
) -> Result<Prepared, PrepareError> {
    let Some(program) = argv.first() else {
        return Err(PrepareError::EmptyArgv);
    };
    if let Some(reason) = unsupported() {
        return Err(reason);
    }
    // Canonical when the file system is restricted: the helper opens it without following links.
    let cwd = policy.cwd.as_path();
    let mut leases = protected::Leases::default();
    let mut extra = view::Extra::default();
    let fs = match policy.rules {
        None => None,
        Some(mut rules) => {
            let guard = guard::init();
            let root_write = root_write::narrow(&mut rules, guard)?;
            for rule in rules.iter().filter(|rule| rule.access == FsAccess::Write) {
                guard.check_write_root(&rule.path)?;
            }
            leases = protected::protect(&mut rules)?;
            if root_write {
                extra = root_write::carve(&mut rules, guard);
            }
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
            .map(|rules| fs_plan(rules, cwd, &extra, network_restricted && !fs_op))
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

/// Records the identity of `path` (once) for the helper to check.
fn record(identities: &mut Identities, path: &Path) -> Result<(), PrepareError> {
    if !identities.contains_key(path) {
        let id = Identity::stat(path).map_err(|source| PrepareError::Inspect {
            path: path.to_path_buf(),
            source,
        })?;
        identities.insert(path.to_path_buf(), id);
    }
    Ok(())
}

/// Mounts and grants for `rules` and `extra` (`view::Extra`), with the identity of each of
/// their paths and of `cwd`, and the host's sockets to hide when `hide_sockets` (network
/// restricted).
fn fs_plan(
    rules: &[Rule],
    cwd: &Path,
    extra: &view::Extra,
    hide_sockets: bool,
) -> Result<FsPlan, PrepareError> {
    let mounts = match Enforcement::current().landlock_fs {
        true => view::plan(rules, extra),
        false => view::plan_alone(rules, cwd, extra),
    };
    let mut identities = Identities::new();
    let mut grants = Vec::new();
    for rule in rules.iter().filter(|rule| rule.access != FsAccess::Deny) {
        record(&mut identities, &rule.path)?;
        grants.push(Grant {
            path: rule.path.clone(),
            write: rule.access == FsAccess::Write,
        });
    }
    if extra.private_dev {
        // The helper makes it, and takes its identity then (`mounts::apply`).
        record(&mut identities, Path::new(landlock::DEV))?;
        grants.push(Grant {
            path: landlock::DEV.into(),
            write: true,
        });
    }
    for (path, write) in landlock::DEVICES {
        // Missing devices are not granted, nor denied ones (masked: the grant would find the
        // mask, not the device, and fail the launch).
        let denied = policy::effective(rules, Path::new(path)) == Some(FsAccess::Deny);
        if let (Ok(id), false) = (Identity::stat(Path::new(path)), denied) {
            identities.insert(path.into(), id);
            grants.push(Grant {
                path: path.into(),
                write: *write,
            });
        }
    }
    for op in &mounts {
        record(&mut identities, op.path())?;
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
