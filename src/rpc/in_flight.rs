//! The ids of a connection's requests that are not answered yet: JSON-RPC ids must be unique
//! among them, or the client could not tell the replies apart.

use super::RpcError;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub(crate) struct InFlightIds(Arc<Mutex<HashSet<String>>>);

/// An id in flight; dropping it (just before the reply is queued) frees the id for reuse.
pub(crate) struct Claim {
    ids: Arc<Mutex<HashSet<String>>>,
    /// The id as JSON text, so `1` and `"1"` stay distinct.
    key: String,
}

impl InFlightIds {
    pub(crate) fn claim(&self, id: &Value) -> Result<Claim, RpcError> {
        let key = id.to_string();
        if !self.0.lock().unwrap().insert(key.clone()) {
            return Err(RpcError::invalid_request(format!(
                "request id {key} is already in flight on this connection"
            )));
        }
        Ok(Claim {
            ids: self.0.clone(),
            key,
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.ids.lock().unwrap().remove(&self.key);
    }
}
