//! One client connection: the handshake in order, then every request on its own task, so a
//! long-poll never delays the requests behind it, in one of two lanes of slots ([`Lanes`]).

use super::context::{ConnectionShared, RequestCtx};
use super::routes::ROUTER;
use super::Daemon;
use crate::rpc::envelope::{self, Incoming};
use crate::rpc::in_flight::{Claim, InFlightIds};
use crate::rpc::outbound::Outbound;
use crate::rpc::{decode, reply, RpcError};
use crate::session::{Attachment, Registry, RequestedPolicy, Session};
use bytes::Bytes;
use exec_server_protocol::rpc::method;
use exec_server_protocol::session::{InitializeParams, InitializeResult};
use futures::{Stream, StreamExt as _};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Largest batch accepted.
const MAX_BATCH: usize = 128;

/// One message as the transport delivered it.
pub(crate) enum Frame {
    Message(Bytes),
    /// A message over the size limit, already discarded by the transport.
    Oversized,
}

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

struct Connection {
    shared: Arc<ConnectionShared>,
    /// What a parse error names, e.g. `websocket JSON-RPC message from exec-server websocket
    /// 127.0.0.1:5000` (the reference's wording).
    parse_context: String,
    max_message_bytes: usize,
    session: Option<Arc<Session>>,
    initialized: bool,
    requests: JoinSet<()>,
    lanes: Lanes,
    in_flight: InFlightIds,
}

/// Request slots of one connection, upstream's two lanes: ordinary requests, and health checks
/// and cleanup (`environment/info`, `environment/status`, `process/signal`,
/// `process/terminate`, `fs/close`), each with `--max-requests-in-flight`, so long polls that
/// take every ordinary slot never hold up a status check or the terminate that ends them.
/// With one slot (codex's default, `--concurrent-requests 1`) everything runs in turn.
struct Lanes {
    ordinary: Arc<Semaphore>,
    control: Arc<Semaphore>,
}

impl Lanes {
    fn new(slots: usize) -> Self {
        let ordinary = Arc::new(Semaphore::new(slots));
        let control = if slots == 1 {
            ordinary.clone()
        } else {
            Arc::new(Semaphore::new(slots))
        };
        Self { ordinary, control }
    }

    fn of(&self, request_method: &str) -> Arc<Semaphore> {
        let control = [
            method::ENVIRONMENT_INFO,
            method::ENVIRONMENT_STATUS,
            method::PROCESS_SIGNAL,
            method::PROCESS_TERMINATE,
            method::FS_CLOSE,
        ]
        .contains(&request_method);
        Arc::clone(if control {
            &self.control
        } else {
            &self.ordinary
        })
    }
}

/// What becomes of requests still running when the client's messages end.
pub(crate) enum AtEnd {
    /// Abort them: on a WebSocket nobody is left to read the replies.
    Abort,
    /// Answer them first: on stdio the end of input leaves stdout open.
    Answer,
}

/// Whether the loop goes on after a message.
enum Flow {
    Continue,
    Close,
}

/// Serves one connection until its frames end or a protocol error closes it.
pub(crate) async fn serve(
    frames: impl Stream<Item = Frame>,
    outbound: Outbound,
    daemon: Arc<Daemon>,
    who: crate::audit::Identity,
    parse_context: String,
    at_end: AtEnd,
) {
    let _open = daemon.metrics.connection();
    let max_message_bytes = daemon.config.max_message_bytes;
    let max_in_flight = daemon.config.max_requests_in_flight;
    let shared = Arc::new(ConnectionShared {
        id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
        outbound,
        daemon,
        who,
        fs: Default::default(),
        http: Default::default(),
    });
    let mut connection = Connection {
        shared,
        parse_context,
        max_message_bytes,
        session: None,
        initialized: false,
        requests: JoinSet::new(),
        lanes: Lanes::new(max_in_flight),
        in_flight: InFlightIds::default(),
    };
    let mut frames = std::pin::pin!(frames);
    loop {
        tokio::select! {
            // Read ahead of the running requests by one lane's worth, so a control request
            // behind waiting ordinary ones is seen; past that the client's requests wait in
            // the socket.
            frame = frames.next(), if connection.requests.len() < 2 * max_in_flight => {
                let Some(frame) = frame else { break };
                if let Flow::Close = connection.handle_frame(frame).await {
                    break;
                }
            }
            Some(_) = connection.requests.join_next(), if !connection.requests.is_empty() => {}
        }
    }
    match at_end {
        AtEnd::Abort => connection.requests.abort_all(),
        AtEnd::Answer => while connection.requests.join_next().await.is_some() {},
    }
    if let Some(session) = &connection.session {
        connection
            .shared
            .daemon
            .sessions
            .detach(session, connection.shared.id);
    }
    // What the connection buffered (requests, replies) is freed now, not at a session expiry.
    drop(connection);
    crate::memory::release_soon();
}

impl Connection {
    async fn send(&self, value: Value) {
        let _ = self.shared.outbound.send_value(&value).await;
    }

