//! The `fs/*` methods: files, directories, block streams and watches on the executor host.
//!
//! Layout: `methods` decodes and routes; `sandbox` is the single gate for `sandbox` intent and
//! the daemon's side of confined calls, `confined` the operations a confined helper runs
//! (`crate::child::fs_op` serves them); `beneath` opens a path beneath a directory, for
//! agent-sandbox's runtime file routes on either side;
//! `oneshot` is every one-shot method as one value that either side runs; `host` converts
//! paths, maps errors and opens files (never blocking on a FIFO); `file`, `ops`, `copy`, `walk`
//! do the one-shot work; `handles`, `read_stream`, `write_stream`, `staged` and `transfer` serve `fs/open`
//! streams; `watch` serves `fs/watch`, `watch_missing` `fs/watchMissing`. What the module adds to the reference protocol is
//! advertised in `environment/info` (`fileWriteStreaming`, `fsAtomicWrite`, `fsRename`,
//! `fsReadDirectoryErrors`, `fsWatch`, `sandboxedFileStreaming`).

pub(crate) mod beneath;
pub(crate) mod confined;
mod copy;
mod error;
mod file;
mod handles;
mod host;
mod methods;
mod oneshot;
mod ops;
mod read_stream;
pub(crate) mod sandbox;
mod staged;
mod transfer;
mod walk;
mod watch;
mod watch_missing;
mod write_stream;

pub(crate) use error::{Failure, FsError};
pub(crate) use file::TOO_LARGE as READ_FILE_TOO_LARGE;
pub(crate) use methods::{
    close, one_shot, open, read_block, run_routed, unwatch, watch, watch_missing, write_block,
};
pub(crate) use oneshot::{one_shots, OneShot, OneShotVisitor};
pub(crate) use watch::{start_watcher, WatchBudget, WatchLimits, WatchUse, Watcher, MAX_WATCHES};

/// Per-connection filesystem state: open handles and watches. Dropped with the connection,
/// which closes every file, discards staged writes and stops every watch.
#[derive(Default)]
pub(crate) struct ConnectionFs {
    handles: handles::Handles,
    watches: watch::Watches,
    missing: watch_missing::MissingWatch,
}
