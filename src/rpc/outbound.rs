//! The sending half of a connection: any task may push a reply or notification at any time.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Messages queued per connection before senders wait (backpressure from a slow client).
const QUEUE_CAPACITY: usize = 256;

#[derive(Clone, Debug)]
pub struct Outbound {
    tx: mpsc::Sender<String>,
    /// Whether the client speaks strict JSON-RPC 2.0, so notifications carry `"jsonrpc"` too.
    strict: Arc<AtomicBool>,
}

#[derive(Debug)]
pub struct Closed;

impl Outbound {
    pub fn new() -> (Self, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        (
            Self {
                tx,
                strict: Arc::new(AtomicBool::new(false)),
            },
            rx,
        )
    }

    pub fn set_strict(&self) {
        self.strict.store(true, Ordering::Relaxed);
    }

    pub async fn send(&self, text: String) -> Result<(), Closed> {
        self.tx.send(text).await.map_err(|_| Closed)
    }

    pub async fn send_value(&self, value: &serde_json::Value) -> Result<(), Closed> {
        self.send(value.to_string()).await
    }

    pub async fn notify<P: Serialize>(&self, method: &str, params: &P) -> Result<(), Closed> {
        self.send(self.notification_text(method, params)).await
    }

    /// A notification whose params JSON `write_params` appends to the text, for hot paths that
    /// encode params by hand; `capacity` should cover the whole message.
    pub fn notification_text_with(
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

    pub fn notification_text<P: Serialize>(&self, method: &str, params: &P) -> String {
        self.notification_text_with(method, 64, |text| {
            text.push_str(&serde_json::to_string(params).expect("wire types always serialize"))
        })
    }
}

/// Appends `value` as a JSON string.
pub fn push_json_string(text: &mut String, value: &str) {
    text.push_str(&serde_json::to_string(value).expect("strings serialize"));
}
