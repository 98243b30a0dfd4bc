//! The typed errors of the sandbox primitives (mounts, Landlock, seccomp) and of the daemon's
//! probe of what the kernel offers: a variant per failing step, with the path and the OS error
//! where there is one, so that neither errno nor path is lost on the way to the helper's
//! [`super::plan::Failure`]. Their messages are the sandbox's wire text
//! (`sandbox intent cannot be enforced on this executor: <stage>: <message>`).

use super::open::OpenError;
use super::plan::{Failure, Stage};
use std::io;
use std::path::PathBuf;

/// A step of building the sandbox that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error("making mounts private: {0}")]
    MakePrivate(#[source] io::Error),
    #[error("making mounts slaves: {0}")]
    FollowHost(#[source] io::Error),
    #[error("making the view read-only: {0}")]
    ReadOnlyView(#[source] io::Error),
    #[error("cloning `{}`: {source}", path.display())]
    Clone { path: PathBuf, source: io::Error },
    #[error("setting access on `{}`: {source}", path.display())]
    SetAccess { path: PathBuf, source: io::Error },
    #[error("mounting `{}`: {source}", path.display())]
    Mount { path: PathBuf, source: io::Error },
    #[error("masking `{}`: {source}", path.display())]
    Mask { path: PathBuf, source: io::Error },
    #[error("no group is free to exempt from hidepid")]
    NoFreeGroup,
    #[error("mounting a private /proc: {0}")]
    OwnProc(#[source] io::Error),
    /// A path of the plan could not be opened as the daemon resolved it.
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{0}")]
    Unsupported(#[from] Unsupported),
    #[error(transparent)]
    Landlock(#[from] landlock::RulesetError),
    #[error("granting `{}`: {source}", path.display())]
    Grant {
        path: PathBuf,
        source: landlock::RulesetError,
    },
    #[error("Landlock is not fully enforced ({0:?}); refusing to run")]
    NotEnforced(landlock::RulesetStatus),
    #[error(transparent)]
    SeccompRule(#[from] seccompiler::Error),
    #[error(transparent)]
    SeccompBackend(#[from] seccompiler::BackendError),
}

impl SetupError {
    /// The OS error behind the failure, if the kernel reported one.
    pub(crate) fn errno(&self) -> Option<i32> {
        if let Self::Open(err) = self {
            return err.errno();
        }
        let mut source = std::error::Error::source(self);
        while let Some(err) = source {
            if let Some(os) = err
                .downcast_ref::<io::Error>()
                .and_then(io::Error::raw_os_error)
            {
                return Some(os);
            }
            source = err.source();
        }
        None
    }
}

// Here rather than with `Stage`, so that the plan, which the daemon builds without any
// primitive, does not import them.
impl Stage {
    /// A sandbox primitive's failure at this stage, with its errno.
    pub(crate) fn setup(self, err: impl Into<SetupError>) -> Failure {
        let err = err.into();
        Failure {
            errno: err.errno(),
            ..self.fail(err)
        }
    }
}

/// Why the daemon cannot enforce any sandbox intent (what `environment/info` reports as
/// `linuxSandbox: false`).
#[derive(Debug, thiserror::Error)]
#[error("sandbox intent cannot be enforced on this executor: {why}")]
pub(crate) struct Unsupported {
    #[from]
    why: Missing,
}

/// What the kernel or the daemon's privileges lack.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Missing {
    #[error(
        "the daemon cannot create mount and network namespaces ({0}); it needs root \
         (CAP_SYS_ADMIN)"
    )]
    Namespaces(#[source] io::Error),
    #[error("the daemon cannot mount in its namespaces ({0})")]
    Mounts(#[source] Box<SetupError>),
    #[error("the daemon cannot drop capabilities ({0}); it needs CAP_SETPCAP")]
    Capabilities(#[source] io::Error),
    #[error("the probe failed")]
    Probe,
}
