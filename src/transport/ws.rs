//! The WebSocket listener: `/` upgrades and `/metrics` (both guarded against browsers and, when
//! configured, by a bearer token), and agent-sandbox's routes (`crate::runtime_api`). One JSON-RPC message per frame, Text or
//! Binary. And the optional plain `/metrics` listener.

use super::zero_copy;
use crate::audit::Identity;
use crate::config::Config;
use crate::rpc::outbound::Outbound;
use crate::server::admission::{accept_tcp, retry_accept, Admission, Peer};
use crate::server::{self, AtEnd, Daemon, Frame};
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::State;
use axum::http::{header, HeaderMap, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Extension;
use axum::Router;
use futures::{Sink, Stream, StreamExt as _};
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::io::Write as _;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use writer::Writer;

mod writer;

const PROTOCOL_ERROR: u16 = 1002;
const MESSAGE_TOO_BIG: u16 = 1009;

/// How long a connection closed for a hand-over waits for the peer's Close.
const CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// How long a connection past its HTTP phase may take to send its next request's head.
const IDLE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Initial WebSocket read buffer per connection.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Every connection of the listener, in its HTTP phase or upgraded, so that a hand-over to a
/// successor can close them all.
#[derive(Clone, Default)]
pub(super) struct Connections {
    restart: CancellationToken,
    tracker: TaskTracker,
}

impl Connections {
    /// Closes every connection: an HTTP one after the request it is serving (a WebSocket
    /// upgrade among them), a WebSocket one with 1012 (service restart), so that clients
    /// reconnect and resume. Waits until they are closed, at most `limit`; returns how many
    /// there were.
    pub(super) async fn close_for_restart(&self, limit: Duration) -> usize {
        let open = self.tracker.len();
        self.restart.cancel();
        self.tracker.close();
        if tokio::time::timeout(limit, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "{} connection(s) still open after {limit:?}; leaving them",
                self.tracker.len()
            );
        }
        open
    }

    /// Whether they are being closed for a hand-over to a successor.
    pub(super) fn closing(&self) -> bool {
        self.restart.is_cancelled()
    }

    /// Serves `socket`, which the daemon dialed (remote mode), as one of these connections.
    pub(super) async fn serve_dialed(
        &self,
        socket: impl Socket,
        daemon: &Arc<Daemon>,
        who: Identity,
    ) {
        let _open = self.tracker.token();
        let kind = "direct exec-server websocket";
        run(
            socket,
            daemon.clone(),
            who,
            self.restart.clone(),
            kind,
            None,
        )
        .await;
    }
}

/// How the listener started.
pub(super) struct Start {
    pub connections: Connections,
    /// Whether it was handed over by a predecessor.
    pub took_over: bool,
}

/// A listener's routes, and the places of connections in their HTTP phase.
struct Http {
    app: TowerToHyperService<Router>,
    /// Connections in their HTTP phase (nothing authenticated yet) hold a place, so slow or
    /// silent peers can neither pile up without bound nor stay forever.
    admission: Admission,
    connections: Connections,
}

impl Http {
    fn new(app: Router, config: &Config, connections: Connections) -> Self {
        Self {
            app: TowerToHyperService::new(app),
            admission: Admission::new(config),
            connections,
        }
    }

    /// Announces `url` (the one line on stdout: clients and harnesses read the bound address
    /// from it) and builds the routes.
    fn announce(url: &str, daemon: Arc<Daemon>, start: Start) -> anyhow::Result<Self> {
        let printed = writeln!(std::io::stdout().lock(), "{url}");
        match printed {
            Ok(()) => {}
            // A successor's stdout is its predecessor's, which whoever read the first banner
            // may have closed since; the address is the same.
            Err(err) if start.took_over => {
                tracing::warn!("cannot print the listening address on stdout: {err}")
            }
            Err(err) => return Err(err.into()),
        }
        tracing::info!("exec-server listening on {url}");
        super::systemd::notify_serving(start.took_over);
        let config = daemon.config.clone();
        // The sandboxd REST contract (agent-sandbox's runtime API) behind the same check as the
        // upgrade; its health probe without it.
        let sandboxd = crate::sandboxd::guarded_routes(daemon.clone()).route_layer(
            axum::middleware::from_fn_with_state(daemon.clone(), guarded),
        );
        let app = Router::new()
            .route("/metrics", get(guarded_metrics))
            .route("/", any(upgrade))
            .merge(crate::runtime_api::routes(&daemon)?)
            .with_state::<()>(daemon.clone())
            .merge(sandboxd)
            .layer(axum::middleware::from_fn_with_state(
                daemon,
                crate::runtime_api::guard,
            ));
        Ok(Self::new(app, &config, start.connections))
    }

