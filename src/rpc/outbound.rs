//! The sending half of a connection: any task may push a reply or notification at any time.
//!
//! Every message queued gets the next index; the transport acknowledges indexes once the
//! client proved it received them (a WebSocket's pong to a ping sent after them, a write on
//! stdio), so a process knows which of its notifications arrived (`process::delivery`).

use super::payload::Payload;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::binary;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};

/// What a queued message costs beyond its bytes, so that empty messages count too.
const MESSAGE_OVERHEAD: usize = 64;

/// One message for the transport to send as it is.
#[derive(Debug)]
pub(crate) enum Message {
    Text(String),
    /// A binary-payload message (header, NUL, raw chunk); only on transports that can.
    Binary(bytes::Bytes),
    /// A binary-payload message whose chunk the transport sends from its file; only on
    /// transports that said they can ([`Outbound::sending_files`]).
    File(FileChunk),
}

impl Message {
    /// The bytes of the message as sent: a WebSocket frame's payload length.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            Self::Binary(bytes) => bytes.len(),
            Self::File(chunk) => chunk.header.len() + 1 + chunk.len as usize,
        }
    }
}

/// A binary-payload message's header, then `len` bytes of `file` at `offset`, which `_held`
/// keeps there (from being freed) until the message is written or dropped.
pub(crate) struct FileChunk {
    pub header: String,
    pub file: Arc<std::fs::File>,
    pub offset: u64,
    pub len: u64,
    pub _held: Box<dyn std::any::Any + Send + Sync>,
}

impl FileChunk {
    /// The whole message in memory, for a writer that cannot send from the file.
    pub(crate) fn load(&self) -> bytes::Bytes {
        let mut payload = Payload::with_capacity(self.len as usize);
        let read = crate::os::pread::append_at(
            &self.file,
            self.offset,
            self.len as usize,
            payload.buffer(),
        );
        if !matches!(read, Ok(len) if len as u64 == self.len) {
            tracing::warn!("cannot read retained output back: {read:?}");
        }
        payload.behind(&self.header)
    }
}

impl std::fmt::Debug for FileChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileChunk")
            .field("header", &self.header)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Bytes of a connection's outbound budget held by a message until the transport wrote it, or
/// by a request for the reply it is building.
#[derive(Debug, Default)]
pub(crate) struct Budget(Option<OwnedSemaphorePermit>);

impl Budget {
    fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

/// A queued message, its budget and its index.
type Queued = (Message, Budget, u64);

/// The receiving half, read by the transport's writer.
pub(crate) struct Queue {
    rx: mpsc::UnboundedReceiver<Queued>,
    /// The budget of the message handed out last: the writer asks for the next message only
    /// after writing that one, so its bytes count until they left the daemon.
    sending: Budget,
    /// The index of the message handed out last (0: none yet).
    sent: u64,
    receipts: Arc<Receipts>,
}

impl Queue {
    pub(crate) async fn recv(&mut self) -> Option<Message> {
        self.sending = Budget::default();
        let (message, budget, index) = self.rx.recv().await?;
        self.sending = budget;
        self.sent = index;
        Some(message)
    }

    /// The index of the last message handed out: a ping sent after it was written proves, with
    /// its pong, that the client received every message up to it.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// The client has every message handed out so far (stdio: written is received).
    pub(crate) fn acknowledge_sent(&self) {
        self.receipts.acknowledge(self.sent);
    }

    /// What says when a process asks for proof of receipt (see [`Outbound::want_receipt`]).
    pub(crate) fn receipt_requests(&self) -> ReceiptRequests {
        ReceiptRequests(self.receipts.clone())
    }