    async fn handle_frame(&mut self, frame: Frame) -> Flow {
        let frame = match frame {
            Frame::Message(bytes) if bytes.len() <= self.max_message_bytes => bytes,
            _ => {
                let message = format!(
                    "JSON-RPC message exceeds the limit of {} bytes",
                    self.max_message_bytes
                );
                self.send(envelope::error_without_request(RpcError::invalid_request(
                    message,
                )))
                .await;
                return Flow::Continue;
            }
        };
        let value = match crate::rpc::decoder::parse_message(&frame) {
            Ok(value) => value,
            Err(err) => {
                let message = format!("failed to parse {}: {err}", self.parse_context);
                self.send(envelope::error_without_request(RpcError::invalid_request(
                    message,
                )))
                .await;
                return Flow::Continue;
            }
        };
        match value {
            Value::Array(batch) => {
                self.handle_batch(batch).await;
                Flow::Continue
            }
            single => self.handle_message(envelope::classify(single)).await,
        }
    }

    async fn handle_message(&mut self, message: Incoming) -> Flow {
        match message {
            Incoming::Request {
                id,
                method,
                params,
                strict,
            } => {
                if strict {
                    self.shared.outbound.set_strict();
                }
                if method == method::INITIALIZE {
                    let outcome = self.initialize(params).await;
                    if let Err(error) = &outcome {
                        self.shared.daemon.metrics.error(error.code);
                    }
                    self.send(envelope::reply(id, outcome, strict)).await;
                    return Flow::Continue;
                }
                let (ctx, claim) = match self.admit(&method, &id) {
                    Ok(admitted) => admitted,
                    Err((error, flow)) => {
                        self.send(envelope::reply(id, Err(error), strict)).await;
                        return flow;
                    }
                };
                let lane = self.lanes.of(&method);
                self.requests.spawn(async move {
                    // The lanes are never closed: the permit is always granted.
                    let _slot = lane.acquire_owned().await;
                    let outcome = ROUTER.dispatch(ctx.clone(), &method, params).await;
                    // Freed before the reply is queued: a client may reuse the id once it sees it.
                    drop(claim);
                    let outbound = &ctx.connection.outbound;
                    let message = reply::message(outbound, id, outcome, strict);
                    let _ = outbound
                        .send_within(message, ctx.call.take_reserved())
                        .await;
                    ctx.call.replied();
                });
                Flow::Continue
            }
            Incoming::Notification { method, .. } if method == method::INITIALIZED => {
                if self.session.is_none() {
                    let error = RpcError::invalid_request(
                        "received `initialized` notification before `initialize`",
                    );
                    self.send(envelope::error_without_request(error)).await;
                    return Flow::Close;
                }
                self.initialized = true;
                Flow::Continue
            }
            Incoming::Notification { method, .. } => {
                // JSON-RPC never answers a notification; closing over one would punish typos.
                tracing::debug!(method, "ignoring unknown notification");
                Flow::Continue
            }
            Incoming::Reply { id, reply } => {
                if !self.shared.outbound.resolve_reply(&id, reply) {
                    tracing::debug!(%id, "ignoring a reply no request of the daemon waits for");
                }
                Flow::Continue
            }
            Incoming::Invalid { id, error, strict } => {
                self.send(envelope::reply(id, Err(error), strict)).await;
                Flow::Continue
            }
        }
    }

    async fn initialize(&mut self, params: Option<Value>) -> Result<Value, RpcError> {
        if self.session.is_some() {
            return Err(RpcError::invalid_request(
                "initialize may only be sent once per connection",
            ));
        }
        let params: InitializeParams = decode(params)?;
        let binary_payloads = params.binary_payloads && self.shared.outbound.enable_binary();
        let attachment = Attachment {
            connection_id: self.shared.id,
            outbound: self.shared.outbound.clone(),
        };
        let daemon = &self.shared.daemon;
        let policy = RequestedPolicy::from_params(&params, &daemon.config)?;
        let (sessions, audit, who) = (&daemon.sessions, &daemon.audit, &self.shared.who);
        let details = || serde_json::json!({ "client": params.client_name });
        let session = match &params.resume_session_id {
            Some(id) => {
                audit.before(who, id, "session/resume", details).await?;
                sessions.resume(id, attachment, &policy)?
            }
            None => {
                let id = Registry::new_id();
                audit.before(who, &id, "session/create", details).await?;
                sessions.create(id, attachment, &policy)?
            }
        };
        tracing::info!(
            session = %crate::audit::log_digest(&session.id),
            connection = self.shared.id,
            peer = %who.peer,
            client = %params.client_name,
            "{}",
            if params.resume_session_id.is_some() { "session resumed" } else { "session created" }
        );
        let result = InitializeResult {
            session_id: session.id.clone(),
            environment_info: Some(session.environment_info.clone()),
            binary_payloads,
        };
        self.session = Some(session);
        Ok(serde_json::to_value(result).expect("wire types always serialize"))
    }

