//! What the whole daemon shares, built once by the transport and handed down to every
//! listener, connection and request: the sessions, the settings, the audit log, the metrics
//! and the watchers of every listener together.

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
    /// Watchers, and the directories they watch, of every listener's watches together.
    pub(crate) watches: crate::fs::WatchUse,
    /// Refused and failed requests, logged once per cause at the default level.
    pub(crate) refusals: super::refusals::Refusals,
    /// Set on SIGTERM (or SIGINT): from then until exit the health routes answer 503, so the
    /// pod leaves its Service while its processes are drained.
    stopping: std::sync::atomic::AtomicBool,
    /// When it started: `/v1/health` reports the uptime.
    pub(crate) started: std::time::Instant,
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
            watches: Default::default(),
            refusals: Default::default(),
            stopping: Default::default(),
            started: std::time::Instant::now(),
        })
    }

    /// From now on the daemon is shutting down.
    pub(crate) fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The watch budget of every listener: the daemon's watches and limits, and each
    /// connection's limits.
    pub(crate) fn watch_budget(&self) -> crate::fs::WatchBudget {
        let config = &self.config;
        crate::fs::WatchBudget {
            daemon: self.watches.clone(),
            daemon_limits: crate::fs::WatchLimits {
                watchers: config.max_watchers,
                directories: config.max_watched_directories,
            },
            connection_limits: crate::fs::WatchLimits {
                watchers: crate::fs::MAX_WATCHES,
                directories: config.max_watched_directories_per_connection,
            },
        }
    }

    /// `GET /metrics`'s text, with the sessions and processes counted now.
    pub(crate) fn metrics_text(&self) -> String {
        self.metrics.render(&self.sessions.census())
    }
}
