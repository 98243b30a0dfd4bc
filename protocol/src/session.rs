//! The handshake: `initialize` creates or resumes a session, `initialized` completes it.

use crate::environment::EnvironmentInfo;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub client_name: String,
    /// Take over an existing, detached session instead of creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_session_id: Option<String>,
    /// Ask for byte-heavy messages as binary WebSocket messages (see [`crate::binary`]); this
    /// daemon's addition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary_payloads: bool,
    /// What becomes of the session's processes when its connection drops (default `keep`);
    /// this daemon's addition. A resume keeps the session's policy and refuses another one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_disconnect: Option<DisconnectPolicy>,
    /// How long the session survives without a connection (default: the daemon's
    /// `--session-ttl`), at most the daemon's `--max-session-ttl`; this daemon's addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_ttl_ms: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DisconnectPolicy {
    /// The session waits its time-to-live for a resume; its processes run on.
    #[default]
    Keep,
    /// The session ends at once: its process trees are killed (`reason: "disconnected"`).
    Kill,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub session_id: String,
    /// The same object `environment/info` returns, to save a round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_info: Option<EnvironmentInfo>,
    /// Byte-heavy messages of this connection come as binary WebSocket messages (asked for,
    /// and the transport is a WebSocket); this daemon's addition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary_payloads: bool,
}
