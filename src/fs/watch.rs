//! `fs/watch` / `fs/unwatch` and the `fs/changed` notification.
//!
//! Each watch owns a `notify` watcher (inotify on Linux). Its callback thread pushes into a
//! bounded queue; a task drains it, coalesces what arrives within a short window into one
//! notification, and says so when anything was lost (queue full, notification cap, kernel
//! overflow). Watches are per connection and end with it.

use super::host::{blocking, with_path};
use super::FsError;
use crate::rpc::outbound::Outbound;
use exec_server_protocol::fs::{Change, ChangeKind, ChangedNotification};
use exec_server_protocol::rpc::method;
use exec_server_protocol::PathUri;
use notify::event::{EventKind, Flag, ModifyKind};
use notify::{RecursiveMode, Watcher as _};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Watches per connection; each holds an inotify instance, a system-wide scarce resource.
pub(super) const MAX_WATCHES: usize = 32;
/// Events queued between the watcher thread and the forwarding task.
const QUEUE: usize = 4096;
/// Changes in one notification; more within the window are dropped and flagged.
pub(super) const MAX_CHANGES: usize = 1024;
/// How long changes are gathered into one notification after the first arrives.
const COALESCE: Duration = Duration::from_millis(50);

/// Directories watched (each an inotify watch, of which the user has
/// /proc/sys/fs/inotify/max_user_watches shared with every other process), daemon-wide or by
/// one connection.
#[derive(Clone, Default)]
pub(crate) struct WatchedDirectories(Arc<AtomicUsize>);

/// Directories a watch counts in a [`WatchedDirectories`], given back when it is dropped.
struct Counted {
    of: Arc<AtomicUsize>,
    directories: usize,
}

impl WatchedDirectories {
    /// Counts `directories` more, unless that would exceed `limit`.
    fn count(&self, directories: usize, limit: usize, scope: &str) -> Result<Counted, FsError> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(directories)
                    .filter(|&total| total <= limit)
            })
            .map_err(|used| over_budget(directories, scope, limit, used))?;
        Ok(Counted {
            of: self.0.clone(),
            directories,
        })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.of.fetch_sub(self.directories, Ordering::AcqRel);
    }
}

fn over_budget(directories: usize, scope: &str, limit: usize, used: usize) -> FsError {
    FsError::bad_params(format!(
        "fs/watch would exceed the limit of {limit} watched directories {scope}: the tree has \
         at least {directories} and {used} are in use; watch a smaller tree, or unwatch others"
    ))
}

/// The directories a watch of `path` adds, stopping once past `limit` (the walk is bounded by
/// the budget, not by the tree). Symlinks are not followed, as the watcher does not.
fn directories_under(path: &std::path::Path, recursive: bool, limit: usize) -> usize {
    let mut count = 1;
    let mut pending = vec![path.to_path_buf()];
    while recursive && count <= limit {
        let Some(dir) = pending.pop() else { break };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                count += 1;
                pending.push(entry.path());
            }
        }
    }
    count
}

/// The limits a watch is counted against.
pub(crate) struct WatchBudget {
    pub daemon: WatchedDirectories,
    pub daemon_limit: usize,
    pub connection_limit: usize,
}

struct Watch {
    _watcher: notify::RecommendedWatcher,
    /// Held for as long as the watcher exists.
    _counted: [Counted; 2],
    /// True while notifications may be sent; unwatch clears it under the lock, so nothing is
    /// sent for a watch after its `fs/unwatch` reply.
    live: Arc<tokio::sync::Mutex<bool>>,
    forwarder: tokio::task::AbortHandle,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

#[derive(Default)]
pub(super) struct Watches {
    table: Mutex<HashMap<String, Watch>>,
    directories: WatchedDirectories,
}

impl Watches {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watch>> {
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    pub(super) async fn watch(
        &self,
        id: String,
        path: PathBuf,
        recursive: bool,
        outbound: Outbound,
        budget: WatchBudget,
    ) -> Result<(), FsError> {
        room(&self.table(), &id)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        let flag = overflowed.clone();
        let walk_limit = budget.daemon_limit.min(budget.connection_limit);
        let connection = self.directories.clone();
        let (watcher, counted) = blocking(move || {
            // Report a missing path as the usual -32004 I/O error.
            with_path(std::fs::symlink_metadata(&path), &path)?;
            // Counted before any watch is added, so an over-budget tree costs no watches.
            let directories = directories_under(&path, recursive, walk_limit);
            let counted = [
                connection.count(directories, budget.connection_limit, "per connection")?,
                budget
                    .daemon
                    .count(directories, budget.daemon_limit, "for the daemon")?,
            ];
            let handler = move |event| {
                if tx.try_send(event).is_err() {
                    flag.store(true, Ordering::Relaxed);
                }
            };
            let config = notify::Config::default().with_follow_symlinks(false);
            let mut watcher =
                notify::RecommendedWatcher::new(handler, config).map_err(watch_error)?;
            let mode = if recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            watcher.watch(&path, mode).map_err(watch_error)?;
            Ok((watcher, counted))
        })
        .await?;
        let live = Arc::new(tokio::sync::Mutex::new(true));
        let forwarder = tokio::spawn(forward(id.clone(), rx, overflowed, outbound, live.clone()))
            .abort_handle();
        let watch = Watch {
            _watcher: watcher,
            _counted: counted,
            live,
            forwarder,
        };
        // Checked again: another watch may have taken the id or the last slot meanwhile.
        let mut table = self.table();
        room(&table, &id)?;
        table.insert(id, watch);
        Ok(())
    }

