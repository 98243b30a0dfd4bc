//! One WebSocket connection: a writer task, a reader task that routes replies to their callers
//! and notifications to the [`Router`](crate::events::Router), and a way to kill it abruptly.

use crate::events::Router;
use crate::Error;
use exec_server_protocol::rpc::ErrorObject;
use futures::{SinkExt as _, StreamExt as _};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// What a request's caller gets back: the raw result, or the server's error object.
pub type Reply = Result<Box<RawValue>, ErrorObject>;

/// How a request on one connection can fail.
#[derive(Debug)]
pub enum CallError {
    /// The server answered with an error.
    Rpc(ErrorObject),
    /// The connection ended; `sent` tells whether the request may have reached the server.
    Disconnected { sent: bool },
}

pub struct Connection {
    /// Counts connections of one client, so a retry can wait for a newer one.
    pub epoch: u64,
    outgoing: mpsc::UnboundedSender<Message>,
    /// None once the connection is dead: nothing can wait on it any more.
    pending: Mutex<Option<HashMap<i64, oneshot::Sender<Reply>>>>,
    tasks: Mutex<Vec<AbortHandle>>,
    dead: watch::Sender<bool>,
}

impl Connection {
    pub async fn open(
        url: &str,
        token: Option<&str>,
        epoch: u64,
        router: Arc<Router>,
    ) -> Result<Arc<Self>, Error> {
        let mut request = url
            .into_client_request()
            .map_err(|err| Error::Connect(format!("invalid URL `{url}`: {err}")))?;
        if let Some(token) = token {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|_| Error::Connect("the token is not a valid header value".into()))?;
            request.headers_mut().insert("authorization", value);
        }
        // The daemon bounds what it sends; replies such as fs/readFile may be large.
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
            .await
            .map_err(|err| Error::Connect(format!("cannot connect to {url}: {err}")))?;
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut queue) = mpsc::unbounded_channel::<Message>();
        let connection = Arc::new(Self {
            epoch,
            outgoing,
            pending: Mutex::new(Some(HashMap::new())),
            tasks: Mutex::new(Vec::new()),
            dead: watch::channel(false).0,
        });
        let writer = {
            let connection = connection.clone();
            tokio::spawn(async move {
                while let Some(message) = queue.recv().await {
                    // Coalesce whatever is queued into one flush.
                    let mut result = sink.feed(message).await;
                    while let (Ok(()), Ok(next)) = (&result, queue.try_recv()) {
                        result = sink.feed(next).await;
                    }
                    if result.is_err() || sink.flush().await.is_err() {
                        break;
                    }
                }
                connection.kill();
            })
        };
        let reader = {
            let connection = connection.clone();
            tokio::spawn(async move {
                while let Some(Ok(message)) = stream.next().await {
                    match message {
                        Message::Text(text) => connection.route(text.as_str(), &router),
                        Message::Binary(bytes) => match std::str::from_utf8(&bytes) {
                            Ok(text) => connection.route(text, &router),
                            Err(_) => break,
                        },
                        Message::Close(_) => break,
                        _ => {}
                    }
                }
                connection.kill();
            })
        };
        connection
            .tasks
            .lock()
            .unwrap()
            .extend([writer.abort_handle(), reader.abort_handle()]);
        if connection.is_dead() {
            // A task may have died before its abort handle was stored.
            connection.kill();
        }
        Ok(connection)
    }

    fn route(&self, text: &str, router: &Router) {
        #[derive(Deserialize)]
        struct Envelope<'a> {
            #[serde(default)]
            id: Option<i64>,
            #[serde(default, borrow)]
            method: Option<std::borrow::Cow<'a, str>>,
            #[serde(default, borrow)]
            params: Option<&'a RawValue>,
            #[serde(default)]
            result: Option<Box<RawValue>>,
            #[serde(default)]
            error: Option<ErrorObject>,
        }
        let Ok(envelope) = serde_json::from_str::<Envelope>(text) else {
            // Not for us to fix: a daemon speaking a different protocol, or a batch reply.
            return;
        };
        if let Some(method) = envelope.method {
            router.notification(&method, envelope.params.map(RawValue::get));
            return;
        }
        let (Some(id), reply) = (envelope.id, envelope.result.ok_or(envelope.error)) else {
            return;
        };
        let reply = reply.map_err(|error| {
            error.unwrap_or_else(|| ErrorObject {
                code: exec_server_protocol::rpc::code::INTERNAL_ERROR,
                message: "reply has neither result nor error".into(),
                data: None,
            })
        });
        let waiter = self
            .pending
            .lock()
            .unwrap()
            .as_mut()
            .and_then(|pending| pending.remove(&id));
        if let Some(waiter) = waiter {
            let _ = waiter.send(reply);
        }
    }

    /// Sends a request whose envelope is `text` (with id `id`) and waits for its reply.
    pub async fn request(&self, id: i64, text: String) -> Result<Box<RawValue>, CallError> {
        let (sender, receiver) = oneshot::channel();
        match self.pending.lock().unwrap().as_mut() {
            Some(pending) => pending.insert(id, sender),
            None => return Err(CallError::Disconnected { sent: false }),
        };
        if self.outgoing.send(Message::text(text)).is_err() {
            return Err(CallError::Disconnected { sent: false });
        }
        match receiver.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(CallError::Rpc(error)),
            Err(_) => Err(CallError::Disconnected { sent: true }),
        }
    }

    pub fn notify(&self, text: String) -> bool {
        self.outgoing.send(Message::text(text)).is_ok()
    }

    /// Drops the socket at once, without a close handshake, and fails every waiting request.
    pub fn kill(&self) {
        for task in self.tasks.lock().unwrap().iter() {
            task.abort();
        }
        // Dropping the senders wakes every waiter with "disconnected".
        self.pending.lock().unwrap().take();
        self.dead.send_replace(true);
    }

    /// Sends a close frame after what is queued; the reader then ends the connection.
    pub fn close(&self) {
        let _ = self.outgoing.send(Message::Close(None));
    }

    pub fn is_dead(&self) -> bool {
        *self.dead.borrow()
    }

    pub async fn dead(&self) {
        let mut dead = self.dead.subscribe();
        let _ = dead.wait_for(|dead| *dead).await;
    }
}
