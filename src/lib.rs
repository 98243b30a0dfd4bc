//! exec-server: runs and controls processes and files for a remote orchestrator over JSON-RPC.
//!
//! Layers, top down (the map: docs/architecture.md): `transport` (listeners) → `server` (the
//! `Daemon` context, connection loop, router) → the features `fs`, `http`, `environment` and
//! the process handlers → `session` → `process` (managed children) → `launcher` (the daemon's
//! side of a launch) → `sandbox` (intent to plan) and `ipc` (messages to and from `child`, what
//! runs after fork) → the leaves (`rpc`, `os`, `config`, ...), which import none of them.

// Crate-private by default, so the compiler finds dead code; every `unsafe` says why it is
// sound.
#![warn(unreachable_pub)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod audit;
mod capability;
mod child;
mod cli;
mod codex_args;
mod config;
mod envd;
#[doc(hidden)]
pub use envd::fuzz as envd_fuzz;
mod environment;
mod environment_config;
mod fs;
mod http;
mod ipc;
mod launcher;
mod memory;
mod metrics;
mod netproxy;
mod os;
mod path;
mod pidfd;
mod process;
pub mod rpc;
mod runtime_api;
mod sandbox;
mod sandboxd;
/// The sandboxd gRPC messages, for the tests' client.
#[doc(hidden)]
pub use sandboxd::grpc::messages as sandboxd_process_v1;
mod server;
mod session;
mod state_dir;
mod transport;
mod ws_auth;
#[doc(hidden)]
pub use ws_auth::check_header as jwt_header;

// What the binary needs; `rpc` is public for the fuzz targets.
pub use child::main_if_supervisor;
pub use cli::main as run_command;
pub use cli::Cli;
pub use config::{Args, LogFormat, RemoteArgs, RemoteConfig, RemoteTransport};
pub use memory::map_large_buffers;
pub use sandbox::guard::init as record_own_binary;
pub use transport::{serve, Handover, ListenUrl};
// The parsers of a peer's bytes, for the fuzz targets (fuzz/).
#[doc(hidden)]
pub use transport::registry_reply;
