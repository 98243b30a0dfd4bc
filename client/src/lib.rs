//! A client for exec-server.
//!
//! [`Client::connect`] opens a session (`ws://`, `wss://` or `unix:///PATH`). When the connection drops, the client reconnects and
//! resumes the session by itself (retrying while the daemon still sees the old connection),
//! then catches every unfinished process up with `process/read {afterSeq}`, so each
//! [`ProcessEvent`] reaches the [`Process`] exactly once and in order. Writes keep their
//! `writeId` across retries, so a write whose reply was lost is not applied twice; starts are
//! sent `idempotent` and repeated, so a start whose reply was lost yields the one process. Output the
//! daemon could no longer replay is reported as [`ProcessEvent::Gap`], never skipped silently.
//!
//! ```no_run
//! # async fn demo() -> Result<(), exec_server_client::Error> {
//! use exec_server_client::{Client, ClientOptions, Command, ProcessEvent};
//! let client = Client::connect(ClientOptions::new("ws://127.0.0.1:8080")).await?;
//! let mut process = client.start(Command::new(["echo", "hi"]).cwd("/tmp")?).await?;
//! while let Some(event) = process.next_event().await {
//!     if let ProcessEvent::Output { data, .. } = event {
//!         print!("{}", String::from_utf8_lossy(&data));
//!     }
//! }
//! # Ok(()) }
//! ```

mod connection;
mod events;
pub mod fs;
pub mod http;
mod process;
mod stream;

pub use bytes::Bytes;
pub use events::ProcessEvent;
pub use exec_server_protocol as protocol;
pub use exec_server_protocol::methods::Retry;
pub use process::{path_uri, Collected, Command, Process, ProcessHandle};
pub use stream::{open as open_stream, Io};

use connection::{Answer, CallError, Connection};
use events::Router;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::binary::CHUNK_MEMBER;
use exec_server_protocol::environment::EnvironmentInfo;
use exec_server_protocol::methods::{self, Method};
use exec_server_protocol::process::ReadParams;
use exec_server_protocol::rpc::{code, method, ErrorObject};
use exec_server_protocol::session::{DisconnectPolicy, InitializeParams, InitializeResult};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long to keep trying to resume: inside the daemon's default 30 s session TTL.
pub const DEFAULT_RECONNECT_DEADLINE: Duration = Duration::from_secs(25);

/// The longest pause between resume attempts (the codex client's fixed pause).
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);

/// The first pause: the daemon usually notices the old socket's end within a millisecond, so
/// a -32010 right after a drop clears quickly; pauses double from here.
const FIRST_RECONNECT_PAUSE: Duration = Duration::from_millis(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Connect(String),
    /// The daemon answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(ErrorObject),
    /// The connection dropped while a call that is not safe to repeat was in flight: it may or
    /// may not have taken effect.
    #[error("the connection dropped before `{0}` was answered")]
    Disconnected(String),
    /// The session could not be resumed; nothing more can be done with this client.
    #[error("session lost: {0}")]
    SessionLost(String),
    #[error("unexpected reply to `{method}`: {message}")]
    Protocol { method: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// The JSON-RPC error code, when the daemon answered with one.
    pub fn code(&self) -> Option<i64> {
        match self {
            Self::Rpc(error) => Some(error.code),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` and as `X-Access-Token: <token>` (the header a
    /// router that drops `Authorization`, such as agent-sandbox's, passes on).
    pub token: Option<String>,
    /// More headers for the upgrade, e.g. `X-Sandbox-ID` for agent-sandbox's router.
    pub headers: Vec<(String, String)>,
    pub client_name: String,
    /// Take over this detached session instead of creating one.
    pub resume_session_id: Option<String>,
    /// How long to keep resuming after a drop; None disables reconnecting.
    pub reconnect_deadline: Option<Duration>,
    /// Ask for output and file blocks as binary WebSocket messages (no base64); on by default.
    pub binary_payloads: bool,
    /// For `wss://`: a PEM file of CA certificates trusted besides the Mozilla roots (e.g. the
    /// daemon's self-signed certificate).
    pub ca_file: Option<std::path::PathBuf>,
    /// What the daemon does with the session's processes when the connection drops (the
    /// daemon's default, `keep`, when None). With `kill`, the client cannot resume.
    pub on_disconnect: Option<DisconnectPolicy>,
    /// How long the session waits for a resume (the daemon's `--session-ttl` when None).
    pub session_ttl: Option<Duration>,
}

impl ClientOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token: None,
            headers: Vec::new(),
            client_name: "exec-server-client".into(),
            resume_session_id: None,
            reconnect_deadline: Some(DEFAULT_RECONNECT_DEADLINE),
            binary_payloads: true,
            ca_file: None,
            on_disconnect: None,
            session_ttl: None,
        }
    }

    pub fn ca_file(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.ca_file = path;
        self
    }

    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A session on one daemon. Cheap to clone; all clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session_id", &self.inner.session_id)
            .finish_non_exhaustive()
    }
}

