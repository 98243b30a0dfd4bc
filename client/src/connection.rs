//! One WebSocket connection: a writer task, a reader task that routes replies to their callers
//! and notifications to the [`Router`](crate::events::Router), and a way to kill it abruptly.

use crate::events::{Notification, Router};
use crate::Error;
use bytes::Bytes;
use exec_server_protocol::binary;
use exec_server_protocol::rpc::ErrorObject;
use futures::{SinkExt as _, StreamExt as _};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// What a request's caller gets back: the result, or the server's error object.
pub type Reply = Result<Answer, ErrorObject>;

/// A result as the daemon sent it.
#[derive(Debug)]
pub struct Answer {
    pub result: Box<RawValue>,
    /// The result's `chunk` member, when it came as a binary payload (and is absent from
    /// `result`): a slice of the message, not a copy.
    pub chunk: Option<Bytes>,
}

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

impl Drop for Connection {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().unwrap().iter() {
            task.abort();
        }
    }
}

impl Connection {
    pub async fn open(
        options: &crate::ClientOptions,
        epoch: u64,
        router: Arc<Router>,
    ) -> Result<Arc<Self>, Error> {
        let (url, token) = (options.url.as_str(), options.token.as_deref());
        let (stream, uri) = crate::stream::open(url, options.ca_file.as_deref()).await?;
        let mut request = uri
            .into_client_request()
            .map_err(|err| Error::Connect(format!("invalid URL `{url}`: {err}")))?;
        let invalid = |what: &str| Error::Connect(format!("{what} is not a valid header value"));
        if let Some(token) = token {
            let bearer = format!("Bearer {token}").parse();
            let headers = request.headers_mut();
            headers.insert("authorization", bearer.map_err(|_| invalid("the token"))?);
            let plain = token.parse().map_err(|_| invalid("the token"))?;
            headers.insert("x-access-token", plain);
        }
        for (name, value) in &options.headers {
            let name =
                tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| Error::Connect(format!("`{name}` is not a valid header name")))?;
            let value = value.parse().map_err(|_| invalid("a header"))?;
            request.headers_mut().insert(name, value);
        }
        // The daemon bounds what it sends; replies such as fs/readFile may be large.
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (socket, _) =
            tokio_tungstenite::client_async_with_config(request, stream, Some(config))
                .await
                .map_err(|err| Error::Connect(format!("cannot connect to {url}: {err}")))?;
        Ok(Self::run(socket, epoch, router))
    }

    /// Starts the connection's writer and reader over an open WebSocket.
    pub(crate) fn run<S>(
        socket: tokio_tungstenite::WebSocketStream<S>,
        epoch: u64,
        router: Arc<Router>,
    ) -> Arc<Self>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut queue) = mpsc::unbounded_channel::<Message>();
        let connection = Arc::new(Self {
            epoch,
            outgoing,
            pending: Mutex::new(Some(HashMap::new())),
            tasks: Mutex::new(Vec::new()),
            dead: watch::channel(false).0,
        });
        // The tasks hold the connection weakly: one nobody holds any more is dropped, which
        // ends its tasks and closes the socket (else a connection abandoned mid-resume stayed
        // open, and its session attached, for as long as this process lived).
        let writer = {
            let connection = Arc::downgrade(&connection);
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
                if let Some(connection) = connection.upgrade() {
                    connection.kill();
                }
            })
        };
        let reader = {
            let connection = Arc::downgrade(&connection);
            tokio::spawn(async move {
                while let Some(Ok(message)) = stream.next().await {
                    let Some(connection) = connection.upgrade() else {
                        return;
                    };
                    match message {
                        Message::Text(text) => connection.route(text.as_str(), None, &router),
                        Message::Binary(bytes) => {
                            let (header, chunk) = match binary::split(&bytes) {
                                Some((header, chunk)) => (header, Some(bytes.slice_ref(chunk))),
                                None => (&bytes[..], None),
                            };
                            match std::str::from_utf8(header) {
                                Ok(text) => connection.route(text, chunk, &router),
                                Err(_) => break,
                            }
                        }
                        Message::Close(_) => break,
                        _ => {}
                    }
                }
                if let Some(connection) = connection.upgrade() {
                    connection.kill();
                }
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
        connection
    }

    /// Routes one message; `chunk` is the binary payload that stands for its `chunk` member.
    fn route(&self, text: &str, chunk: Option<Bytes>, router: &Router) {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let Ok(message) = IncomingSeed { chunk }.deserialize(&mut deserializer) else {
            // Not for us to fix: a daemon speaking a different protocol, or a batch reply.
            return;
        };
        let reply = match message {
            Incoming::Notification(notification) => return router.notification(notification),
            Incoming::Other => return,
            Incoming::Reply { id, reply } => (id, reply),
        };
        let (id, reply) = reply;
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
    pub async fn request(&self, id: i64, text: String) -> Result<Answer, CallError> {
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

    /// Closes cleanly, and kills what has not ended a second later.
    pub async fn close_then_kill(&self) {
        self.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.dead()).await;
        self.kill();
    }

    pub fn is_dead(&self) -> bool {
        *self.dead.borrow()
    }

    pub async fn dead(&self) {
        let mut dead = self.dead.subscribe();
        let _ = dead.wait_for(|dead| *dead).await;
    }
}

/// One message from the daemon, decoded in a single pass: when `method` precedes `params` (as
/// daemons write it), a process notification's params go straight into their typed form
/// instead of being scanned once as raw JSON and then again. Output chunks are most of the
/// traffic, so this halves the JSON work of streaming.
enum Incoming {
    Notification(Notification),
    Reply { id: i64, reply: Reply },
    Other,
}

/// Decodes a message together with the binary payload that stands for its `chunk`, if any.
struct IncomingSeed {
    chunk: Option<Bytes>,
}

impl<'de> DeserializeSeed<'de> for IncomingSeed {
    type Value = Incoming;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Incoming, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for IncomingSeed {
    type Value = Incoming;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Incoming, A::Error> {
        let mut method: Option<String> = None;
        let mut typed: Option<Notification> = None;
        let mut raw_params: Option<Box<RawValue>> = None;
        let mut id: Option<Value> = None;
        let mut result: Option<Box<RawValue>> = None;
        let mut error: Option<ErrorObject> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "method" => method = Some(map.next_value()?),
                "params" => match method.as_deref().and_then(Notification::kind) {
                    Some(kind) => typed = Some(kind.decode_from(&mut map, self.chunk.clone())?),
                    None => raw_params = Some(map.next_value()?),
                },
                "id" => id = Some(map.next_value()?),
                "result" => result = Some(map.next_value()?),
                "error" => error = Some(map.next_value()?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        if let Some(method) = method {
            let notification = typed.or_else(|| {
                let kind = Notification::kind(&method)?;
                kind.decode(raw_params.as_deref()?.get(), self.chunk).ok()
            });
            return Ok(notification.map_or(Incoming::Other, Incoming::Notification));
        }
        let Some(id) = id.as_ref().and_then(Value::as_i64) else {
            return Ok(Incoming::Other);
        };
        let reply = match (result, error) {
            (Some(result), _) => Ok(Answer {
                result,
                chunk: self.chunk,
            }),
            (None, Some(error)) => Err(error),
            (None, None) => Err(ErrorObject {
                code: exec_server_protocol::rpc::code::INTERNAL_ERROR,
                message: "reply has neither result nor error".into(),
                data: None,
            }),
        };
        Ok(Incoming::Reply { id, reply })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(text: &str, chunk: Option<&'static [u8]>) -> Incoming {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        IncomingSeed {
            chunk: chunk.map(Bytes::from_static),
        }
        .deserialize(&mut deserializer)
        .unwrap()
    }

    fn parse(text: &str) -> Incoming {
        parse_with(text, None)
    }

    #[test]
    fn binary_payloads_stand_for_the_chunk() {
        for output in [
            r#"{"method":"process/output","params":{"processId":"p","seq":3,"stream":"stdout"}}"#,
            r#"{"params":{"processId":"p","seq":3,"stream":"stdout"},"method":"process/output"}"#,
        ] {
            let Incoming::Notification(Notification::Output(n)) =
                parse_with(output, Some(b"\0\xff"))
            else {
                panic!("not an output notification");
            };
            assert_eq!((n.seq, &n.data[..]), (3, &b"\0\xff"[..]));
        }
        let Incoming::Reply {
            id: 4,
            reply: Ok(answer),
        } = parse_with(r#"{"id":4,"result":{"eof":true}}"#, Some(b"xy"))
        else {
            panic!("not a reply");
        };
        assert_eq!(
            (answer.result.get(), answer.chunk),
            (r#"{"eof":true}"#, Some(Bytes::from_static(b"xy")))
        );
    }

    #[test]
    fn messages_decode_in_any_member_order() {
        let output = r#"{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGk="}}"#;
        let Incoming::Notification(Notification::Output(n)) = parse(output) else {
            panic!("not an output notification");
        };
        assert_eq!(
            (n.process_id.as_str(), n.seq, &n.data[..]),
            ("p", 1, &b"hi"[..])
        );
        let reordered =
            r#"{"params":{"processId":"p","seq":2},"jsonrpc":"2.0","method":"process/closed"}"#;
        assert!(matches!(
            parse(reordered),
            Incoming::Notification(Notification::Closed(n)) if n.seq == 2
        ));
        assert!(matches!(
            parse(r#"{"method":"http/request/bodyDelta","params":{}}"#),
            Incoming::Other
        ));
        let Incoming::Reply {
            id: 7,
            reply: Ok(result),
        } = parse(r#"{"id":7,"result":{"a":1}}"#)
        else {
            panic!("not a reply");
        };
        assert_eq!((result.result.get(), result.chunk), (r#"{"a":1}"#, None));
        let error = r#"{"error":{"code":-32600,"message":"no"},"id":8}"#;
        assert!(matches!(
            parse(error),
            Incoming::Reply { id: 8, reply: Err(e) } if e.code == -32600
        ));
        assert!(matches!(
            parse(r#"{"id":-1,"error":{"code":1,"message":"x"}}"#),
            Incoming::Reply { .. }
        ));
    }
}
