//! The JSON-RPC envelope, in both dialects: the Codex one (no `"jsonrpc"` member) and strict 2.0.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Error codes the daemon uses, matching the codex exec-server.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const NOT_FOUND: i64 = -32004;
    pub const SESSION_ALREADY_ATTACHED: i64 = -32010;
    /// An `idempotent` `process/start` repeated a process id with other params (this daemon's
    /// addition); `data.fields` names them.
    pub const START_CONFLICT: i64 = -32011;
    /// With `--audit-required`, the action's audit record could not be written, so the action
    /// was not performed (this daemon's addition).
    pub const AUDIT_FAILED: i64 = -32012;
}

/// A request id: a string or an integer, echoed back verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RequestId {
    Integer(i64),
    String(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl std::fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}

/// Any message either side sends. `jsonrpc` is accepted and, when present, echoed in replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Message {
    Request {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jsonrpc: Option<String>,
        id: RequestId,
        method: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        params: Option<Value>,
    },
    Notification {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jsonrpc: Option<String>,
        method: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        params: Option<Value>,
    },
    Response {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jsonrpc: Option<String>,
        id: RequestId,
        result: Value,
    },
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jsonrpc: Option<String>,
        id: Option<RequestId>,
        error: ErrorObject,
    },
}

/// Method and notification names, from the table in [`crate::methods`].
pub use crate::methods::names as method;
