//! exec-server: runs and controls processes and files for a remote orchestrator over JSON-RPC.
//!
//! Layers, outside in: `transport` (WebSocket, stdio) → `rpc` (envelope, connection loop,
//! dispatch) → `session` (registry, attachment) → `process` (managed children), and `fs`
//! (files, streams and watches, per connection).

pub mod config;
pub mod fs;
pub mod process;
pub mod rpc;
pub mod session;
pub mod transport;
