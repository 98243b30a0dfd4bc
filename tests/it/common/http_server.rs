//! A tiny HTTP server on 127.0.0.1 for `http/request` tests and the doc examples.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Size of the `/big` body: several deltas' worth, and not a multiple of anything.
pub const BIG_BODY_BYTES: usize = 3 * 1024 * 1024 + 4321;

/// Delay of `/slow`.
pub const SLOW: Duration = Duration::from_millis(250);

#[derive(Default)]
pub struct ServerState {
    /// Requests that reached `/target`.
    pub target_hits: AtomicUsize,
    /// `/endless` and `/stall` bodies dropped (their client went away).
    pub bodies_dropped: AtomicUsize,
}

pub struct HttpServer {
    /// `http://127.0.0.1:PORT` (or the address it was started on)
    pub base: String,
    pub state: Arc<ServerState>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// Routes: `/echo` (201, echoes the method, `x-echo` and `authorization` headers and the
    /// body), `/hello`, `/big` ([`big_body`]), `/redirect` → `/target`, `/redirect-away` → a
    /// non-loopback host, `/slow` ([`SLOW`]), `/endless` (a tick every 10 ms) and `/stall`
    /// (headers, then no body ever); the last two count their drops.
    pub async fn start() -> Self {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// [`HttpServer::start`], listening on `ip` (`base` names it).
    pub async fn start_on(ip: std::net::IpAddr) -> Self {
        let state = Arc::new(ServerState::default());
        let app = Router::new()
            .route("/echo", any(echo))
            .route("/hello", get(|| async { "hello world" }))
            .route("/big", get(|| async { big_body() }))
            .route("/redirect", get(|| async { redirect("/target") }))
            .route(
                "/redirect-away",
                get(|| async { redirect("http://10.255.255.1/") }),
            )
            .route("/target", get(target))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(SLOW).await;
                    "slow"
                }),
            )
            .route("/endless", get(endless))
            .route("/stall", get(stall))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base, state, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn hits(&self) -> usize {
        self.state.target_hits.load(Ordering::SeqCst)
    }

    pub fn bodies_dropped(&self) -> usize {
        self.state.bodies_dropped.load(Ordering::SeqCst)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `/big` body: a byte pattern with a period that no chunk size shares.
pub fn big_body() -> Vec<u8> {
    (0..BIG_BODY_BYTES).map(|i| (i % 251) as u8).collect()
}

async fn echo(method: Method, headers: HeaderMap, body: Bytes) -> Response {
    let mut reply = HeaderMap::new();
    reply.insert("x-method", method.as_str().parse().unwrap());
    for value in headers.get_all("x-echo") {
        reply.append("x-echo", value.clone());
    }
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        reply.insert("x-authorization", auth.clone());
    }
    (StatusCode::CREATED, reply, body).into_response()
}

fn redirect(location: &'static str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

async fn target(State(state): State<Arc<ServerState>>) -> &'static str {
    state.target_hits.fetch_add(1, Ordering::SeqCst);
    "target"
}

/// Counts a response body as dropped when it goes away (the client left or finished).
struct DropCounter(Arc<ServerState>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.bodies_dropped.fetch_add(1, Ordering::SeqCst);
    }
}

async fn endless(State(state): State<Arc<ServerState>>) -> Body {
    Body::from_stream(futures::stream::unfold(DropCounter(state), |guard| async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Some((
            Ok::<_, std::convert::Infallible>(Bytes::from_static(b"tick\n")),
            guard,
        ))
    }))
}

async fn stall(State(state): State<Arc<ServerState>>) -> Body {
    Body::from_stream(futures::stream::unfold(
        DropCounter(state),
        |guard| async move {
            let _held_until_dropped = guard;
            std::future::pending::<Option<(Result<Bytes, std::convert::Infallible>, DropCounter)>>()
                .await
        },
    ))
}
