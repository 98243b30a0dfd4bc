//! The end-to-end tests, one module per area, in a single binary: each test binary links the
//! whole daemon, and a link per file made up most of a test build on a two-core machine.
//! `cargo test --test it <area>::` runs one area, `cargo test --test it -- a:: b::`
//! several, and any name filter works as before.
//!
//! Tests share this process, so none may change process-wide state (environment, current
//! directory, signal dispositions, lowering a limit): what a daemon needs is set on its
//! `Command`.

mod common;
mod sandbox_support;
mod support {
    pub mod http_proxy;
    pub mod proxy;
    pub mod recorder;
    pub mod registry;
    pub mod tls_intercept;
}

mod agent_sandbox;
mod agent_sandbox_files;
mod agent_sandbox_fleet;
mod audit;
mod binary;
mod cli;
mod cli_fs;
mod cli_jobs;
mod cli_pty;
mod client;
mod codex_agent;
mod codex_differential;
mod codex_fidelity_cli;
mod codex_fidelity_discovery;
mod codex_fidelity_http;
mod envd_listener;
mod envd_proto;
mod environment;
mod environment_config;
mod fs;
mod fs_stream;
mod fs_watch;
mod fs_watch_missing;
mod hardening_envd;
mod hardening_listeners;
mod hardening_procs;
mod hardening_state;
mod http;
mod input_wait;
mod jsonrpc2_client;
mod metrics;
mod network_proxy;
mod process;
mod process_tree;
mod protocol_doc;
mod proxy_keepalive;
mod receipt;
mod remote;
mod remote_refusals;
mod restart;
mod robustness;
mod sandbox;
mod sandbox_backends;
mod sandbox_fs;
mod sandbox_fs_ops;
mod sandbox_managed_net;
mod sandbox_net;
mod sandbox_root_write;
mod sandbox_scale;
mod sandboxd_grpc;
mod sandboxd_rest;
mod session;
mod session_api;
mod shell_snapshot;
mod soak;
mod state_dir;
mod stuck_requests;
mod tls;
mod transport;
mod unix_socket;
mod upgrade;
