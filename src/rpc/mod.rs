//! The JSON-RPC layer: envelope parsing in both dialects, errors, the per-connection loop and
//! method dispatch.

pub mod connection;
pub mod dispatch;
pub mod envelope;
pub mod error;
mod in_flight;
pub mod outbound;
pub mod reply;

pub use error::RpcError;
