//! The daemon's top layer, above every feature: one client connection's loop, and the router
//! that hands each request to the handler of its method.

pub(crate) mod admission;
mod connection;
mod context;
mod daemon;
mod network_proxy;
pub(crate) mod pending_http;
mod process_methods;
mod refusals;
mod router;
mod routes;
mod shell_snapshot;
#[cfg(test)]
mod tests;

pub(crate) use connection::{serve, AtEnd, Frame};
pub(crate) use daemon::Daemon;
pub(crate) use process_methods::launch;
