//! Requests the daemon sends to the client (`network/policyRequest`), and the client's replies
//! routed back to them by id.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Requests awaiting a reply at once per connection; more fail at once, as unanswered.
const MAX_PENDING: usize = 256;

/// The client's reply: its `result`, or its `error` object.
pub(crate) type Reply = Result<Value, Value>;

/// A connection's requests awaiting replies.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
}

/// One request's place; dropping it (the asker gave up) frees the place.
pub(crate) struct Waiting {
    pub id: u64,
    pub reply: oneshot::Receiver<Reply>,
    pending: Arc<Pending>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.pending.waiting.lock().unwrap().remove(&self.id);
    }
}

impl Pending {
    /// A new request's id and where its reply arrives; None when too many wait already.
    pub(crate) fn register(self: &Arc<Self>) -> Option<Waiting> {
        let mut waiting = self.waiting.lock().unwrap();
        if waiting.len() >= MAX_PENDING {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (sender, reply) = oneshot::channel();
        waiting.insert(id, sender);
        Some(Waiting {
            id,
            reply,
            pending: self.clone(),
        })
    }

    /// Hands the client's reply with `id` to its request; false when none waits for it.
    pub(crate) fn resolve(&self, id: &Value, reply: Reply) -> bool {
        let Some(id) = id.as_u64() else {
            return false;
        };
        let sender = self.waiting.lock().unwrap().remove(&id);
        sender.is_some_and(|sender| sender.send(reply).is_ok())
    }
}
