//! The writing side of a WebSocket connection: its queued messages and the pings, then the
//! Close.

use super::super::zero_copy;
use super::Socket;
use crate::rpc::outbound;
use axum::extract::ws::{CloseFrame, Message};
use futures::stream::SplitSink;
use futures::SinkExt as _;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Sent to every client when the daemon hands over to its successor: reconnect and resume.
const SERVICE_RESTART: u16 = 1012;

/// The writing side of a connection: its queued messages and the pings, then our Close.
pub(super) struct Writer<S: Socket> {
    pub(super) sink: SplitSink<S, Message>,
    /// Data frames go here, when the socket is plain; else through `sink`.
    pub(super) frames: Option<zero_copy::Frames>,
    pub(super) queue: outbound::Queue,
    pub(super) ping_interval: Duration,
    /// Set by the reading side when the peer broke the protocol (0: it did not).
    pub(super) close_code: Arc<AtomicU16>,
    pub(super) restart: CancellationToken,
}

impl<S: Socket> Writer<S> {
    /// Writes until the queue ends or the daemon hands over, or until nothing was `heard` from
    /// `peer` for two ping intervals; `_gone` tells the reading side that the writer ended.
    pub(super) async fn run(
        mut self,
        heard: Arc<Mutex<Instant>>,
        peer: Arc<str>,
        _gone: DropGuard,
    ) {
        let limit = 2 * self.ping_interval;
        // Beside the writing, not inside it: a frozen peer also stops draining its socket, so
        // a send may block for good. Dropping the sink and the queue then unblocks every
        // sender of this connection.
        tokio::select! {
            () = self.write() => {}
            () = silence(&heard, limit) => {
                tracing::info!(peer = %peer, "no pong for two ping intervals; disconnecting");
            }
        }
    }

    async fn write(&mut self) {
        let interval = self.ping_interval;
        let mut ping = tokio::time::interval_at(Instant::now() + interval, interval);
        // The index the last ping carried.
        let mut pinged = 0;
        let requests = self.queue.receipt_requests();
        loop {
            // Every ping carries the index of the last message written before it, which its
            // pong acknowledges (proof of receipt, see `rpc::outbound`).
            let ping = tokio::select! {
                message = self.queue.recv() => match message {
                    Some(message) => {
                        if !self.send(message).await {
                            return;
                        }
                        // Proof wanted of messages that are all written now.
                        if !self.queue.receipt_due(pinged) {
                            continue;
                        }
                        self.ping(&mut pinged)
                    }
                    None => break,
                },
                _ = ping.tick() => self.ping(&mut pinged),
                // What is written already is acknowledged at once; what was queued before the
                // request and is not written yet, by the ping that follows it (above).
                () = requests.wanted() => {
                    if self.queue.sent() == pinged {
                        continue;
                    }
                    self.ping(&mut pinged)
                }
                () = self.restart.cancelled() => break,
            };
            if self.sink.send(ping).await.is_err() {
                return;
            }
        }
        // A hand-over also ends the reading side, hence the queue, maybe first.
        let code = match self.close_code.load(Ordering::Relaxed) {
            0 if self.restart.is_cancelled() => SERVICE_RESTART,
            code => code,
        };
        let frame = match code {
            0 => None,
            code => Some(CloseFrame {
                code,
                reason: "".into(),
            }),
        };
        // After the peer's Close, tungstenite has queued its answer and refuses ours: the flush
        // sends it, so the peer sees the close handshake end instead of a dropped connection.
        let _ = self.sink.send(Message::Close(frame)).await;
        let _ = self.sink.flush().await;
    }
}

impl<S: Socket> Writer<S> {
    /// Sends a queued message; false once the connection failed.
    async fn send(&mut self, message: outbound::Message) -> bool {
        if let Some(frames) = &self.frames {
            return frames.send(&mut self.sink, message).await.is_ok();
        }
        let message = match message {
            outbound::Message::Text(text) => Message::Text(text.into()),
            outbound::Message::Binary(bytes) => Message::Binary(bytes),
            outbound::Message::File(chunk) => Message::Binary(chunk.load()),
        };
        self.sink.send(message).await.is_ok()
    }

    /// A ping carrying the index of the last message written, noted in `pinged`.
    fn ping(&self, pinged: &mut u64) -> Message {
        *pinged = self.queue.sent();
        Message::Ping(pinged.to_be_bytes().to_vec().into())
    }
}

/// Resolves once nothing was heard from the peer for `limit`.
async fn silence(heard: &Mutex<Instant>, limit: Duration) {
    loop {
        let deadline = *heard.lock().unwrap() + limit;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}