enum State {
    Connected(Arc<Connection>),
    Reconnecting,
    Failed(String),
}

struct Inner {
    options: ClientOptions,
    session_id: String,
    environment_info: Option<EnvironmentInfo>,
    state: watch::Sender<State>,
    router: Arc<Router>,
    next_id: AtomicI64,
    epochs: AtomicU64,
    /// Counts completed recoveries (resume and catch-up of every process).
    recoveries: watch::Sender<u64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let State::Connected(connection) = &*self.state.borrow() {
            connection.kill();
        }
    }
}

impl Client {
    /// Connects, creates (or resumes) the session and completes the handshake.
    pub async fn connect(options: ClientOptions) -> Result<Self, Error> {
        let (holes, hole_ids) = mpsc::unbounded_channel();
        let router = Arc::new(Router::new(holes));
        let (connection, init) = match &options.resume_session_id {
            Some(id) => resume(&options, id, 1, &router).await?,
            None => {
                let connection = Connection::open(&options, 1, router.clone()).await?;
                let init = handshake(&connection, &options, None).await?;
                (connection, init)
            }
        };
        Ok(Self::serve(options, router, hole_ids, connection, init))
    }

    /// Drives a daemon in remote mode over `socket`, the WebSocket it dialed to this
    /// orchestrator's rendezvous (accepted there, server side): creates (or, with
    /// `resume_session_id`, resumes) the session and completes the handshake. It does not
    /// reconnect: after a drop the daemon dials the rendezvous again, and a new `Client` over
    /// that socket resumes the session.
    pub async fn over_dialed_socket<S>(
        socket: tokio_tungstenite::WebSocketStream<S>,
        mut options: ClientOptions,
    ) -> Result<Self, Error>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        options.reconnect_deadline = None;
        let (holes, hole_ids) = mpsc::unbounded_channel();
        let router = Arc::new(Router::new(holes));
        let connection = Connection::run(socket, 1, router.clone());
        let resume = options.resume_session_id.clone();
        let init = handshake(&connection, &options, resume.as_deref()).await?;
        Ok(Self::serve(options, router, hole_ids, connection, init))
    }

    /// The client of a connection whose handshake is done.
    fn serve(
        options: ClientOptions,
        router: Arc<Router>,
        hole_ids: mpsc::UnboundedReceiver<String>,
        connection: Arc<Connection>,
        init: InitializeResult,
    ) -> Self {
        let inner = Arc::new(Inner {
            session_id: init.session_id,
            environment_info: init.environment_info,
            options,
            state: watch::channel(State::Connected(connection.clone())).0,
            router,
            next_id: AtomicI64::new(1_000),
            epochs: AtomicU64::new(1),
            recoveries: watch::channel(0).0,
        });
        tokio::spawn(supervise(Arc::downgrade(&inner), connection));
        tokio::spawn(fill_holes(Arc::downgrade(&inner), hole_ids));
        Self { inner }
    }

    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// The daemon's environment: from the initialize reply, or asked for when it had none.
    pub async fn environment_info(&self) -> Result<EnvironmentInfo, Error> {
        match &self.inner.environment_info {
            Some(info) => Ok(info.clone()),
            None => self.send::<methods::EnvironmentInfo>(&()).await,
        }
    }

    /// Any method; repeated after a reconnect only if [`Retry::for_method`] says it is safe.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.request(method, &params, Retry::for_method(method))
            .await
    }

    /// A call of a method of the protocol's table, typed and repeated after a reconnect as the
    /// table says.
    pub async fn send<M: Method>(&self, params: &M::Params) -> Result<M::Result, Error> {
        self.request(M::NAME, params, M::RETRY).await
    }

    /// A typed call: params serialized, the result deserialized.
    pub async fn request<P: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        retry: Retry,
    ) -> Result<R, Error> {
        let answer = self.raw_request(method, params, retry).await?;
        let decoded = match answer.chunk {
            None => serde_json::from_str(answer.result.get()),
            // Whoever decodes generically sees the chunk where the text form has it.
            Some(chunk) => {
                serde_json::from_str::<serde_json::Map<String, Value>>(answer.result.get())
                    .and_then(|mut result| {
                        result.insert(CHUNK_MEMBER.into(), Base64Bytes::encode(&chunk).into());
                        serde_json::from_value(Value::Object(result))
                    })
            }
        };
        decoded.map_err(|err| protocol_error(method, err))
    }

    /// The result as the daemon sent it, its chunk apart when that came as a binary payload.
    pub(crate) async fn raw_request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        retry: Retry,
    ) -> Result<Answer, Error> {
        let params =
            serde_json::to_string(params).map_err(|err| Error::Invalid(err.to_string()))?;
        let mut after_epoch = 0;
        loop {
            let connection = self.inner.connection_after(after_epoch).await?;
            let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            let text = envelope(id, method, &params);
            match connection.request(id, text).await {
                Ok(result) => return Ok(result),
                Err(CallError::Rpc(error)) => return Err(Error::Rpc(error)),
                Err(CallError::Disconnected { sent }) => {
                    if sent && retry == Retry::Never {
                        return Err(Error::Disconnected(method.into()));
                    }
                    after_epoch = connection.epoch;
                }
            }
        }
    }

    /// Starts a process; its events are routed to the returned [`Process`].
    pub async fn start(&self, command: Command) -> Result<Process, Error> {
        process::start(self.clone(), command).await
    }

    /// Follows a process of this session that this client did not start (after resuming a
    /// session): its events after `after_seq` (0: all that the daemon retained), then live.
    pub fn attach(
        &self,
        process_id: &str,
        after_seq: u64,
        sandbox_type: protocol::process::SandboxType,
    ) -> Result<Process, Error> {
        process::attach(self.clone(), process_id, after_seq, sandbox_type)
    }

    /// Controls a process of this session by its id, without following its events.
    pub fn process_handle(&self, process_id: &str) -> ProcessHandle {
        process::handle(self.clone(), process_id)
    }

    /// Kills the socket without a close handshake, as a network failure would. The client
    /// then reconnects and resumes by itself (unless reconnecting is disabled).
    pub fn drop_connection(&self) {
        if let State::Connected(connection) = &*self.inner.state.borrow() {
            connection.kill();
        }
    }

    /// How many recoveries (resume plus catch-up) completed; `wait_for` a higher value to
    /// wait for the next one.
    pub fn recoveries(&self) -> watch::Receiver<u64> {
        self.inner.recoveries.subscribe()
    }

    /// Closes the connection cleanly. The session stays on the daemon until its TTL expires.
    pub async fn close(self) {
        let connection = match &*self.inner.state.borrow() {
            State::Connected(connection) => Some(connection.clone()),
            _ => None,
        };
        self.inner
            .state
            .send_replace(State::Failed("the client was closed".into()));
        if let Some(connection) = connection {
            connection.close_then_kill().await;
        }
    }

    fn router(&self) -> &Router {
        &self.inner.router
    }
}

