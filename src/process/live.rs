//! Caps on live processes (started, their tree not yet gone): each holds descriptors in the
//! daemon (output pipes and files, stdin, its supervisor's socket), so one client starting
//! thousands must not take the descriptors every other session needs. Exited processes kept
//! for reading hold none and are not counted.

use super::ProcessError;
use crate::config::Config;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Live processes of the whole daemon.
static DAEMON: AtomicUsize = AtomicUsize::new(0);

/// One live process, counted in its session and in the daemon until dropped.
pub(super) struct Live {
    session: Arc<AtomicUsize>,
}

impl Live {
    /// Counts a new process, unless that would exceed a cap. Counted first and given back when
    /// over (by the drop), so concurrent starts can be refused together but never exceed.
    pub(super) fn start(session: &Arc<AtomicUsize>, config: &Config) -> Result<Self, ProcessError> {
        let (live, in_session, in_daemon) = Self::count(session);
        let caps = [
            (
                in_session,
                config.max_processes_per_session,
                "this session",
                "--max-processes-per-session",
                "maxProcessesPerSession",
            ),
            (
                in_daemon,
                config.max_processes,
                "this exec-server (all sessions)",
                "--max-processes",
                "maxProcesses",
            ),
        ];
        for (count, max, scope, flag, limit) in caps {
            if count > max {
                return Err(ProcessError::TooManyProcesses {
                    scope,
                    flag,
                    limit,
                    max,
                });
            }
        }
        Ok(live)
    }

    /// Counts a process adopted after a restart: it runs already, whatever the caps.
    pub(super) fn adopted(session: &Arc<AtomicUsize>) -> Self {
        Self::count(session).0
    }

    /// The new counts, this one included.
    fn count(session: &Arc<AtomicUsize>) -> (Self, usize, usize) {
        let in_session = session.fetch_add(1, Ordering::Relaxed) + 1;
        let in_daemon = DAEMON.fetch_add(1, Ordering::Relaxed) + 1;
        let live = Self {
            session: session.clone(),
        };
        (live, in_session, in_daemon)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.session.fetch_sub(1, Ordering::Relaxed);
        DAEMON.fetch_sub(1, Ordering::Relaxed);
    }
}
