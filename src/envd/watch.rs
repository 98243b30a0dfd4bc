//! envd's directory watches: `WatchDir` streams the events, `CreateWatcher` keeps them for
//! `GetWatcherEvents` to take. Each is a `notify` watcher (inotify), its events translated as
//! envd's fsnotify words them: create, write, chmod, remove, and rename (for the old name; the
//! new name is a create). Their watchers are `fs/watch`'s (`crate::fs::start_watcher`), in the
//! same budget.

use super::connect::{Code, ConnectError, StreamSender};
use super::messages::*;
use super::users::Account;
use super::Envd;
use crate::fs::FsError;
use axum::http::HeaderMap;
use notify::event::{EventKind, ModifyKind, RenameMode};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Events queued between the watcher's thread and a stream; more are dropped.
const QUEUE: usize = 4096;
/// Events a kept watcher holds until they are taken; older ones are dropped.
const KEPT: usize = 65536;

/// The kept watchers of a listener, by id.
#[derive(Default)]
pub(crate) struct Watchers {
    kept: Mutex<HashMap<String, Kept>>,
    /// This listener's watchers (kept ones and `WatchDir` streams), counted as one
    /// connection's: kept watchers outlive the HTTP connection that made them.
    used: crate::fs::WatchUse,
}

struct Kept {
    /// Dropping it stops the watch.
    _watcher: crate::fs::Watcher,
    events: Arc<Mutex<Vec<FilesystemEvent>>>,
}

impl Envd {
    /// A watcher of `path` for `account`, its events (as envd's) handed to `deliver`, counted
    /// in this listener's and the daemon's watch budget. Refused under a restricting
    /// `--envd-sandbox`, as `fs/watch` refuses a restricting sandbox: inotify has no sandbox
    /// rule, and a watch reports changes long after any check of its path.
    async fn watcher(
        &self,
        account: &Account,
        request: WatchRequest,
        mut deliver: impl FnMut(FilesystemEvent) + Send + 'static,
    ) -> Result<crate::fs::Watcher, ConnectError> {
        if self.confined(account)?.is_some() {
            return Err(ConnectError::new(
                Code::FailedPrecondition,
                "watches cannot be confined by a restricting --envd-sandbox; refusing to run \
                 one unconfined",
            ));
        }
        let path = account.resolve(&request.path);
        let (budget, used) = (self.daemon.watch_budget(), self.watchers.used.clone());
        super::entry::blocking(move || {
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    let message = format!("path {} not a directory", path.display());
                    return Err(ConnectError::new(Code::InvalidArgument, message));
                }
                Err(err) => {
                    let message = format!("path {} not found: {err}", path.display());
                    return Err(ConnectError::new(Code::NotFound, message));
                }
            }
            let root = path.clone();
            let include_entry = request.include_entry;
            let handler = move |event: notify::Result<notify::Event>| {
                let Ok(event) = event else { return };
                let Some(kind) = kind_of(&event.kind) else {
                    return;
                };
                for path in &event.paths {
                    deliver(event_of(&root, path, kind, include_entry));
                }
            };
            let what = "the watch";
            crate::fs::start_watcher(
                what,
                std::slice::from_ref(&path),
                request.recursive,
                &budget,
                &used,
                handler,
            )
            .map_err(|error| watch_error(&path, error))
        })
        .await
    }
}

/// The watch budget's refusals are `resource_exhausted`; the rest as envd words them.
fn watch_error(path: &Path, error: FsError) -> ConnectError {
    match error {
        FsError::Refused(message) | FsError::BadParams(message) => {
            ConnectError::new(Code::ResourceExhausted, message)
        }
        error => ConnectError::new(
            Code::Internal,
            format!("error adding path {} to watcher: {error}", path.display()),
        ),
    }
}

fn kind_of(kind: &EventKind) -> Option<EventType> {
    Some(match kind {
        EventKind::Create(_) => EventType::Create,
        EventKind::Remove(_) => EventType::Remove,
        EventKind::Modify(ModifyKind::Metadata(_)) => EventType::Chmod,
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => EventType::Rename,
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => EventType::Create,
        EventKind::Modify(ModifyKind::Name(_)) => return None,
        EventKind::Modify(_) => EventType::Write,
        EventKind::Access(_) | EventKind::Any | EventKind::Other => return None,
    })
}

fn event_of(root: &Path, path: &Path, kind: EventType, include_entry: bool) -> FilesystemEvent {
    let name = path.strip_prefix(root).unwrap_or(path);
    let carries_entry = matches!(
        kind,
        EventType::Create | EventType::Write | EventType::Chmod
    );
    FilesystemEvent {
        name: name.display().to_string(),
        kind: kind.into(),
        entry: (include_entry && carries_entry)
            .then(|| super::entry::entry_info(path).ok())
            .flatten(),
    }
}

impl Watchers {
    pub(super) fn events(&self, id: &str) -> Result<GetWatcherEventsResponse, ConnectError> {
        let kept = self.kept.lock().unwrap();
        let watcher = kept.get(id).ok_or_else(|| unknown(id))?;
        let events = std::mem::take(&mut *watcher.events.lock().unwrap());
        Ok(GetWatcherEventsResponse { events })
    }

    pub(super) fn remove(&self, id: &str) -> Result<Empty, ConnectError> {
        let removed = self.kept.lock().unwrap().remove(id);
        removed.map(|_| Empty {}).ok_or_else(|| unknown(id))
    }
}

fn unknown(id: &str) -> ConnectError {
    ConnectError::new(Code::NotFound, format!("watcher with id {id} not found"))
}

impl Envd {
    /// `CreateWatcher`: a watcher whose events are kept until `GetWatcherEvents` takes them.
    pub(super) async fn create_watcher(
        &self,
        account: &Account,
        request: WatchRequest,
    ) -> Result<WatcherId, ConnectError> {
        let events: Arc<Mutex<Vec<FilesystemEvent>>> = Default::default();
        let kept = events.clone();
        let watcher = self
            .watcher(account, request, move |event| {
                let mut events = kept.lock().unwrap();
                if events.len() < KEPT {
                    events.push(event);
                }
            })
            .await?;
        let id = format!("w{}", uuid::Uuid::new_v4().simple());
        let entry = Kept {
            _watcher: watcher,
            events,
        };
        self.watchers.kept.lock().unwrap().insert(id.clone(), entry);
        Ok(WatcherId { watcher_id: id })
    }

    /// `WatchDir`: a start event, then the events as they come, until the client goes.
    pub(super) async fn watch_dir(
        self: Arc<Self>,
        headers: HeaderMap,
        request: WatchRequest,
        events: StreamSender<WatchDirResponse>,
    ) -> Result<(), ConnectError> {
        let account = self.accounts.of_request(&headers)?;
        let (sender, mut receiver) = mpsc::channel(QUEUE);
        let _watcher = self
            .watcher(&account, request, move |event| {
                let _ = sender.try_send(event);
            })
            .await?;
        events.send(WatchEvent::Start(Empty {})).await?;
        let keepalive = super::process::keepalive(&headers);
        loop {
            tokio::select! {
                event = receiver.recv() => match event {
                    Some(event) => events.send(WatchEvent::Filesystem(Box::new(event))).await?,
                    None => return Err(ConnectError::new(Code::Internal, "watcher ended")),
                },
                _ = tokio::time::sleep(keepalive) => {
                    events.send(WatchEvent::Keepalive(Empty {})).await?;
                }
            }
        }
    }
}
