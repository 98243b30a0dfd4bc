//! JSON-RPC errors with the codes the codex exec-server uses.

use exec_server_protocol::rpc::{code, ErrorObject};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_REQUEST, message)
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(code::NOT_FOUND, message)
    }

    /// Upstream's text, word for word: a client may match on it.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("exec-server stub does not implement `{method}` yet"),
        )
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Maps an I/O error the way the reference does: NotFound -32004, invalid input or
    /// permission -32600, anything else -32603; `data.errno`/`data.kind` say more.
    pub fn from_io(err: &std::io::Error) -> Self {
        use std::io::ErrorKind::*;
        let code = match err.kind() {
            NotFound => code::NOT_FOUND,
            InvalidInput | PermissionDenied => code::INVALID_REQUEST,
            _ => code::INTERNAL_ERROR,
        };
        let mut data = serde_json::Map::new();
        data.insert("kind".into(), Value::String(format!("{:?}", err.kind())));
        if let Some(errno) = err.raw_os_error() {
            data.insert("errno".into(), Value::from(errno));
        }
        Self::new(code, err.to_string()).with_data(Value::Object(data))
    }

    pub fn to_object(&self) -> ErrorObject {
        ErrorObject {
            code: self.code,
            message: self.message.clone(),
            data: self.data.clone(),
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// For handlers that cannot fail.
impl From<std::convert::Infallible> for RpcError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}
