//! The sandboxd runtime contract of kubernetes-sigs/agent-sandbox (KEP-539.2 Core, REST part),
//! on the listener beside the WebSocket upgrade: `/v1/files/{path}` (GET, HEAD, PUT, DELETE,
//! in `files`) and `/v1/metadata` behind the listener's token; `/v1/health` is the runtime
//! API's (`crate::runtime_api`), 503 from SIGTERM until the daemon exits.
//! Errors are the contract's `{"code", "message"}` at the HTTP status it names. The gRPC
//! ProcessService is `grpc`, on a port of its own.

mod files;
pub(crate) mod grpc;
mod tree;

use crate::server::Daemon;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

/// The routes the listener's token guards: files and metadata.
pub(crate) fn guarded_routes(daemon: Arc<Daemon>) -> Router {
    let files = || get(files::read).put(files::write).delete(files::remove);
    // `/v1/files/` is the root itself.
    Router::new()
        .route("/v1/files/{*path}", files())
        .route("/v1/files/", files())
        .route("/v1/metadata", get(metadata))
        .with_state(daemon)
}

/// Non-sensitive configuration only (the contract's rule: code in the sandbox can read it):
/// where paths resolve, and which daemon this is.
async fn metadata(State(daemon): State<Arc<Daemon>>) -> Json<serde_json::Value> {
    let root = daemon.config.sandboxd_root.display().to_string();
    Json(serde_json::json!({
        "env": {
            "SANDBOX_ROOT": root,
            "RUNTIME": "exec-server",
            "RUNTIME_VERSION": env!("CARGO_PKG_VERSION"),
        }
    }))
}

/// An error as the contract words it: `{"code": "PERMISSION_DENIED", "message": ...}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// The contract's code for each status it answers (gRPC's names, as sandboxd uses).
    fn code(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "INVALID_ARGUMENT",
            StatusCode::FORBIDDEN => "PERMISSION_DENIED",
            StatusCode::NOT_FOUND => "NOT_FOUND",
            StatusCode::CONFLICT => "FAILED_PRECONDITION",
            StatusCode::REQUEST_TIMEOUT => "DEADLINE_EXCEEDED",
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::INSUFFICIENT_STORAGE => {
                "RESOURCE_EXHAUSTED"
            }
            StatusCode::SERVICE_UNAVAILABLE => "UNAVAILABLE",
            _ => "INTERNAL",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.code(), "message": self.message });
        (self.status, Json(body)).into_response()
    }
}