    /// Serves one accepted connection's HTTP phase (`/readyz`, or the upgrade) in a task, once
    /// `stream` is ready (a TLS handshake comes first, under the same deadline and place).
    /// `plain` is the socket itself when no TLS is in between: its writer sends data frames
    /// straight into it (see `super::zero_copy`).
    fn spawn<S>(
        &self,
        stream: impl std::future::Future<Output = std::io::Result<S>> + Send + 'static,
        who: Identity,
        from: Peer,
        plain: Option<zero_copy::Socket>,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let peer = who.peer.clone();
        let place = match self.admission.admit(from) {
            Ok(place) => place,
            Err(full) => {
                tracing::debug!(%peer, "{full}; closing");
                return;
            }
        };
        let app = self.app.clone();
        let connections = self.connections.clone();
        let authenticated = crate::runtime_api::Authenticated::default();
        let signal = authenticated.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(who.clone());
            request.extensions_mut().insert(connections.clone());
            request.extensions_mut().insert(plain.clone());
            request.extensions_mut().insert(signal.clone());
            app.call(request)
        });
        self.connections.tracker.spawn(async move {
            // The connection future completes once the upgrade hands the socket over.
            let connection = async {
                match stream.await {
                    Ok(stream) => {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .timer(hyper_util::rt::TokioTimer::new())
                            // Bounds a kept-alive connection's wait for its next request once
                            // it left the HTTP phase (an authenticated runtime API request).
                            .header_read_timeout(IDLE_REQUEST_TIMEOUT)
                            .serve_connection(TokioIo::new(stream), service)
                            .with_upgrades()
                            .await;
                    }
                    Err(err) => tracing::debug!(%peer, "TLS handshake failed: {err}"),
                }
            };
            let mut connection = std::pin::pin!(connection);
            let mut place = place;
            tokio::select! {
                served = tokio::time::timeout(place.timeout, connection.as_mut()) => {
                    if served.is_err() {
                        tracing::debug!(%peer, "HTTP phase timed out; closing");
                    }
                }
                () = place.evicted() => {
                    tracing::debug!(%peer, "HTTP phase cut short by a newer connection; closing");
                }
                // An authenticated request (a command that runs for minutes, an upload) is
                // past the HTTP phase, as an upgraded connection is: it gives its place back.
                () = authenticated.wait() => {
                    drop(place);
                    connection.await;
                    return;
                }
            }
            drop(place);
        });
    }
}

pub(super) async fn serve_tcp(
    listener: &tokio::net::TcpListener,
    tls: Option<super::tls::Tls>,
    daemon: Arc<Daemon>,
    start: Start,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    crate::sandbox::peers::note_listener(local);
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    if tls.is_none() && !local.ip().is_loopback() && daemon.config.upgrade_auth.is_none() {
        tracing::warn!(
            "LISTENING ON {local} WITHOUT A TOKEN OR TLS: anyone who can reach this address \
             runs commands as this user; set --connection-token-file (and use wss://, or a \
             TLS proxy, beyond a trusted network)"
        );
    }
    let http = Http::announce(&format!("{scheme}://{local}"), daemon, start)?;
    loop {
        let (stream, peer) = accept_tcp(listener).await;
        // Until the upgrade checks a token.
        let who = Identity::anonymous(peer.to_string());
        let from = Peer::of_ip(peer.ip());
        match &tls {
            Some(tls) => http.spawn(tls.acceptor.accept(stream), who, from, None),
            None => {
                let (stream, plain) = zero_copy::plain(stream);
                http.spawn(std::future::ready(Ok(stream)), who, from, Some(plain))
            }
        }
    }
}

