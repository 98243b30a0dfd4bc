//! `http/request`: the daemon makes an HTTP request on the client's behalf and returns the
//! response buffered, or streams its body as `http/request/bodyDelta` notifications.
//!
//! `request` validates and builds the request, `client` picks a pooled client and sends it,
//! `streams` tracks this connection's active body streams, `body` pumps one of them; `trust`
//! holds the custom CA and the Cloudflare cookie jar every client shares.

mod body;
mod client;
mod methods;
mod request;
mod streams;
mod trust;

pub(crate) use methods::request;
pub(crate) use streams::HttpStreams;

use crate::rpc::RpcError;

/// Why an `http/request` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The params do not make a request this daemon sends.
    #[error("{0}")]
    Invalid(String),
    #[error(
        "http/request response body exceeds the limit of {limit} bytes for a buffered \
         response; send the request with streamResponse: true to receive the body as \
         http/request/bodyDelta notifications"
    )]
    BodyTooLarge { limit: usize },
    /// Connecting, sending, or the deadline.
    #[error("http/request failed: {0}")]
    Send(String),
    #[error("failed to read http/request response body: {0}")]
    ReadBody(String),
}

impl From<HttpError> for RpcError {
    fn from(err: HttpError) -> Self {
        let message = err.to_string();
        match err {
            HttpError::Invalid(_) => RpcError::invalid_params(message),
            HttpError::BodyTooLarge { .. } => RpcError::invalid_request(message),
            HttpError::Send(_) | HttpError::ReadBody(_) => RpcError::internal(message),
        }
    }
}

/// An error with its causes, e.g. `error sending request for url (…): client error
/// (Connect): tcp connect error: Connection refused (os error 111)`.
fn describe(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