    /// Checks the handshake for a request of `method`; on failure also says whether to close.
    fn request_ctx(&self, method: &str) -> Result<Arc<RequestCtx>, (RpcError, Flow)> {
        let family = family(method);
        let Some(session) = &self.session else {
            let message = format!("client must call initialize before using {family} methods");
            return Err((RpcError::invalid_request(message), Flow::Continue));
        };
        if !self.initialized {
            let message = format!("client must send initialized before using {family} methods");
            return Err((RpcError::invalid_request(message), Flow::Continue));
        }
        session
            .ensure_attached(self.shared.id)
            .map_err(|error| (error.into(), Flow::Close))?;
        Ok(Arc::new(RequestCtx::new(
            self.shared.clone(),
            session.clone(),
        )))
    }

    /// [`Self::request_ctx`], and `id` is not already in flight.
    fn admit(
        &self,
        method: &str,
        id: &Value,
    ) -> Result<(Arc<RequestCtx>, Claim), (RpcError, Flow)> {
        let ctx = self.request_ctx(method)?;
        let claim = self
            .in_flight
            .claim(id)
            .map_err(|error| (error, Flow::Continue))?;
        Ok((ctx, claim))
    }

    async fn handle_batch(&mut self, batch: Vec<Value>) {
        if batch.is_empty() {
            let error = RpcError::invalid_request("JSON-RPC batch must not be empty");
            return self.send(envelope::error_without_request(error)).await;
        }
        if batch.len() > MAX_BATCH {
            let message = format!(
                "JSON-RPC batch contains {} requests; maximum is {MAX_BATCH}",
                batch.len()
            );
            return self
                .send(envelope::error_without_request(RpcError::invalid_request(
                    message,
                )))
                .await;
        }
        // Each reply comes with its request's context, whose after-reply hooks run once the
        // whole batch reply is queued, and its id's claim, freed just before that.
        type Reply = (Value, Option<(Arc<RequestCtx>, Claim)>);
        let mut replies: Vec<futures::future::BoxFuture<'static, Reply>> = Vec::new();
        for message in batch {
            let immediate = |value: Value| -> futures::future::BoxFuture<'static, Reply> {
                Box::pin(std::future::ready((value, None)))
            };
            match envelope::classify(message) {
                Incoming::Request { id, method, .. } if method == method::INITIALIZE => {
                    let error =
                        RpcError::invalid_request("initialize cannot be sent in a JSON-RPC batch");
                    replies.push(immediate(envelope::reply(id, Err(error), false)));
                }
                Incoming::Request {
                    id,
                    method,
                    params,
                    strict,
                } => match self.admit(&method, &id) {
                    Ok((ctx, claim)) => replies.push(Box::pin(async move {
                        let outcome = ROUTER.dispatch(ctx.clone(), &method, params).await;
                        // A reservation held until the whole batch is sent would make a second
                        // large reply in the batch wait for the first forever.
                        drop(ctx.call.take_reserved());
                        let outcome = outcome.map(reply::Success::into_value);
                        (envelope::reply(id, outcome, strict), Some((ctx, claim)))
                    })),
                    Err((error, _)) => {
                        replies.push(immediate(envelope::reply(id, Err(error), strict)))
                    }
                },
                Incoming::Notification { .. } | Incoming::Reply { .. } => {
                    let error = RpcError::invalid_request(
                        "notifications cannot be sent in a JSON-RPC batch",
                    );
                    replies.push(immediate(envelope::error_without_request(error)));
                }
                Incoming::Invalid { id, error, strict } => {
                    replies.push(immediate(envelope::reply(id, Err(error), strict)));
                }
            }
        }
        let outbound = self.shared.outbound.clone();
        // A batch takes one ordinary slot, whatever it holds.
        let lane = self.lanes.ordinary.clone();
        self.requests.spawn(async move {
            let _slot = lane.acquire_owned().await;
            let (replies, admitted): (Vec<Value>, Vec<_>) =
                futures::future::join_all(replies).await.into_iter().unzip();
            let (contexts, claims): (Vec<Arc<RequestCtx>>, Vec<Claim>) =
                admitted.into_iter().flatten().unzip();
            drop(claims);
            let _ = outbound.send_value(&Value::Array(replies)).await;
            contexts.iter().for_each(|ctx| ctx.call.replied());
        });
    }
}

/// The label a handshake error gives a method, as upstream's (`require_initialized_for`): a
/// fixed family per method, keyed by name; our own methods follow their prefix's family.
fn family(method: &str) -> &str {
    match method {
        "environment/info" => "environment info",
        "environment/status" => "environment status",
        "environmentConfig/read" => "environment config",
        "capabilityRoots/discoverV1" | "capabilities/discoverV2" => "capability discovery",
        _ => match method.split_once('/').map_or(method, |(prefix, _)| prefix) {
            "process" => "exec",
            "fs" => "filesystem",
            prefix => prefix,
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn families_are_upstreams_labels() {
        for (method, family) in [
            ("process/start", "exec"),
            ("process/list", "exec"),
            ("fs/walk", "filesystem"),
            ("http/request", "http"),
            ("environment/info", "environment info"),
            ("environment/status", "environment status"),
            ("environmentConfig/read", "environment config"),
            ("capabilityRoots/discoverV1", "capability discovery"),
            ("capabilities/discoverV2", "capability discovery"),
            ("session/x", "session"),
        ] {
            assert_eq!(super::family(method), family, "{method}");
        }
    }
}