pub(super) async fn serve_unix(
    socket: &super::unix_socket::UnixSocket,
    daemon: Arc<Daemon>,
    start: Start,
) -> anyhow::Result<()> {
    let http = Http::announce(&socket.url(), daemon, start)?;
    loop {
        let stream = match socket.listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                retry_accept(err).await;
                continue;
            }
        };
        match socket.admit(&stream) {
            Ok((who, uid)) => {
                let (stream, plain) = zero_copy::plain(stream);
                http.spawn(
                    std::future::ready(Ok(stream)),
                    who,
                    Peer::Uid(uid),
                    Some(plain),
                )
            }
            Err(why) => tracing::warn!("refused a connection on {}: {why}", socket.url()),
        }
    }
}

/// Why a request to an authenticated route (the upgrade, `/metrics`) is refused, if it is.
fn refusal(daemon: &Daemon, headers: &HeaderMap) -> Option<Response> {
    let refused = crate::ws_auth::refusal(daemon.config.upgrade_auth.as_ref(), headers)?;
    Some(refused.into_response())
}

/// The listener's refusal (a browser origin, a missing or wrong token) in front of a route.
async fn guarded(
    State(daemon): State<Arc<Daemon>>,
    request: Request<axum::body::Body>,
    next: axum::middleware::Next,
) -> Response {
    match refusal(&daemon, request.headers()) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

async fn guarded_metrics(State(daemon): State<Arc<Daemon>>, headers: HeaderMap) -> Response {
    match refusal(&daemon, &headers) {
        Some(refused) => refused,
        None => metrics(State(daemon)).await,
    }
}

/// `GET /metrics`: the Prometheus text exposition.
async fn metrics(State(daemon): State<Arc<Daemon>>) -> Response {
    let text = daemon.metrics_text();
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// Serves `GET /metrics` alone, without the token, on `listener` (--metrics-listen): with the
/// main port's places and deadline, and closed to sandboxes as it is.
pub(super) async fn serve_metrics(listener: tokio::net::TcpListener, daemon: Arc<Daemon>) {
    let config = daemon.config.clone();
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(daemon);
    // Its connections are not handed over in an upgrade: each serves one scrape.
    let http = Http::new(app, &config, Connections::default());
    loop {
        let (stream, peer) = accept_tcp(&listener).await;
        let who = Identity::anonymous(peer.to_string());
        http.spawn(
            std::future::ready(Ok(stream)),
            who,
            Peer::of_ip(peer.ip()),
            None,
        );
    }
}

async fn upgrade(
    State(daemon): State<Arc<Daemon>>,
    Extension(mut who): Extension<Identity>,
    Extension(connections): Extension<Connections>,
    Extension(plain): Extension<Option<zero_copy::Socket>>,
    headers: HeaderMap,
    method: axum::http::Method,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // agent-sandbox's legacy runtimes answer their health on `GET /`, where we upgrade.
    if method == axum::http::Method::GET && !headers.contains_key(header::UPGRADE) {
        return crate::runtime_api::legacy_health(&daemon);
    }
    if let Some(refused) = refusal(&daemon, &headers) {
        return refused;
    }
    if daemon.config.upgrade_auth.is_some() {
        who = who.with_token();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    // Messages up to twice the JSON-RPC limit arrive and get a JSON-RPC error naming the
    // limit; beyond that the WebSocket layer closes with 1009 (message too big).
    let hard_limit = daemon.config.max_message_bytes.saturating_mul(2);
    // Counted from here, inside the HTTP phase's own count, so that a hand-over never misses
    // the connection between the two.
    let open = connections.tracker.token();
    let restart = connections.restart;
    // tungstenite zero-fills its whole read buffer on the first read: the 128 KiB default
    // would be resident for every idle connection. Larger messages grow it as needed.
    ws.read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(hard_limit)
        .max_frame_size(hard_limit)
        .on_upgrade(move |socket| async move {
            let frames = plain.map(zero_copy::Frames::new);
            run(
                socket,
                daemon,
                who,
                restart,
                "exec-server websocket",
                frames,
            )
            .await;
            drop(open);
        })
}

/// A WebSocket as the connection loop uses it: an upgraded one (axum's), or one the daemon
/// dialed itself (remote mode, `super::remote`).
pub(super) trait Socket:
    Stream<Item = Result<Message, axum::Error>> + Sink<Message, Error = axum::Error> + Send + 'static
{
}

impl<S> Socket for S where
    S: Stream<Item = Result<Message, axum::Error>>
        + Sink<Message, Error = axum::Error>
        + Send
        + 'static
{
}

/// Serves one WebSocket `socket` to `who` until either side ends it or `restart` (a hand-over)
/// closes it with 1012. `kind` names the socket in parse errors, in codex's words
/// (`exec-server websocket`, or `direct exec-server websocket` for a dialed one). With
/// `plain_frames`, the writer writes data frames into the socket itself.
pub(super) async fn run(
    socket: impl Socket,
    daemon: Arc<Daemon>,
    who: Identity,
    restart: CancellationToken,
    kind: &str,
    plain_frames: Option<zero_copy::Frames>,
) {
    let peer = who.peer.clone();
    let (sink, mut stream) = socket.split();
    let (outbound, queue) = Outbound::new(true, daemon.config.outbound_buffer_bytes);
    let outbound = match plain_frames {
        Some(_) => outbound.sending_files(),
        None => outbound,
    };
    // Set by the reading side when the peer broke the protocol; sent in our Close frame.
    let close_code = Arc::new(AtomicU16::new(0));
    // When the peer last sent anything: a pong answers every ping, so a live peer is heard
    // from at least once per interval.
    let heard = Arc::new(Mutex::new(Instant::now()));
    // Cancelled when the writer ends, which ends the reading side too.
    let writer_gone = CancellationToken::new();
    let writer = Writer {
        sink,
        frames: plain_frames,
        queue,
        ping_interval: daemon.config.ping_interval,
        close_code: close_code.clone(),
        restart: restart.clone(),
    };
    let writer = tokio::spawn(writer.run(
        heard.clone(),
        peer.clone(),
        writer_gone.clone().drop_guard(),
    ));
    let receipts = outbound.clone();
    let messages = stream
        .by_ref()
        .inspect(move |message| {
            *heard.lock().unwrap() = Instant::now();
            // The pong to a ping that carried the index of the last message written before it.
            if let Ok(Message::Pong(payload)) = message {
                if let Ok(index) = <[u8; 8]>::try_from(&payload[..]) {
                    receipts.acknowledge(u64::from_be_bytes(index));
                }
            }
        })
        .take_until(writer_gone.cancelled_owned())
        // No request is read once the daemon hands over (a session made now would be lost).
        .take_until(restart.cancelled());
    let frames = frames(messages, close_code);
    let context = format!("websocket JSON-RPC message from {kind} {peer}");
    server::serve(frames, outbound, daemon, who, context, AtEnd::Abort).await;
    let _ = writer.await;
    if restart.is_cancelled() {
        // The close handshake's end: what the peer sent meanwhile is read (and dropped) up to
        // its Close, so that it finds ours instead of a reset or a broken pipe.
        let drained = async { while let Some(Ok(_)) = stream.next().await {} };
        let _ = tokio::time::timeout(CLOSE_DRAIN, drained).await;
    }
}

/// The peer's JSON-RPC messages, up to its Close or a broken message, whose close code (too
/// big, or a protocol error) goes to `close_code` for our Close frame.
fn frames(
    messages: impl Stream<Item = Result<Message, axum::Error>>,
    close_code: Arc<AtomicU16>,
) -> impl Stream<Item = Frame> {
    messages
        .take_while(move |message| {
            if let Err(err) = message {
                // tungstenite reports an over-long message as a capacity error.
                let too_big = err.to_string().contains("Space limit exceeded");
                close_code.store(
                    if too_big {
                        MESSAGE_TOO_BIG
                    } else {
                        PROTOCOL_ERROR
                    },
                    Ordering::Relaxed,
                );
            }
            std::future::ready(matches!(message, Ok(m) if !matches!(m, Message::Close(_))))
        })
        .filter_map(|message| {
            std::future::ready(match message {
                Ok(Message::Text(text)) => Some(Frame::Message(text.into())),
                Ok(Message::Binary(bytes)) => Some(Frame::Message(bytes)),
                _ => None,
            })
        })
}
