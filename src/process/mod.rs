//! Managed processes: each session owns a table of them, keyed by client-chosen ids.
//!
//! - [`table`]: the table, its ids (reserved while a start runs, freed after the retention)
//!   and the starts it refuses;
//! - [`start`] and [`adopt`]: the two ways a process comes into a table, launched now or taken
//!   over from a predecessor daemon; both make it with [`ManagedProcess::new`];
//! - [`managed`]: one process, its state and what the methods ask of it;
//! - [`tasks`]: what runs in the background for it: output reading, exit and tree supervision,
//!   timeout and input waits ([`delivery`] pushes its events);
//! - [`follower`]: the output read to its end by the listeners that are not sessions;
//! - [`snapshot`]: shell snapshots, a login shell's state captured once and restored before
//!   each command of a scope.
//!
//! Nothing here knows sessions or connections: a table follows its session's
//! [`Attachment`], which the session sets.

mod adopt;
mod delivery;
pub(crate) mod env;
mod error;
mod follower;
mod forgotten;
pub(crate) mod input_wait;
mod io;
mod limits;
mod live;
mod managed;
pub(crate) mod output;
mod pins;
pub(crate) mod snapshot;
mod start;
mod stdin;
pub(crate) mod store;
mod table;
mod tasks;

pub(crate) use delivery::Attachment;
pub(crate) use error::{AdoptError, KeepError, ProcessError};
pub(crate) use follower::{Followed, OutputFollower};
pub(crate) use limits::{input_quiet, limits, Timing};
pub(crate) use managed::{ManagedProcess, Origin};
pub(crate) use table::{Lookup, ProcessTable};

/// Whether `maxMemoryBytes` and `maxProcesses` can both be enforced here.
pub(crate) fn tree_limits_supported() -> bool {
    crate::launcher::cgroup::supported() == (true, true)
}
