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
