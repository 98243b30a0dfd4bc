//! The daemon's side of a sandboxed launch: a [`Prepared`] intent becomes a [`Launch`], which
//! a pre-started sandbox helper ([`super::pool`]) runs; what a running sandboxed process keeps
//! is [`Sandboxed`].

use super::bridge;
use super::pool::Kind;
use super::spawn::{self, Spawned};
use super::spec::LaunchSpec;
use super::tree::{self, Started};
use super::LaunchError;
use crate::netproxy::Proxy;
use crate::sandbox::denial::{DenialContext, Scanner};
use crate::sandbox::plan::{ManagedPlan, NetworkMode, Stage, MAX_PLAN_BYTES};
use crate::sandbox::{protected, Prepared};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A sandboxed launch in progress.
pub(crate) struct Launch {
    /// The serialized plan.
    plan: Vec<u8>,
    network: NetworkMode,
    /// The managed network, bridged once the program runs.
    managed: Option<ManagedPlan>,
    /// The process's own proxy, which serves its ports among them.
    proxy: Option<Arc<Proxy>>,
    sandboxed: Sandboxed,
}

/// What a running sandboxed process keeps: the classifier's context, its placeholders, and its
/// mount namespace.
#[derive(Debug)]
pub(crate) struct Sandboxed {
    pub(crate) context: Arc<DenialContext>,
    /// Its protected names, let go when this is dropped.
    _leases: protected::Leases,
    /// Held from the exec on, so that the namespace is torn down (every mount of the copied
    /// view unmounted) when this is dropped, after the exit is reported, rather than by the
    /// exiting process before its parent learns of the exit.
    mount_namespace: Option<OwnedFd>,
    /// The sandbox refused to execute the program: the helper's child wrote why on the
    /// program's stderr and exits 126 in its place.
    refused: bool,
    /// The managed network's relays, closed when this is dropped (after the exit).
    bridge: Option<bridge::Bridge>,
}

impl Sandboxed {
    /// The classifier for this launch's exit, already certain when the exec was refused.
    pub(crate) fn scanner(&self) -> Scanner {
        Scanner::new(self.context.clone(), self.refused)
    }
}

impl Launch {
    /// Takes the program's arguments and environment from `spec` into `prepared`'s plan, which
    /// a helper receives.
    pub(crate) fn new(mut prepared: Prepared, spec: &mut LaunchSpec) -> Result<Self, LaunchError> {
        // The helper executes the plan's command line: the spec's, which may differ from the
        // one the plan was prepared for (a shell snapshot's restore), as its environment does.
        prepared.plan.env = std::mem::take(&mut spec.env);
        prepared.plan.argv.truncate(1);
        prepared.plan.argv.extend(spec.args.iter().cloned());
        let plan = serde_json::to_vec(&prepared.plan).expect("a plan serializes");
        if plan.len() > MAX_PLAN_BYTES {
            return Err(LaunchError::PlanTooLarge(plan.len()));
        }
        let Prepared {
            plan: prepared_plan,
            context,
            leases,
        } = prepared;
        Ok(Self {
            plan,
            network: prepared_plan.network_mode(),
            managed: prepared_plan.managed_network,
            proxy: None,
            sandboxed: Sandboxed {
                context,
                _leases: leases,
                mount_namespace: None,
                refused: false,
                bridge: None,
            },
        })
    }

    /// Serves the managed network's ports that are `proxy`'s with it.
    pub(crate) fn with_proxy(mut self, proxy: Arc<Proxy>) -> Self {
        self.proxy = Some(proxy);
        self
    }

    /// Starts `spec`'s program in a helper, which supervises its tree: hands it the plan and
    /// the program's stdio, and waits until the program was executed or the helper reports why
    /// it could not. Err: nothing ran (the helper is killed). An exec the sandbox refused is
    /// Ok, with [`Sandboxed::scanner`] certain of the denial: the helper's child exits 126 like
    /// a program that ran, so the process is reported through its exit.
    pub(crate) async fn spawn(&mut self, spec: &LaunchSpec) -> Result<Spawned, LaunchError> {
        let (io, stdio) = spawn::detached_stdio(spec).map_err(LaunchError::Stdio)?;
        let kind = Kind::Sandboxed(self.network);
        let managed = self.managed.as_ref();
        let (tree, started, listeners) =
            tree::launch(kind, spec, &stdio, &self.plan, managed).await?;
        if let Started::Failed { failure } = started {
            if !(failure.stage == Stage::Exec && failure.denied) {
                return Err(LaunchError::Sandbox(failure));
            }
            self.sandboxed.refused = true;
        }
        if let Some(managed) = managed {
            // Until now the program's connections wait in the listeners' backlogs.
            let bridge = bridge::Bridge::start(listeners, managed, self.proxy.clone())
                .map_err(LaunchError::Bridge)?;
            self.sandboxed.bridge = Some(bridge);
        }
        // The supervisor lives in the sandbox's mount namespace as long as the tree does; with
        // a PID namespace of its own, the tree's init (its program process) does, in one of
        // its own.
        let holder = match crate::sandbox::facilities::Enforcement::current().own_pid_namespace() {
            true => tree.program_pid,
            false => tree.supervisor_pid,
        };
        self.sandboxed.mount_namespace = std::fs::File::open(format!("/proc/{holder}/ns/mnt"))
            .ok()
            .map(OwnedFd::from);
        Ok(Spawned { tree, io })
    }

    /// After [`Launch::spawn`]: what the running process keeps.
    pub(crate) fn into_sandboxed(self) -> Sandboxed {
        self.sandboxed
    }
}
