//! What the whole daemon shares, built once by the transport and handed down to every
//! listener, connection and request: the sessions, the settings, the audit log, the metrics
//! and the directories all `fs/watch`es watch together.

use crate::audit::Audit;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::session::Registry;
use crate::state_dir::StateDir;
use std::sync::Arc;

pub(crate) struct Daemon {
    pub(crate) sessions: Arc<Registry>,
    pub(crate) config: Arc<Config>,
    pub(crate) audit: Audit,
    pub(crate) metrics: &'static Metrics,
    /// Directories watched by every connection's `fs/watch`es together.
    pub(crate) watched_directories: crate::fs::WatchedDirectories,
    /// Refused and failed requests, logged once per cause at the default level.
    pub(crate) refusals: super::refusals::Refusals,
}

impl Daemon {
    /// The daemon of `config`; with `state`, the state directory its sessions are kept in.
    pub(crate) fn new(config: Config, audit: Audit, state: Option<StateDir>) -> Arc<Self> {
        let config = Arc::new(config);
        Arc::new(Self {
            sessions: Registry::new(
                config.clone(),
                audit.clone(),
                state,
                crate::environment::info,
            ),
            config,
            audit,
            metrics: crate::metrics::get(),
            watched_directories: Default::default(),
            refusals: Default::default(),
        })
    }

    /// `GET /metrics`'s text, with the sessions and processes counted now.
    pub(crate) fn metrics_text(&self) -> String {
        self.metrics.render(&self.sessions.census())
    }
}
