//! The daemon as the runtime image of kubernetes-sigs/agent-sandbox (issue #45), on the serving
//! port beside the WebSocket: the health routes its templates, router and SDKs probe, the
//! legacy runtime API its SDK calls (`execute`, `files`, both under `--runtime-sandbox`), and
//! the guard every request of the port passes (the `X-Sandbox-ID` check, the drain). See
//! docs/agent-sandbox.md.

mod execute;
mod files;

use crate::server::Daemon;
use crate::session::Session;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::routing::post;
use axum::{Json, Router};
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use exec_server_protocol::PathUri;
use serde_json::json;
use std::sync::Arc;

/// The health routes, which answer 503 from SIGTERM until exit.
const HEALTH: [&str; 4] = ["/", "/readyz", "/v1/health", "/health"];

/// The largest `/execute` request (a command line as JSON).
const MAX_EXECUTE_BODY_BYTES: usize = 1024 * 1024;

/// The legacy runtime API's state: the session its commands are processes of, held by the
/// daemon (never attached, never expiring), as an envd listener's; made at the first command,
/// so a daemon nobody calls this way holds none.
struct Runtime {
    daemon: Arc<Daemon>,
    session: tokio::sync::OnceCell<Arc<Session>>,
}

impl Runtime {
    fn session(&self) -> Result<&Arc<Session>, crate::session::SessionError> {
        if let Some(session) = self.session.get() {
            return Ok(session);
        }
        let held = self.daemon.sessions.hold("agent-sandbox runtime")?;
        // A concurrent first command held the same session (one id): either is it.
        let _ = self.session.set(held);
        Ok(self.session.get().expect("set above"))
    }

    /// The base directory, where commands run and files are confined.
    fn base_uri(&self) -> Result<PathUri, String> {
        PathUri::from_path(&self.daemon.config.runtime.base_dir).map_err(|err| err.to_string())
    }

    /// `--runtime-sandbox` anchored at the base directory (`base`); None without it.
    fn sandbox(&self, base: &PathUri) -> Option<FileSystemSandboxContext> {
        let (_, profile) = self.daemon.config.runtime.sandbox.as_ref()?;
        crate::sandbox::profile::anchored(profile, base)
    }
}

/// The health routes and the legacy runtime API.
pub(crate) fn routes(daemon: &Arc<Daemon>) -> anyhow::Result<Router<Arc<Daemon>>> {
    if let Some((path, profile)) = &daemon.config.runtime.sandbox {
        crate::sandbox::profile::check(profile).map_err(|err| {
            anyhow::anyhow!(
                "--runtime-sandbox {} is not a sandbox profile: {err}",
                path.display()
            )
        })?;
    }
    let runtime = Arc::new(Runtime {
        daemon: daemon.clone(),
        session: Default::default(),
    });
    // A body that stalls is cut at the listener's HTTP-phase deadline; one that runs on, at
    // its size limit.
    let stalled = tower_http::timeout::RequestBodyTimeoutLayer::new(daemon.config.upgrade_timeout);
    let legacy = Router::new()
        .route(
            "/execute",
            post(execute::execute).layer(DefaultBodyLimit::max(MAX_EXECUTE_BODY_BYTES)),
        )
        .route("/upload", post(files::upload))
        .route("/download/{*path}", get(files::download))
        .route("/list/{*path}", get(files::list))
        .route("/exists/{*path}", get(files::exists))
        .layer(stalled)
        .layer(axum::middleware::from_fn_with_state(
            runtime.clone(),
            authenticate,
        ))
        .with_state(runtime);
    Ok(Router::new()
        .route("/readyz", get(readyz))
        .route("/v1/health", get(sandboxd_health))
        .route("/health", get(envd_health))
        .merge(legacy))
}

/// Refuses a request of the legacy API from a browser or without the connection token; an
/// accepted one takes its connection out of the HTTP phase (`Authenticated`).
async fn authenticate(
    State(runtime): State<Arc<Runtime>>,
    request: Request,
    next: Next,
) -> Response {
    let auth = runtime.daemon.config.upgrade_auth.as_ref();
    if let Some((status, why)) = crate::ws_auth::refusal(auth, request.headers()) {
        return message(status, why);
    }
    if let Some(authenticated) = request.extensions().get::<Authenticated>() {
        authenticated.0.cancel();
    }
    next.run(request).await
}

/// The reference's error shape: `{"message": ...}`.
fn message(status: StatusCode, text: &str) -> Response {
    (status, Json(json!({ "message": text }))).into_response()
}

/// Set by the first authenticated request of a connection: the listener then lifts its
/// HTTP-phase deadline and gives its place back, as an upgrade does.
#[derive(Clone, Default)]
pub(crate) struct Authenticated(tokio_util::sync::CancellationToken);

impl Authenticated {
    pub(crate) async fn wait(&self) {
        self.0.cancelled().await
    }
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
