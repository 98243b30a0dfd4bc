//! The JSON-RPC layer, beneath every feature: envelope parsing in both dialects, params
//! decoding, errors, the outbound queue and what a handler may do about its reply. It knows no
//! method; the connection loop and the router live above the features, in `server`.

pub(crate) mod asking;
mod call;
pub mod decoder;
pub mod envelope;
mod error;
pub(crate) mod in_flight;
pub(crate) mod outbound;
mod params;
pub(crate) mod payload;
pub(crate) mod reply;

pub(crate) use call::Call;
pub use error::RpcError;
pub(crate) use params::check_ids;
pub use params::decode;