    /// Idempotent, like `fs/close`.
    pub(super) async fn unwatch(&self, id: &str) {
        let Some(watch) = self.table().remove(id) else {
            return;
        };
        *watch.live.lock().await = false;
    }
}

fn room(table: &HashMap<String, Watch>, id: &str) -> Result<(), FsError> {
    if table.contains_key(id) {
        return Err(FsError::refused(format!("watch `{id}` already exists")));
    }
    if table.len() >= MAX_WATCHES {
        return Err(FsError::refused(format!(
            "at most {MAX_WATCHES} watches may be open per connection"
        )));
    }
    Ok(())
}

fn watch_error(err: notify::Error) -> FsError {
    match err.kind {
        notify::ErrorKind::Io(err) => FsError::Io { err, path: None },
        notify::ErrorKind::PathNotFound => FsError::WatchedPathMissing,
        notify::ErrorKind::MaxFilesWatch => {
            FsError::internal("the system limit on watched files was reached")
        }
        _ => FsError::internal(err.to_string()),
    }
}

/// One notification's worth of changes.
#[derive(Default)]
struct Batch {
    changes: Vec<Change>,
    seen: HashSet<(ChangeKind, PathBuf)>,
    dropped: bool,
}

impl Batch {
    fn add(&mut self, event: notify::Result<notify::Event>) {
        let event = match event {
            Ok(event) => event,
            Err(_) => {
                self.dropped = true;
                return;
            }
        };
        if event.flag() == Some(Flag::Rescan) {
            self.dropped = true;
        }
        let kind = match event.kind {
            EventKind::Create(_) => ChangeKind::Create,
            EventKind::Modify(ModifyKind::Name(_)) => ChangeKind::Rename,
            EventKind::Modify(_) => ChangeKind::Modify,
            EventKind::Remove(_) => ChangeKind::Remove,
            // Opens, reads and closes change nothing.
            EventKind::Access(_) => return,
            EventKind::Any | EventKind::Other => ChangeKind::Other,
        };
        for path in event.paths {
            if !self.seen.insert((kind, path.clone())) {
                continue;
            }
            if self.changes.len() >= MAX_CHANGES {
                self.dropped = true;
                continue;
            }
            if let Ok(path) = PathUri::from_path(&path) {
                self.changes.push(Change { kind, path });
            }
        }
    }
}

async fn forward(
    watch_id: String,
    mut events: mpsc::Receiver<notify::Result<notify::Event>>,
    overflowed: Arc<AtomicBool>,
    outbound: Outbound,
    live: Arc<tokio::sync::Mutex<bool>>,
) {
    while let Some(first) = events.recv().await {
        let mut batch = Batch::default();
        batch.add(first);
        let window = tokio::time::sleep(COALESCE);
        tokio::pin!(window);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => batch.add(event),
                    None => break,
                },
                _ = &mut window => break,
            }
        }
        let dropped = batch.dropped | overflowed.swap(false, Ordering::Relaxed);
        if batch.changes.is_empty() && !dropped {
            continue;
        }
        let live = live.lock().await;
        if !*live {
            return;
        }
        let notification = ChangedNotification {
            watch_id: watch_id.clone(),
            changes: batch.changes,
            events_dropped: dropped,
        };
        if outbound
            .notify(method::FS_CHANGED, &notification)
            .await
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, path: &str) -> notify::Result<notify::Event> {
        Ok(notify::Event::new(kind).add_path(PathBuf::from(path)))
    }

    #[test]
    fn batches_dedupe_and_cap_and_flag_losses() {
        let mut batch = Batch::default();
        let modify = EventKind::Modify(notify::event::ModifyKind::Any);
        batch.add(event(modify, "/a"));
        batch.add(event(modify, "/a"));
        batch.add(event(
            EventKind::Access(notify::event::AccessKind::Any),
            "/a",
        ));
        assert_eq!(batch.changes.len(), 1);
        assert!(!batch.dropped);
        for index in 0..MAX_CHANGES + 5 {
            batch.add(event(
                EventKind::Create(notify::event::CreateKind::File),
                &format!("/f{index}"),
            ));
        }
        assert_eq!(batch.changes.len(), MAX_CHANGES);
        assert!(batch.dropped);
        let mut rescan = Batch::default();
        rescan.add(Ok(
            notify::Event::new(EventKind::Other).set_flag(Flag::Rescan)
        ));
        assert!(rescan.dropped && rescan.changes.is_empty());
    }
}
