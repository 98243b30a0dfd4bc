//! The daemon as the runtime image of kubernetes-sigs/agent-sandbox (issue #45), on the serving
//! port beside the WebSocket: the health routes its templates, router and SDKs probe, and the
//! guard every request of the port passes (the `X-Sandbox-ID` check, the drain). See
//! docs/agent-sandbox.md.

use crate::server::Daemon;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

/// The health routes, which answer 503 from SIGTERM until exit.
const HEALTH: [&str; 4] = ["/", "/readyz", "/v1/health", "/health"];

pub(crate) fn routes() -> Router<Arc<Daemon>> {
    Router::new()
        .route("/readyz", get(readyz))
        .route("/v1/health", get(sandboxd_health))
        .route("/health", get(envd_health))
}

/// Refuses, before any route: a request routed for another sandbox (421, when `--sandbox-id`
/// names this one), and, while the daemon shuts down, anything but a health probe (503).
pub(crate) async fn guard(
    State(daemon): State<Arc<Daemon>>,
    request: Request,
    next: Next,
) -> Response {
    let this_sandbox = daemon.config.sandbox_id.as_deref();
    if let Some(why) = this_sandbox.and_then(|id| crate::ws_auth::misrouted(id, request.headers()))
    {
        return (StatusCode::MISDIRECTED_REQUEST, why).into_response();
    }
    // `/` is also the upgrade, which is refused.
    let probe = HEALTH.contains(&request.uri().path())
        && !request.headers().contains_key(axum::http::header::UPGRADE);
    if daemon.is_stopping() && !probe {
        return shutting_down().into_response();
    }
    next.run(request).await
}

fn shutting_down() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "code": "UNAVAILABLE", "message": "the daemon is shutting down" })),
    )
}

/// `GET /` without an upgrade: the legacy runtime's health (`python-runtime-main.py`), which
/// agent-sandbox's example templates probe.
pub(crate) fn legacy_health(daemon: &Daemon) -> Response {
    if daemon.is_stopping() {
        return shutting_down().into_response();
    }
    Json(json!({ "status": "ok", "message": "Sandbox Runtime is active." })).into_response()
}

/// `GET /readyz`: what this host offers the sandbox (`environment/info`'s `sandbox`), so a fleet
/// sees which nodes can enforce which intent before sending any; 503 with the same shape while
/// shutting down.
async fn readyz(State(daemon): State<Arc<Daemon>>) -> Response {
    let facilities = crate::sandbox::facilities::report(crate::sandbox::enforceable());
    let (status, text) = match daemon.is_stopping() {
        false => (StatusCode::OK, "ready"),
        true => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
    };
    let body = json!({ "status": text, "sandbox": facilities });
    (status, Json(body)).into_response()
}

/// `GET /v1/health`: sandboxd's `HealthResponse`, or its `Error` with 503 while shutting down.
async fn sandboxd_health(State(daemon): State<Arc<Daemon>>) -> Response {
    if daemon.is_stopping() {
        return shutting_down().into_response();
    }
    let uptime = daemon.started.elapsed().as_secs();
    Json(json!({ "status": "ok", "uptime_seconds": uptime })).into_response()
}

/// `GET /health`: envd's, 204 with no body.
async fn envd_health(State(daemon): State<Arc<Daemon>>) -> Response {
    match daemon.is_stopping() {
        false => StatusCode::NO_CONTENT.into_response(),
        true => shutting_down().into_response(),
    }
}
