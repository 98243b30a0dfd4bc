//! A connection's active body streams: the request ids they reserve, and a token that stops
//! them all when the connection ends.

use super::HttpError;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Lives in `ConnectionShared`; dropping it (the connection ended) stops every stream.
#[derive(Default)]
pub(crate) struct HttpStreams {
    active: Arc<Mutex<HashSet<String>>>,
    stop: CancellationToken,
}

impl HttpStreams {
    /// Reserves `request_id` until the returned guard is dropped.
    pub(crate) fn reserve(&self, request_id: &str) -> Result<Reservation, HttpError> {
        if !self.active.lock().unwrap().insert(request_id.to_owned()) {
            return Err(HttpError::Invalid(format!(
                "http/request streamResponse requestId `{request_id}` is already active"
            )));
        }
        Ok(Reservation {
            active: self.active.clone(),
            request_id: request_id.to_owned(),
        })
    }

    /// Cancelled when the connection ends. A stream holds this, never the connection itself,
    /// so a running stream does not keep the connection state alive.
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }
}

impl Drop for HttpStreams {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A reserved request id, released on drop.
pub(crate) struct Reservation {
    active: Arc<Mutex<HashSet<String>>>,
    request_id: String,
}

impl Reservation {
    pub(crate) fn request_id(&self) -> &str {
        &self.request_id
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.active.lock().unwrap().remove(&self.request_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_reserved_until_its_guard_drops() {
        let streams = HttpStreams::default();
        let first = streams.reserve("r").unwrap();
        assert_eq!(
            streams.reserve("r").err().unwrap().to_string(),
            "http/request streamResponse requestId `r` is already active"
        );
        let other = streams.reserve("s").unwrap();
        drop(first);
        streams.reserve("r").unwrap();
        drop(other);
    }

    #[test]
    fn dropping_the_streams_cancels_the_token() {
        let streams = HttpStreams::default();
        let token = streams.stop_token();
        assert!(!token.is_cancelled());
        drop(streams);
        assert!(token.is_cancelled());
    }
}
