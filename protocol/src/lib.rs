//! Wire types of the exec-server JSON-RPC protocol.
//!
//! Every type serializes exactly as it appears on the wire (camelCase members), so clients can
//! depend on this crate instead of re-declaring the protocol. [`methods`] lists every method
//! once, with its types; [`schema::all`] returns a JSON Schema for every message.

pub mod base64_bytes;
pub mod binary;
pub mod capability;
pub mod environment;
pub mod environment_config;
pub mod fs;
pub mod http;
pub mod methods;
pub mod network;
pub mod path_uri;
pub mod process;
pub mod rpc;
pub mod sandbox;
pub mod schema;
pub mod session;

pub use path_uri::PathUri;
