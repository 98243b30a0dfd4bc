//! A process's output read to its end by a listener other than a session (envd's process
//! stream, sandboxd's `Start` and `Execute`, the runtime API's `/execute`): batch by batch, each
//! marked received only once the caller asks for the next, so nothing is evicted before the
//! caller has sent it on, and a slow caller holds the process back once retention is full.

use super::managed::{Following, ManagedProcess};
use super::output::{Chunk, ReadSnapshot};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Bytes one batch holds at most.
const BATCH_BYTES: usize = 1024 * 1024;

/// What [`OutputFollower::next`] found.
pub(crate) enum Followed {
    /// Output after the last batch, in seq order.
    Chunks(Vec<Chunk>),
    /// The output is closed: the read that says so, with the exit.
    Closed(Box<ReadSnapshot>),
    /// Nothing came for the idle period the caller gave.
    Idle,
    /// The process is gone from under the reader.
    Gone,
}

pub(crate) struct OutputFollower {
    process: Arc<ManagedProcess>,
    changes: watch::Receiver<()>,
    after_seq: u64,
    /// The last batch's end, marked received when the next is asked for.
    unmarked: Option<u64>,
    _following: Following,
}

impl OutputFollower {
    /// Follows `process`'s output after `after_seq`.
    pub(crate) fn new(process: &Arc<ManagedProcess>, after_seq: u64) -> Self {
        Self {
            _following: process.follow(),
            changes: process.subscribe(),
            process: process.clone(),
            after_seq,
            unmarked: None,
        }
    }

    /// The next batch, the end, or (with `idle`) word that nothing came for that long.
    pub(crate) async fn next(&mut self, idle: Option<Duration>) -> Followed {
        if let Some(seq) = self.unmarked.take() {
            self.process.mark_received(seq);
        }
        loop {
            self.changes.borrow_and_update();
            let snapshot = self.process.read(self.after_seq, Some(BATCH_BYTES));
            self.after_seq = snapshot.next_seq.saturating_sub(1);
            if !snapshot.chunks.is_empty() {
                // A read is cut at `BATCH_BYTES`: what follows may be there already.
                self.unmarked = Some(self.after_seq);
                return Followed::Chunks(snapshot.chunks);
            }
            self.process.mark_received(self.after_seq);
            if snapshot.closed {
                return Followed::Closed(Box::new(snapshot));
            }
            let changed = match idle {
                Some(idle) => match tokio::time::timeout(idle, self.changes.changed()).await {
                    Ok(changed) => changed,
                    Err(_) => return Followed::Idle,
                },
                None => self.changes.changed().await,
            };
            if changed.is_err() {
                return Followed::Gone;
            }
        }
    }
}
