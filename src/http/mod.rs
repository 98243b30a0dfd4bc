//! `http/request`: the daemon makes an HTTP request on the client's behalf and returns the
//! response buffered, or streams its body as `http/request/bodyDelta` notifications.
//!
//! `request` validates and builds the request, `client` picks a pooled client and sends it,
//! `streams` tracks this connection's active body streams, `body` pumps one of them.

mod body;
mod client;
pub mod methods;
mod request;
mod streams;

pub use streams::HttpStreams;

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
