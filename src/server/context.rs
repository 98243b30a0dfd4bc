//! What every request handler is given: its connection and its session.

use super::Daemon;
use crate::rpc::Call;
use crate::session::Session;
use std::sync::Arc;

/// The parts of a connection that outlive a single request.
pub(crate) struct ConnectionShared {
    pub(crate) id: u64,
    pub(crate) outbound: crate::rpc::outbound::Outbound,
    pub(crate) daemon: Arc<Daemon>,
    /// Who is on the other end, for the audit log.
    pub(crate) who: crate::audit::Identity,
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

impl RequestCtx {
    /// Records `action` in the audit log before it is performed; an error means it must not be.
    pub(crate) async fn audit(
        &self,
        action: &str,
        details: impl FnOnce() -> serde_json::Value,
    ) -> Result<(), crate::audit::AuditError> {
        let connection = &self.connection;
        let audit = &connection.daemon.audit;
        audit
            .before(&connection.who, &self.session.id, action, details)
            .await
    }
}

impl ConnectionShared {
    /// What this connection's `fs/watch`es may watch, beside the whole daemon's.
    pub(crate) fn watch_budget(&self) -> crate::fs::WatchBudget {
        self.daemon.watch_budget()
    }
}
