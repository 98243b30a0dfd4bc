//! How a stream the sandbox helper opened is described to the daemon, which takes over its
//! cleanup; the open file itself travels beside the description over the helper's socket.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A handle the sandbox helper opened, as it describes it to the daemon; the open file itself
/// travels beside this over the helper's socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(crate) enum Transfer {
    Read,
    Write(WriteTransfer),
}

/// A write handle the sandbox helper opened, as it describes it to the daemon.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "sink", rename_all = "camelCase")]
pub(crate) enum WriteTransfer {
    #[serde(rename_all = "camelCase")]
    InPlace { path: PathBuf, append: bool },
    #[serde(rename_all = "camelCase")]
    Staged {
        path: PathBuf,
        temp: PathBuf,
        target: PathBuf,
        mode: Option<u32>,
    },
}
