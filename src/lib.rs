//! exec-server: runs and controls processes and files for a remote orchestrator over JSON-RPC.
//!
//! Layers, outside in: `transport` (WebSocket, stdio) → `rpc` (envelope, connection loop,
//! dispatch) → `session` (registry, attachment) → `process` (managed children), with
//! `sandbox` enforcing permission intent on launches. Beside them: `environment` (host facts,
//! capabilities), `fs` (files, streams and watches, per connection) and `http` (requests made on
//! the client's behalf).

mod cli;
mod config;
mod environment;
mod fs;
mod http;
mod memory;
mod process;
pub mod rpc;
mod sandbox;
mod server;
mod session;
mod transport;

// What the binary needs; `rpc` is public for the fuzz targets.
pub use cli::main as run_command;
pub use config::{Args, Cli, LogFormat};
pub use memory::map_large_buffers;
pub use sandbox::guard::init as record_own_binary;
pub use sandbox::helper::main_if_helper;
pub use transport::{serve, ListenUrl};
