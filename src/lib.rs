//! exec-server: runs and controls processes and files for a remote orchestrator over JSON-RPC.
//!
//! Layers, outside in: `transport` (WebSocket, stdio) → `rpc` (envelope, connection loop,
//! dispatch) → `session` (registry, attachment) → `process` (managed children), with
//! `sandbox` enforcing permission intent on launches.

pub mod config;
pub mod process;
pub mod rpc;
pub mod sandbox;
pub mod session;
pub mod transport;
