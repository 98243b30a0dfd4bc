//! `fs/watchMissing` and `fs/missingChanged`: codex's one watch per connection for paths that
//! do not exist yet (the paths it caches "not found" for), so it need not poll them.
//!
//! As codex's own server does: a newer `watchId` replaces the connection's watch, an older or
//! equal one changes nothing; `watching` is false, and nothing is watched, when a `missing` path
//! exists, `present` does not, there are no paths or more than [`MAX_MISSING`]. The watch covers
//! the nearest existing directory above each missing path and the directory holding `present`,
//! non-recursively, with one watcher counted in the connection's and the daemon's watch budget
//! like an `fs/watch` (beyond it: `watching: false`). It fires once, on any change to a missing
//! path, to a directory on the way to one, or to `present`, and is then over.

use super::watch::{start_watcher, WatchBudget, WatchUse, Watcher};
use crate::rpc::outbound::Outbound;
use exec_server_protocol::fs::{MissingChangedNotification, WatchMissingParams};
use exec_server_protocol::rpc::method;
use notify::event::{EventKind, Flag};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::mpsc;

/// Paths one watch may cover, as upstream allows.
pub(crate) const MAX_MISSING: usize = 64;

/// The connection's missing-path watch.
#[derive(Default)]
pub(super) struct MissingWatch {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The newest `watchId` asked for, which later requests must exceed.
    newest: Option<u64>,
    armed: Option<Armed>,
}

struct Armed {
    id: u64,
    /// Taken out by a replacing request, which closes it before opening its own.
    watcher: Option<Watcher>,
    forwarder: tokio::task::AbortHandle,
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

/// What one watch looks for, its paths lexically normalized (inotify names what it reports
/// by the watched directory, so `..` would never match).
#[derive(Clone)]
struct Paths {
    missing: Vec<PathBuf>,
    present: Option<PathBuf>,
}

impl Paths {
    fn from_params(params: &WatchMissingParams) -> Result<Self, super::FsError> {
        let host = |uri| super::host::host_path(uri).map(|path| crate::path::normalize(&path));
        Ok(Self {
            missing: params.missing.iter().map(host).collect::<Result<_, _>>()?,
            present: params.present.as_ref().map(host).transpose()?,
        })
    }

    /// Whether the paths are as the client described them.
    fn as_described(&self) -> bool {
        let exists = |path: &Path| std::fs::symlink_metadata(path).is_ok();
        !self.missing.iter().any(|path| exists(path)) && self.present.as_deref().is_none_or(exists)
    }

    /// The directories whose entries tell when a path appears or `present` goes.
    fn directories(&self) -> Vec<PathBuf> {
        let mut directories: Vec<PathBuf> = self
            .missing
            .iter()
            .filter_map(|path| nearest_directory(path))
            .chain(
                self.present
                    .as_deref()
                    .map(|present| present.parent().unwrap_or(present).to_path_buf()),
            )
            .collect();
        directories.sort();
        directories.dedup();
        directories
    }

    /// Whether a change to `path` may have made a missing path appear or `present` go.
    fn touched_by(&self, path: &Path) -> bool {
        self.present.as_deref() == Some(path)
            || self.missing.iter().any(|missing| missing.starts_with(path))
    }

    /// Whether `event` (or a loss of events) may have changed what the watch covers.
    fn fired_by(&self, event: &notify::Result<notify::Event>) -> bool {
        match event {
            Err(_) => true,
            Ok(event) if event.flag() == Some(Flag::Rescan) => true,
            Ok(event) if matches!(event.kind, EventKind::Access(_)) => false,
            Ok(event) => event.paths.iter().any(|path| self.touched_by(path)),
        }
    }
}

/// The nearest existing directory above `path`.
fn nearest_directory(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|dir| std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()))
        .map(Path::to_path_buf)
}

