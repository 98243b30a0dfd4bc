//! `fs/watch` / `fs/unwatch` and the `fs/changed` notification.
//!
//! Each watch owns a `notify` watcher (inotify on Linux). Its callback thread pushes into a
//! bounded queue; a task drains it, coalesces what arrives within a short window into one
//! notification, and says so when anything was lost (queue full, notification cap, kernel
//! overflow). Watches are per connection and end with it. [`start_watcher`] is also envd's
//! (`crate::envd`), so both listeners' watchers share one budget.

use super::host::{blocking, with_path};
use super::FsError;
use crate::rpc::outbound::Outbound;
use exec_server_protocol::fs::{Change, ChangeKind, ChangedNotification};
use exec_server_protocol::rpc::method;
use exec_server_protocol::PathUri;
use notify::event::{EventKind, Flag, ModifyKind};
use notify::{RecursiveMode, Watcher as _};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Watches per connection (or envd listener); each holds an inotify instance, of which the
/// user has /proc/sys/fs/inotify/max_user_instances shared with every other process.
pub(crate) const MAX_WATCHES: usize = 32;
/// Events queued between the watcher thread and the forwarding task.
const QUEUE: usize = 4096;
/// Changes in one notification; more within the window are dropped and flagged.
pub(super) const MAX_CHANGES: usize = 1024;
/// How long changes are gathered into one notification after the first arrives.
const COALESCE: Duration = Duration::from_millis(50);

/// What watches hold, in one scope (the daemon, a connection, an envd listener): watchers
/// (inotify instances) and the directories they watch (inotify watches, of which the user has
/// /proc/sys/fs/inotify/max_user_watches shared with every other process).
#[derive(Clone, Default)]
pub(crate) struct WatchUse {
    watchers: Arc<AtomicUsize>,
    directories: Arc<AtomicUsize>,
}

/// How much of each a scope may hold.
#[derive(Clone, Copy)]
pub(crate) struct WatchLimits {
    pub watchers: usize,
    pub directories: usize,
}

/// One count taken in a [`WatchUse`], given back when it is dropped.
struct Counted {
    of: Arc<AtomicUsize>,
    count: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.of.fetch_sub(self.count, Ordering::AcqRel);
    }
}

/// Takes `count` more of `of`, unless that would exceed `limit`; `Err` has what is in use.
fn take(of: &Arc<AtomicUsize>, count: usize, limit: usize) -> Result<Counted, usize> {
    of.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
        used.checked_add(count).filter(|&total| total <= limit)
    })?;
    Ok(Counted {
        of: of.clone(),
        count,
    })
}

impl WatchUse {
    /// Counts one watcher (`what`) of `directories` more, unless that exceeds `limits`.
    fn count(
        &self,
        what: &str,
        directories: usize,
        limits: WatchLimits,
        scope: &str,
    ) -> Result<[Counted; 2], FsError> {
        let watcher = take(&self.watchers, 1, limits.watchers).map_err(|_| {
            FsError::refused(format!(
                "at most {} watches may be open {scope}",
                limits.watchers
            ))
        })?;
        let directories =
            take(&self.directories, directories, limits.directories).map_err(|used| {
                FsError::bad_params(format!(
                    "{what} would exceed the limit of {} watched directories {scope}: the tree \
                     has at least {directories} and {used} are in use; watch a smaller tree, or \
                     unwatch others",
                    limits.directories
                ))
            })?;
        Ok([watcher, directories])
    }
}

