//! exec-server: runs and controls processes and files for a remote orchestrator over JSON-RPC.
//!
//! Layers, outside in: `transport` (WebSocket, stdio) → `rpc` (envelope, connection loop,
//! dispatch) → `session` (registry, attachment) → `process` (managed children), with
//! `sandbox` enforcing permission intent on launches. Beside them: `environment` (host facts,
//! capabilities), `fs` (files, streams and watches, per connection) and `http` (requests made on
//! the client's behalf).

pub mod cli;
pub mod config;
pub mod environment;
pub mod fs;
pub mod http;
pub mod memory;
pub mod process;
pub mod rpc;
pub mod sandbox;
mod server;
pub mod session;
pub mod transport;
