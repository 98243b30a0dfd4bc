//! What a request handler may do about its own reply, beside returning it.

use super::outbound::{Budget, Outbound};
use std::sync::Mutex;

type Hook = Box<dyn FnOnce() + Send>;

/// One request being answered: the connection's outbound queue, budget held for the reply, and
/// code to run once the reply is queued.
pub(crate) struct Call {
    outbound: Outbound,
    after_reply: Mutex<Vec<Hook>>,
    /// Outbound budget held for the reply being built (see [`Call::reserve_reply`]).
    reserved: Mutex<Budget>,
}

impl Call {
    pub(crate) fn new(outbound: Outbound) -> Self {
        Self {
            outbound,
            after_reply: Mutex::default(),
            reserved: Mutex::default(),
        }
    }

    pub(crate) fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Waits for `bytes` of the connection's outbound budget before a handler builds a large
    /// reply, so that the memory is held within the budget from the start: concurrent large
    /// replies take turns instead of all being built at once and then waiting to be queued.
    pub(crate) async fn reserve_reply(&self, bytes: usize) {
        let budget = self.outbound.reserve(bytes).await;
        *self.reserved.lock().unwrap() = budget;
    }

    /// The budget reserved for the reply, for the connection to queue the reply within.
    pub(crate) fn take_reserved(&self) -> Budget {
        std::mem::take(&mut *self.reserved.lock().unwrap())
    }

    /// Runs `hook` once this request's reply is queued on the connection, whatever the
    /// outcome, so anything the hook sends follows the reply.
    pub(crate) fn after_reply(&self, hook: impl FnOnce() + Send + 'static) {
        self.after_reply.lock().unwrap().push(Box::new(hook));
    }

    /// Called by the connection right after it queued the reply.
    pub(crate) fn replied(&self) {
        let hooks = std::mem::take(&mut *self.after_reply.lock().unwrap());
        for hook in hooks {
            hook();
        }
    }
}
