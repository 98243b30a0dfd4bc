//! Sessions: the unit that owns processes. A session outlives its connection; it is attached
//! to at most one connection at a time and can be resumed by id from another.

mod registry;

pub use registry::Registry;

use crate::config::Config;
use crate::process::ProcessTable;
use crate::rpc::outbound::Outbound;
use crate::rpc::RpcError;
use exec_server_protocol::environment::EnvironmentInfo;
use exec_server_protocol::rpc::code;
use std::sync::Arc;
use tokio::sync::watch;

/// How logs name a session. Its id lets any connection take the session over, so logs carry only
/// the first 8 hex digits of the id's SHA-256 (`printf %s ID | sha256sum` finds its lines).
pub fn log_digest(id: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    digest.as_ref()[..4]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The connection a session's notifications currently go to.
#[derive(Clone, Debug)]
pub struct Attachment {
    pub connection_id: u64,
    pub outbound: Outbound,
}

/// Why a session cannot be created, resumed or used; an attached session's resume has the
/// code codex's client retries on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("session has been resumed by another connection")]
    ResumedElsewhere,
    #[error("unknown session id {0}")]
    Unknown(String),
    #[error("session {0} is already attached to another connection")]
    AlreadyAttached(String),
    #[error("the exec-server is shutting down")]
    ShuttingDown,
}

impl From<SessionError> for RpcError {
    fn from(err: SessionError) -> Self {
        let message = err.to_string();
        match err {
            SessionError::AlreadyAttached(_) => {
                RpcError::new(code::SESSION_ALREADY_ATTACHED, message)
            }
            SessionError::ResumedElsewhere
            | SessionError::Unknown(_)
            | SessionError::ShuttingDown => RpcError::invalid_request(message),
        }
    }
}

pub struct Session {
    pub id: String,
    pub processes: ProcessTable,
    /// What `initialize` reported when the session was created; a resume reports it again so
    /// the client sees the same executor it started with, field for field.
    pub environment_info: EnvironmentInfo,
    attachment: watch::Sender<Option<Attachment>>,
}

impl Session {
    fn new(id: String, config: Arc<Config>, attachment: Attachment) -> Self {
        let (sender, receiver) = watch::channel(Some(attachment));
        Self {
            id,
            processes: ProcessTable::new(config, receiver),
            environment_info: crate::environment::info(),
            attachment: sender,
        }
    }

    pub fn attachment(&self) -> watch::Receiver<Option<Attachment>> {
        self.attachment.subscribe()
    }

    pub fn attached_connection(&self) -> Option<u64> {
        self.attachment.borrow().as_ref().map(|a| a.connection_id)
    }

    /// Fails once another connection than `connection_id` has resumed this session.
    pub(crate) fn ensure_attached(&self, connection_id: u64) -> Result<(), SessionError> {
        if self.attached_connection() == Some(connection_id) {
            Ok(())
        } else {
            Err(SessionError::ResumedElsewhere)
        }
    }

    fn set_attachment(&self, attachment: Option<Attachment>) {
        self.attachment.send_replace(attachment);
    }
}