/// The directories a watch of `path` adds, stopping once past `limit` (the walk is bounded by
/// the budget, not by the tree). Symlinks are not followed, as the watcher does not.
fn directories_under(path: &Path, recursive: bool, limit: usize) -> usize {
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

/// The daemon's watches (every listener's: `fs/watch` and envd's) and the limits of the daemon
/// and of each connection; one budget, so neither listener can take what the other needs.
#[derive(Clone)]
pub(crate) struct WatchBudget {
    pub daemon: WatchUse,
    pub daemon_limits: WatchLimits,
    pub connection_limits: WatchLimits,
}

/// A running watcher, counted in its connection and the daemon until it is dropped.
pub(crate) struct Watcher {
    watcher: notify::RecommendedWatcher,
    _counted: [[Counted; 2]; 2],
    /// Disconnected once the watcher's thread has closed its inotify instance (it drops the
    /// handler, which holds the sender, only then).
    closed: std::sync::mpsc::Receiver<()>,
}

/// The longest [`Watcher::close`] waits for the watcher's thread.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

impl Watcher {
    /// Ends the watch and waits until its inotify instance is closed. Dropping a watcher only
    /// asks its thread to close the instance, so a client replacing a watch in a loop would
    /// otherwise pile up instances faster than the threads close them, past the user's
    /// `max_user_instances` (EMFILE for every watcher on the host). Blocking.
    pub(crate) fn close(self) {
        let Self {
            watcher, closed, ..
        } = self;
        drop(watcher);
        let _ = closed.recv_timeout(CLOSE_WAIT);
    }
}

/// A watcher's event handler, with the sender that tells [`Watcher::close`] its thread is done.
struct Handler<H> {
    handler: H,
    _done: std::sync::mpsc::SyncSender<()>,
}

impl<H: notify::EventHandler> notify::EventHandler for Handler<H> {
    fn handle_event(&mut self, event: notify::Result<notify::Event>) {
        self.handler.handle_event(event);
    }
}

/// Starts one watcher of `paths` (for `what`, as its refusals name it) whose events go to
/// `handler`, if `connection` and the daemon have room for it and the directories it watches,
/// counted before any watch is added (so an over-budget tree costs none). Symbolic links are not
/// followed. Blocking.
pub(crate) fn start_watcher(
    what: &str,
    paths: &[PathBuf],
    recursive: bool,
    budget: &WatchBudget,
    connection: &WatchUse,
    handler: impl notify::EventHandler,
) -> Result<Watcher, FsError> {
    let walk_limit = (budget.daemon_limits.directories).min(budget.connection_limits.directories);
    let mut directories = 0;
    for path in paths {
        // Report a missing path as the usual -32004 I/O error.
        with_path(std::fs::symlink_metadata(path), path)?;
        directories += directories_under(path, recursive, walk_limit);
    }
    let counted = [
        connection.count(
            what,
            directories,
            budget.connection_limits,
            "per connection",
        )?,
        (budget.daemon).count(what, directories, budget.daemon_limits, "for the daemon")?,
    ];
    let config = notify::Config::default().with_follow_symlinks(false);
    let (done, closed) = std::sync::mpsc::sync_channel(0);
    let handler = Handler {
        handler,
        _done: done,
    };
    let mut watcher = notify::RecommendedWatcher::new(handler, config).map_err(watch_error)?;
    let mode = if recursive {
        RecursiveMode::Recursive
    } else {
        RecursiveMode::NonRecursive
    };
    for path in paths {
        watcher.watch(path, mode).map_err(watch_error)?;
    }
    Ok(Watcher {
        watcher,
        _counted: counted,
        closed,
    })
}

struct Watch {
    /// Taken out by `fs/unwatch`, which closes it before replying.
    watcher: Option<Watcher>,
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
    used: WatchUse,
}

impl Watches {
    /// What this connection's watches hold, which its missing-path watch shares.
    pub(super) fn used(&self) -> &WatchUse {
        &self.used
    }

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
        unused(&self.table(), &id)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        let flag = overflowed.clone();
        let connection = self.used.clone();
        let watcher = blocking(move || {
            let handler = move |event| {
                if tx.try_send(event).is_err() {
                    flag.store(true, Ordering::Relaxed);
                }
            };
            start_watcher(
                method::FS_WATCH,
                &[path],
                recursive,
                &budget,
                &connection,
                handler,
            )
        })
        .await?;
        let live = Arc::new(tokio::sync::Mutex::new(true));
        let forwarder = tokio::spawn(forward(id.clone(), rx, overflowed, outbound, live.clone()))
            .abort_handle();
        let watch = Watch {
            watcher: Some(watcher),
            live,
            forwarder,
        };
        // Checked again: another watch may have taken the id meanwhile.
        let mut table = self.table();
        unused(&table, &id)?;
        table.insert(id, watch);
        Ok(())
    }

    /// Idempotent, like `fs/close`.
    pub(super) async fn unwatch(&self, id: &str) {
        let Some(mut watch) = self.table().remove(id) else {
            return;
        };
        *watch.live.lock().await = false;
        if let Some(watcher) = watch.watcher.take() {
            let _ = tokio::task::spawn_blocking(move || watcher.close()).await;
        }
    }
}

fn unused(table: &HashMap<String, Watch>, id: &str) -> Result<(), FsError> {
    if table.contains_key(id) {
        return Err(FsError::refused(format!("watch `{id}` already exists")));
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