impl MissingWatch {
    /// `fs/watchMissing`: whether the paths are now watched.
    pub(super) async fn watch(
        &self,
        params: WatchMissingParams,
        used: &WatchUse,
        budget: WatchBudget,
        outbound: &Outbound,
    ) -> Result<bool, super::FsError> {
        let id = params.watch_id;
        let paths = Paths::from_params(&params)?;
        let replaced = {
            let mut state = lock(&self.state);
            if state.newest.is_some_and(|newest| id <= newest) {
                return Ok(false);
            }
            state.newest = Some(id);
            state
                .armed
                .take()
                .and_then(|mut armed| armed.watcher.take())
        };
        // Closed before anything else, a request that watches nothing included: otherwise
        // alternating such requests with real ones would pile up instances again.
        if let Some(replaced) = replaced {
            let _ = tokio::task::spawn_blocking(move || replaced.close()).await;
        }
        if paths.missing.is_empty() || paths.missing.len() > MAX_MISSING {
            return Ok(false);
        }
        let (fired, wake) = mpsc::channel(1);
        let used = used.clone();
        let watched = paths.clone();
        let started = super::host::blocking(move || {
            if !watched.as_described() {
                return Ok(None);
            }
            let seen = watched.clone();
            let fire = fired.clone();
            let handler = move |event| {
                if seen.fired_by(&event) {
                    let _ = fire.try_send(());
                }
            };
            let directories = watched.directories();
            let what = method::FS_WATCH_MISSING;
            let watcher = start_watcher(what, &directories, false, &budget, &used, handler)?;
            // A path that changed between the look and the watch fires at once.
            if !watched.as_described() {
                let _ = fired.try_send(());
            }
            Ok(Some(watcher))
        })
        .await;
        let watcher = match started {
            Ok(Some(watcher)) => watcher,
            Ok(None) => return Ok(false),
            // Over the budget, or the kernel would not: the client looks for itself.
            Err(err) => {
                tracing::debug!(watch_id = id, "fs/watchMissing not watching: {err}");
                return Ok(false);
            }
        };
        let mut state = lock(&self.state);
        // A newer request came meanwhile: it replaced this one.
        if state.newest != Some(id) {
            return Ok(false);
        }
        let state_of_watch = Arc::downgrade(&self.state);
        let forwarder = tokio::spawn(deliver(id, wake, outbound.clone(), state_of_watch));
        state.armed = Some(Armed {
            id,
            watcher: Some(watcher),
            forwarder: forwarder.abort_handle(),
        });
        Ok(true)
    }
}

/// Sends `fs/missingChanged` once the watch fires, and ends the watch. It holds the state
/// weakly: the state holds the watch, which aborts this task when the connection drops it.
async fn deliver(
    id: u64,
    mut wake: mpsc::Receiver<()>,
    outbound: Outbound,
    state: Weak<Mutex<State>>,
) {
    if wake.recv().await.is_none() {
        return;
    }
    let Some(state) = state.upgrade() else { return };
    // Taken out under the lock, so a watch already replaced says nothing.
    let armed = {
        let mut state = lock(&state);
        match &state.armed {
            Some(armed) if armed.id == id => state.armed.take(),
            _ => return,
        }
    };
    let notification = MissingChangedNotification { watch_id: id };
    let _ = outbound
        .notify(method::FS_MISSING_CHANGED, &notification)
        .await;
    // Dropping it ends the watcher and aborts this task, which has nothing left to do.
    drop(armed);
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poison| poison.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_on_the_way_to_a_missing_path_or_to_present_fires() {
        let paths = Paths {
            missing: vec![PathBuf::from("/w/a/b")],
            present: Some(PathBuf::from("/w/x/p")),
        };
        let create = |path: &str| {
            Ok(
                notify::Event::new(EventKind::Create(notify::event::CreateKind::Any))
                    .add_path(PathBuf::from(path)),
            )
        };
        assert!(paths.fired_by(&create("/w/a")));
        assert!(paths.fired_by(&create("/w/a/b")));
        assert!(paths.fired_by(&create("/w/x/p")));
        assert!(!paths.fired_by(&create("/w/ab")));
        assert!(!paths.fired_by(&create("/w/x/q")));
        assert!(!paths.fired_by(&create("/w/a/b/c")));
    }
}
