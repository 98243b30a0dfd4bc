//! Sessions: the unit that owns processes. A session outlives its connection; it is attached
//! to at most one connection at a time and can be resumed by id from another.

mod registry;

pub(crate) use registry::Registry;
// Processes follow the attachment to deliver their events: it is theirs, the session sets it.
pub(crate) use crate::process::Attachment;

use crate::config::Config;
use crate::process::ProcessTable;
use crate::rpc::RpcError;
use exec_server_protocol::environment::EnvironmentInfo;
use exec_server_protocol::rpc::code;
use exec_server_protocol::session::{DisconnectPolicy, InitializeParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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
    #[error(
        "sessionTtlMs must be between 1 and {max_ms} (the daemon's --max-session-ttl), not {value}"
    )]
    TtlOutOfRange { max_ms: i64, value: i64 },
    #[error(
        "session {0} keeps the onDisconnect and sessionTtlMs it was created with; a resume may \
         repeat them or leave them out"
    )]
    PolicyChanged(String),
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
            SessionError::TtlOutOfRange { .. } | SessionError::PolicyChanged(_) => {
                RpcError::invalid_params(message)
            }
        }
    }
}

/// What becomes of a session when its connection drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Policy {
    pub on_disconnect: DisconnectPolicy,
    /// How long a detached session waits for a resume (with `keep`).
    pub ttl: Duration,
}

/// The policy an `initialize` asked for; a part left out means the daemon's default for a new
/// session, the session's own for a resume.
pub(crate) struct RequestedPolicy {
    on_disconnect: Option<DisconnectPolicy>,
    ttl: Option<Duration>,
}

impl RequestedPolicy {
    pub(crate) fn from_params(
        params: &InitializeParams,
        config: &Config,
    ) -> Result<Self, SessionError> {
        let max_ms = i64::try_from(config.max_session_ttl.as_millis()).unwrap_or(i64::MAX);
        let ttl = match params.session_ttl_ms {
            Some(value) if !(1..=max_ms).contains(&value) => {
                return Err(SessionError::TtlOutOfRange { max_ms, value })
            }
            value => value.map(|ms| Duration::from_millis(ms as u64)),
        };
        Ok(Self {
            on_disconnect: params.on_disconnect,
            ttl,
        })
    }

    /// A session kept when its connection drops, for the daemon's default time.
    fn keep() -> Self {
        Self {
            on_disconnect: Some(DisconnectPolicy::Keep),
            ttl: None,
        }
    }

    fn for_new_session(&self, config: &Config) -> Policy {
        Policy {
            on_disconnect: self.on_disconnect.unwrap_or_default(),
            ttl: self.ttl.unwrap_or(config.session_ttl),
        }
    }

    /// A resume may repeat the session's policy, never change it: a client that asks for
    /// another one learns that it does not have it.
    fn check_resume(&self, session: &Session) -> Result<(), SessionError> {
        let policy = &session.policy;
        if self
            .on_disconnect
            .is_some_and(|asked| asked != policy.on_disconnect)
            || self.ttl.is_some_and(|asked| asked != policy.ttl)
        {
            return Err(SessionError::PolicyChanged(session.id.clone()));
        }
        Ok(())
    }
}

pub(crate) struct Session {
    pub id: String,
    pub processes: ProcessTable,
    /// What `initialize` reported when the session was created; a resume reports it again so
    /// the client sees the same executor it started with, field for field.
    pub environment_info: EnvironmentInfo,
    pub policy: Policy,
    /// Its shell snapshots (`process/start.shellSnapshot`), in memory only.
    pub snapshots: crate::process::snapshot::Cache,
    attachment: watch::Sender<Option<Attachment>>,
}

impl Session {
    fn new(
        id: String,
        config: Arc<Config>,
        environment_info: EnvironmentInfo,
        attachment: Option<Attachment>,
        policy: Policy,
        spares: Option<Arc<crate::process::store::Spares>>,
    ) -> Self {
        let (sender, receiver) = watch::channel(attachment);
        Self {
            environment_info,
            processes: ProcessTable::new(config, receiver, id.clone(), spares),
            id,
            policy,
            snapshots: Default::default(),
            attachment: sender,
        }
    }

    pub(crate) fn attachment(&self) -> watch::Receiver<Option<Attachment>> {
        self.attachment.subscribe()
    }

    pub(crate) fn attached_connection(&self) -> Option<u64> {
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
