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

/// Method and notification names.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "initialized";
    pub const PROCESS_START: &str = "process/start";
    pub const PROCESS_READ: &str = "process/read";
    pub const PROCESS_WRITE: &str = "process/write";
    pub const PROCESS_SIGNAL: &str = "process/signal";
    pub const PROCESS_TERMINATE: &str = "process/terminate";
    pub const PROCESS_RESIZE: &str = "process/resize";
    pub const PROCESS_CLOSE_STDIN: &str = "process/closeStdin";
    pub const PROCESS_OUTPUT: &str = "process/output";
    pub const PROCESS_EXITED: &str = "process/exited";
    pub const PROCESS_CLOSED: &str = "process/closed";
    pub const FS_READ_FILE: &str = "fs/readFile";
    pub const FS_WRITE_FILE: &str = "fs/writeFile";
    pub const FS_CREATE_DIRECTORY: &str = "fs/createDirectory";
    pub const FS_GET_METADATA: &str = "fs/getMetadata";
    pub const FS_READ_DIRECTORY: &str = "fs/readDirectory";
    pub const FS_REMOVE: &str = "fs/remove";
    pub const FS_COPY: &str = "fs/copy";
    pub const FS_RENAME: &str = "fs/rename";
    pub const FS_CANONICALIZE: &str = "fs/canonicalize";
    pub const FS_WALK: &str = "fs/walk";
    pub const FS_OPEN: &str = "fs/open";
    pub const FS_READ_BLOCK: &str = "fs/readBlock";
    pub const FS_WRITE_BLOCK: &str = "fs/writeBlock";
    pub const FS_CLOSE: &str = "fs/close";
    pub const FS_WATCH: &str = "fs/watch";
    pub const FS_UNWATCH: &str = "fs/unwatch";
    pub const FS_CHANGED: &str = "fs/changed";
    pub const ENVIRONMENT_INFO: &str = "environment/info";
    pub const ENVIRONMENT_STATUS: &str = "environment/status";
    pub const HTTP_REQUEST: &str = "http/request";
    pub const HTTP_REQUEST_BODY_DELTA: &str = "http/request/bodyDelta";
}
