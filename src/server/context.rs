//! What every request handler is given: its connection and its session.

use crate::rpc::Call;
use crate::session::{Registry, Session};
use std::sync::Arc;

/// The parts of a connection that outlive a single request.
pub(crate) struct ConnectionShared {
    pub(crate) id: u64,
    pub(crate) outbound: crate::rpc::outbound::Outbound,
    pub(crate) registry: Arc<Registry>,
    /// Open `fs/open` handles and `fs/watch` watches of this connection.
    pub(crate) fs: crate::fs::ConnectionFs,
    /// Streamed `http/request` bodies; dropping it (the connection ended) stops them.
    pub(crate) http: crate::http::HttpStreams,
}

pub(crate) struct RequestCtx {
    pub(crate) connection: Arc<ConnectionShared>,
    pub(crate) session: Arc<Session>,
    pub(crate) call: Call,
}

impl RequestCtx {
    pub(crate) fn new(connection: Arc<ConnectionShared>, session: Arc<Session>) -> Self {
        let call = Call::new(connection.outbound.clone());
        Self {
            connection,
            session,
            call,
        }
    }
}

impl ConnectionShared {
    /// What this connection's `fs/watch`es may watch, beside the whole daemon's.
    pub(crate) fn watch_budget(&self) -> crate::fs::WatchBudget {
        let config = &self.registry.config;
        crate::fs::WatchBudget {
            daemon: self.registry.watched_directories.clone(),
            daemon_limit: config.max_watched_directories,
            connection_limit: config.max_watched_directories_per_connection,
        }
    }
}