impl Inner {
    /// Moves to `next` unless the client was closed meanwhile (checked and set as one step: a
    /// closed client stays closed). Returns whether it moved.
    fn advance(&self, next: State) -> bool {
        let mut next = Some(next);
        self.state.send_if_modified(|state| match next.take() {
            Some(next) if !matches!(state, State::Failed(_)) => {
                *state = next;
                true
            }
            _ => false,
        })
    }

    /// The live connection with an epoch above `after`, once there is one.
    async fn connection_after(&self, after: u64) -> Result<Arc<Connection>, Error> {
        let mut state = self.state.subscribe();
        loop {
            match &*state.borrow_and_update() {
                State::Connected(connection)
                    if connection.epoch > after && !connection.is_dead() =>
                {
                    return Ok(connection.clone())
                }
                State::Failed(message) => return Err(Error::SessionLost(message.clone())),
                _ => {}
            }
            if state.changed().await.is_err() {
                return Err(Error::SessionLost("the client was dropped".into()));
            }
        }
    }
}

pub(crate) fn protocol_error(method: &str, err: serde_json::Error) -> Error {
    Error::Protocol {
        method: method.into(),
        message: err.to_string(),
    }
}

fn envelope(id: i64, method: &str, params: &str) -> String {
    let method = serde_json::to_string(method).expect("strings serialize");
    format!(r#"{{"id":{id},"method":{method},"params":{params}}}"#)
}

async fn handshake(
    connection: &Connection,
    options: &ClientOptions,
    resume_session_id: Option<&str>,
) -> Result<InitializeResult, Error> {
    let params = InitializeParams {
        client_name: options.client_name.clone(),
        resume_session_id: resume_session_id.map(str::to_owned),
        binary_payloads: options.binary_payloads,
        on_disconnect: options.on_disconnect,
        session_ttl_ms: options
            .session_ttl
            .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
    };
    let params = serde_json::to_string(&params).expect("wire types serialize");
    let result = match connection
        .request(0, envelope(0, method::INITIALIZE, &params))
        .await
    {
        Ok(result) => result,
        Err(CallError::Rpc(error)) => return Err(Error::Rpc(error)),
        Err(CallError::Disconnected { .. }) => {
            return Err(Error::Connect(
                "the connection dropped during initialize".into(),
            ))
        }
    };
    let init: InitializeResult = serde_json::from_str(result.result.get())
        .map_err(|err| protocol_error(method::INITIALIZE, err))?;
    connection.notify(format!(
        r#"{{"method":"{}","params":{{}}}}"#,
        method::INITIALIZED
    ));
    Ok(init)
}

/// Opens a connection and resumes `session_id`, retrying transport errors and "still attached"
/// (-32010), pausing 2 ms and doubling up to [`RECONNECT_INTERVAL`], until the deadline.
async fn resume(
    options: &ClientOptions,
    session_id: &str,
    epoch: u64,
    router: &Arc<Router>,
) -> Result<(Arc<Connection>, InitializeResult), Error> {
    let deadline =
        tokio::time::Instant::now() + options.reconnect_deadline.unwrap_or(Duration::ZERO);
    let mut pause = FIRST_RECONNECT_PAUSE;
    loop {
        let attempt = async {
            let connection = Connection::open(options, epoch, router.clone()).await?;
            match handshake(&connection, options, Some(session_id)).await {
                Ok(init) => Ok((connection, init)),
                Err(err) => {
                    connection.kill();
                    Err(err)
                }
            }
        };
        let error = match attempt.await {
            Ok(done) => return Ok(done),
            Err(err) => err,
        };
        let retryable = match &error {
            Error::Rpc(error) => error.code == code::SESSION_ALREADY_ATTACHED,
            Error::Connect(_) => true,
            _ => false,
        };
        if !retryable || tokio::time::Instant::now() + pause > deadline {
            return Err(error);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT_INTERVAL);
    }
}

/// Waits for each connection to die, then resumes the session on a new one and catches up
/// every unfinished process. Gives up (failing every process) when resuming is impossible.
async fn supervise(inner: Weak<Inner>, mut connection: Arc<Connection>) {
    loop {
        connection.dead().await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if !strong.advance(State::Reconnecting) {
            return;
        }
        let outcome = match strong.options.reconnect_deadline {
            None => Err(Error::Connect("the connection dropped".into())),
            Some(_) => {
                let epoch = strong.epochs.fetch_add(1, Ordering::Relaxed) + 1;
                let (options, session_id, router) = (
                    strong.options.clone(),
                    strong.session_id.clone(),
                    strong.router.clone(),
                );
                // Holding no strong reference while waiting lets a dropped client go away.
                drop(strong);
                resume(&options, &session_id, epoch, &router).await
            }
        };
        let Some(strong) = inner.upgrade() else {
            return;
        };
        match outcome {
            Ok((next, _)) => {
                // Closed while resuming: the new connection is closed too, or it would keep
                // the session attached (and its processes alive) for as long as this process
                // lives.
                if !strong.advance(State::Connected(next.clone())) {
                    next.close_then_kill().await;
                    return;
                }
                connection = next;
                let client = Client { inner: strong };
                tokio::spawn(async move {
                    let ids = client.router().unfinished();
                    futures::future::join_all(ids.iter().map(|id| catch_up(&client, id))).await;
                    client.inner.recoveries.send_modify(|n| *n += 1);
                });
            }
            Err(err) => {
                let message = format!("cannot resume session {}: {err}", strong.session_id);
                strong.state.send_replace(State::Failed(message.clone()));
                strong.router.fail_all(&message);
                return;
            }
        }
    }
}

/// Reads what `id` missed, until no events wait behind a hole.
pub(crate) async fn catch_up(client: &Client, id: &str) {
    loop {
        let Some(after_seq) = client.router().begin_catch_up(id) else {
            return;
        };
        let params = ReadParams {
            process_id: id.to_owned(),
            after_seq: Some(after_seq),
            max_bytes: None,
            wait_ms: Some(0),
        };
        match client.send::<methods::ProcessRead>(&params).await {
            Ok(read) => {
                client.router().apply_read(id, read);
            }
            Err(Error::Rpc(error)) => {
                // The daemon forgot it (e.g. retention passed while we were away).
                client.router().fail(
                    id,
                    &format!("cannot catch up on process {id}: {}", error.message),
                );
                return;
            }
            // The session is gone: the supervisor fails every process.
            Err(_) => return,
        }
        if !client.router().end_catch_up(id) {
            return;
        }
    }
}

/// Catches up processes whose pushed events arrived with a hole outside a recovery.
async fn fill_holes(inner: Weak<Inner>, mut ids: mpsc::UnboundedReceiver<String>) {
    while let Some(id) = ids.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let client = Client { inner };
        tokio::spawn(async move { catch_up(&client, &id).await });
    }
}