    /// Whether a ping should follow now, the last one having carried `pinged`: a process
    /// wants proof of receipt of messages up to an index that has now been written.
    pub(crate) fn receipt_due(&self, pinged: u64) -> bool {
        let through = self.receipts.wanted_through.load(Ordering::Acquire);
        through > pinged && self.sent >= through
    }
}

/// Requests for proof of receipt, for the transport's writer.
pub(crate) struct ReceiptRequests(Arc<Receipts>);

impl ReceiptRequests {
    /// Resolves once a process asked for proof of receipt (at once if it did meanwhile).
    pub(crate) async fn wanted(&self) {
        self.0.wanted.notified().await
    }
}

/// The connection's proof of receipt: which message indexes the client has.
#[derive(Debug)]
struct Receipts {
    /// The index of the last message queued; locked while queuing, so that indexes reach the
    /// queue in order.
    queued: Mutex<u64>,
    /// The highest index the client proved it received.
    acknowledged: watch::Sender<u64>,
    /// The index of the last message queued when a process last asked for proof of receipt:
    /// the transport pings once it has written that far, so the pong covers every message
    /// the process sent before asking.
    wanted_through: AtomicU64,
    /// A process asked for proof of receipt: the transport should ask the client for it.
    wanted: Notify,
}

impl Receipts {
    fn acknowledge(&self, index: u64) {
        // A peer's pong cannot acknowledge what was never queued.
        let index = index.min(*self.queued.lock().unwrap());
        self.acknowledged.send_if_modified(|current| {
            let newer = index > *current;
            *current = (*current).max(index);
            newer
        });
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Outbound {
    /// Unbounded in count: `budget` bounds the bytes, which is what costs memory.
    tx: mpsc::UnboundedSender<Queued>,
    receipts: Arc<Receipts>,
    budget: Arc<Semaphore>,
    budget_bytes: usize,
    /// Whether the client speaks strict JSON-RPC 2.0, so notifications carry `"jsonrpc"` too.
    strict: Arc<AtomicBool>,
    /// Whether the transport can carry binary messages (WebSocket, not stdio).
    binary_capable: bool,
    /// Whether the client asked for binary payloads.
    binary: Arc<AtomicBool>,
    /// Whether the transport sends [`Message::File`] from the file itself.
    files: bool,
    /// The daemon's requests to the client awaiting its replies.
    pending: Arc<super::asking::Pending>,
}

#[derive(Debug)]
pub(crate) struct Closed;

impl Outbound {
    /// A connection's queue, whose messages may hold `budget_bytes` at most (a larger message
    /// waits until the queue is empty).
    pub(crate) fn new(binary_capable: bool, budget_bytes: usize) -> (Self, Queue) {
        let (tx, rx) = mpsc::unbounded_channel();
        let receipts = Arc::new(Receipts {
            queued: Mutex::new(0),
            acknowledged: watch::channel(0).0,
            wanted_through: AtomicU64::new(0),
            wanted: Notify::new(),
        });
        (
            Self {
                tx,
                receipts: receipts.clone(),
                budget: Arc::new(Semaphore::new(budget_bytes)),
                budget_bytes,
                strict: Arc::new(AtomicBool::new(false)),
                binary_capable,
                binary: Arc::new(AtomicBool::new(false)),
                files: false,
                pending: Arc::default(),
            },
            Queue {
                rx,
                sending: Budget::default(),
                sent: 0,
                receipts,
            },
        )
    }

    /// Nothing is queued or being written: the transport took every message and wrote it.
    pub(crate) fn is_flushed(&self) -> bool {
        self.budget.available_permits() == self.budget_bytes
    }

    /// Waits until `bytes` of the budget are free and holds them (all of it for more).
    pub(crate) async fn reserve(&self, bytes: usize) -> Budget {
        let bytes = bytes.clamp(1, self.budget_bytes);
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(u32::try_from(bytes).expect("the budget fits in u32"))
            .await
            .expect("the budget semaphore is never closed");
        Budget(Some(permit))
    }

    /// The transport sends binary messages' chunks from their files (see [`Message::File`]).
    pub(crate) fn sending_files(self) -> Self {
        Self {
            files: self.binary_capable,
            ..self
        }
    }

    /// Whether a chunk in a file should go as [`Message::File`]: binary payloads, and a
    /// transport that sends from files.
    pub(crate) fn sends_files(&self) -> bool {
        self.files && self.binary.load(Ordering::Relaxed)
    }

    pub(crate) fn set_strict(&self) {
        self.strict.store(true, Ordering::Relaxed);
    }

    /// Switches to binary payloads where the transport allows; returns whether it did.
    pub(crate) fn enable_binary(&self) -> bool {
        self.binary.store(self.binary_capable, Ordering::Relaxed);
        self.binary_capable
    }

    /// Sends the client a request and waits for its reply (see [`super::asking`]); Closed when
    /// the connection ended or too many requests wait already. Dropping the future gives up.
    pub(crate) async fn request<P: Serialize>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<super::asking::Reply, Closed> {
        let mut waiting = self.pending.register().ok_or(Closed)?;
        let mut text = self.notification_text(method, params);
        // A notification's text with the id in front: `{"id":N,...`.
        text.insert_str(1, &format!(r#""id":{},"#, waiting.id));
        self.send(text).await?;
        (&mut waiting.reply).await.map_err(|_| Closed)
    }

    /// The client's reply to one of the daemon's requests; false when none waits for it.
    pub(crate) fn resolve_reply(
        &self,
        id: &serde_json::Value,
        reply: super::asking::Reply,
    ) -> bool {
        self.pending.resolve(id, reply)
    }

    pub(crate) async fn send(&self, text: String) -> Result<(), Closed> {
        self.send_message(Message::Text(text)).await.map(drop)
    }

    /// Queues `message`; returns its index (see [`Outbound::acknowledged`]).
    pub(crate) async fn send_message(&self, message: Message) -> Result<u64, Closed> {
        self.send_within(message, Budget::default()).await
    }

    /// Queues `message` within the budget `reserved` for it, or waits for its cost; returns its
    /// index.
    pub(crate) async fn send_within(
        &self,
        message: Message,
        mut reserved: Budget,
    ) -> Result<u64, Closed> {
        let cost = (message.len() + MESSAGE_OVERHEAD).min(self.budget_bytes);
        if reserved.bytes() < cost {
            if self.tx.is_closed() {
                return Err(Closed);
            }
            // Released before waiting: nobody waits while holding budget, so no deadlock.
            drop(std::mem::take(&mut reserved));
            reserved = self.reserve(cost).await;
        }
        let mut queued = self.receipts.queued.lock().unwrap();
        let index = *queued + 1;
        self.tx
            .send((message, reserved, index))
            .map_err(|_| Closed)?;
        *queued = index;
        Ok(index)
    }

    /// The highest index of a message the client proved it received.
    pub(crate) fn acknowledged(&self) -> watch::Receiver<u64> {
        self.receipts.acknowledged.subscribe()
    }

    /// The client proved it received every message up to `index` (a WebSocket's pong).
    pub(crate) fn acknowledge(&self, index: u64) {
        self.receipts.acknowledge(index);
    }

    /// Asks the transport to get proof of receipt of everything queued so far, soon.
    pub(crate) fn want_receipt(&self) {
        let queued = *self.receipts.queued.lock().unwrap();
        self.receipts
            .wanted_through
            .fetch_max(queued, Ordering::AcqRel);
        self.receipts.wanted.notify_one();
    }

    pub(crate) async fn send_value(&self, value: &serde_json::Value) -> Result<(), Closed> {
        self.send(value.to_string()).await
    }

    pub(crate) async fn notify<P: Serialize>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<(), Closed> {
        self.send(self.notification_text(method, params)).await
    }

    /// A notification whose params JSON `write_params` appends to the text, for hot paths that
    /// encode params by hand; `capacity` should cover the whole message.
    pub(crate) fn notification_text_with(
        &self,
        method: &str,
        capacity: usize,
        write_params: impl FnOnce(&mut String),
    ) -> String {
        let mut text = String::with_capacity(capacity + method.len() + 48);
        text.push('{');
        if self.strict.load(Ordering::Relaxed) {
            text.push_str(r#""jsonrpc":"2.0","#);
        }
        text.push_str(r#""method":"#);
        push_json_string(&mut text, method);
        text.push_str(r#","params":"#);
        write_params(&mut text);
        text.push('}');
        text
    }

    pub(crate) fn notification_text<P: Serialize>(&self, method: &str, params: &P) -> String {
        self.notification_text_with(method, 64, |text| {
            text.push_str(&serde_json::to_string(params).expect("wire types always serialize"))
        })
    }

    /// `message` is a JSON-RPC message whose last member is the object (params or result)
    /// that `payload` belongs in as its chunk. A binary connection gets it as header, NUL, raw
    /// chunk (written in front of the payload's bytes, not copied); a text one gets the chunk
    /// added to that object in base64, encoded straight into the text.
    pub(crate) fn with_chunk(&self, message: String, payload: Payload) -> Message {
        if self.binary.load(Ordering::Relaxed) {
            return Message::Binary(payload.behind(&message));
        }
        let chunk = payload.bytes();
        let mut text = message;
        debug_assert!(text.ends_with("}}"), "the object is the last member");
        text.truncate(text.len() - 2);
        text.reserve(chunk.len().div_ceil(3) * 4 + binary::CHUNK_MEMBER.len() + 8);
        if !text.ends_with('{') {
            text.push(',');
        }
        push_json_string(&mut text, binary::CHUNK_MEMBER);
        text.push_str(":\"");
        Base64Bytes::encode_into(chunk, &mut text);
        text.push_str("\"}}");
        Message::Text(text)
    }
}

/// Appends `value` as a JSON string.
pub(crate) fn push_json_string(text: &mut String, value: &str) {
    text.push_str(&serde_json::to_string(value).expect("strings serialize"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_chunk_joins_the_last_object_as_base64_or_rides_as_the_payload() {
        let chunk = |bytes: &[u8]| Payload::from(bytes);
        let (outbound, _queue) = Outbound::new(true, 1 << 20);
        let parse = |message: Message| match message {
            Message::Text(text) => serde_json::from_str::<Value>(&text).unwrap(),
            other => panic!("{other:?} before the opt-in"),
        };
        let full =
            parse(outbound.with_chunk(r#"{"id":1,"result":{"eof":true}}"#.into(), chunk(b"hi")));
        assert_eq!(
            full,
            json!({"id": 1, "result": {"eof": true, "chunk": "aGk="}})
        );
        let empty = parse(outbound.with_chunk(r#"{"id":2,"result":{}}"#.into(), chunk(b"")));
        assert_eq!(empty, json!({"id": 2, "result": {"chunk": ""}}));
        assert!(outbound.enable_binary());
        let Message::Binary(bytes) =
            outbound.with_chunk(r#"{"id":3,"result":{}}"#.into(), chunk(b"\0"))
        else {
            panic!("text after the opt-in");
        };
        assert_eq!(&bytes[..], b"{\"id\":3,\"result\":{}}\0\0");
        let (stdio, _queue) = Outbound::new(false, 1 << 20);
        assert!(!stdio.enable_binary());
    }

    fn pending<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
        futures::FutureExt::now_or_never(future).is_none()
    }

    #[tokio::test]
    async fn a_message_holds_its_bytes_until_the_writer_asks_for_the_next() {
        let budget = 2 * (100 + MESSAGE_OVERHEAD);
        let (outbound, mut queue) = Outbound::new(false, budget);
        let text = || "x".repeat(100);
        outbound.send(text()).await.unwrap();
        outbound.send(text()).await.unwrap();
        let third = outbound.send(text());
        tokio::pin!(third);
        assert!(pending(third.as_mut()), "the queue is full");
        queue.recv().await.unwrap();
        assert!(
            pending(third.as_mut()),
            "the first message is still being written"
        );
        queue.recv().await.unwrap();
        assert!(!pending(third.as_mut()), "the first message was written");
        // Larger than the whole budget: waits for an empty queue, then goes alone.
        let huge = outbound.send("y".repeat(10 * budget));
        tokio::pin!(huge);
        assert!(pending(huge.as_mut()));
        queue.recv().await.unwrap();
        assert!(
            pending(huge.as_mut()),
            "the third message is still being written"
        );
        // Asking for the next message releases the third (nothing is queued yet).
        assert!(pending(std::pin::pin!(queue.recv())));
        assert!(!pending(huge.as_mut()));
        assert!(
            matches!(queue.recv().await, Some(Message::Text(text)) if text.len() == 10 * budget)
        );
    }

    #[tokio::test]
    async fn a_receipt_is_due_once_everything_queued_before_it_was_wanted_is_written() {
        let (outbound, mut queue) = Outbound::new(false, 1 << 20);
        for _ in 0..3 {
            outbound.send("x".into()).await.unwrap();
        }
        queue.recv().await.unwrap();
        outbound.want_receipt();
        assert!(
            !queue.receipt_due(0),
            "two wanted messages are not written yet"
        );
        queue.recv().await.unwrap();
        queue.recv().await.unwrap();
        assert!(queue.receipt_due(0));
        assert!(
            queue.receipt_due(1),
            "a ping after the first covered only it"
        );
        assert!(
            !queue.receipt_due(3),
            "a ping after the third covered them all"
        );
        outbound.send("y".into()).await.unwrap();
        queue.recv().await.unwrap();
        assert!(!queue.receipt_due(3), "nobody wanted proof of the fourth");
    }
}
