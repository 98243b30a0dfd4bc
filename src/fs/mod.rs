//! The `fs/*` methods: files, directories, block streams and watches on the executor host.
//!
//! Layout: `methods` decodes and routes; `sandbox` is the single gate for `sandbox` intent;
//! `host` converts paths, maps errors and opens files (never blocking on a FIFO); `file`,
//! `ops`, `copy`, `walk` do the one-shot work; `handles`, `read_stream`, `write_stream` and
//! `staged` serve `fs/open` streams; `watch` serves `fs/watch`.

mod copy;
mod file;
mod handles;
mod host;
pub mod methods;
mod ops;
mod read_stream;
pub mod sandbox;
mod staged;
mod walk;
mod watch;
mod write_stream;

/// Capability names of what this module adds to the reference protocol, for
/// `environment/info` to advertise:
/// - `fileWriteStreaming`: `fs/open` modes write/append/replace, `fs/writeBlock`, commit on
///   `fs/close` (`discard` to abort).
/// - `fsAtomicWrite`: `fs/writeFile {atomic: true}`.
/// - `fsRename`: `fs/rename`.
/// - `fsReadDirectoryErrors`: `fs/readDirectory` reports entries it could not stat in `errors`.
/// - `fsWatch`: `fs/watch`, `fs/unwatch`, `fs/changed`.
pub const CAPABILITIES: &[&str] = &[
    "fileWriteStreaming",
    "fsAtomicWrite",
    "fsRename",
    "fsReadDirectoryErrors",
    "fsWatch",
];

/// Per-connection filesystem state: open handles and watches. Dropped with the connection,
/// which closes every file, discards staged writes and stops every watch.
#[derive(Default)]
pub struct ConnectionFs {
    handles: handles::Handles,
    watches: watch::Watches,
}
