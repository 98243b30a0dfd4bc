//! The per-connection table of open `fs/open` handles. Each handle pins an open file, so a
//! path renamed or replaced mid-stream keeps serving the original. Dropping the table (the
//! connection ended) closes every file and discards uncommitted staged writes.

use super::host::open_regular;
use super::sandbox::Confined;
use super::transfer::Transfer;
use super::write_stream::WriteHandle;
use super::FsError;
use exec_server_protocol::fs::OpenMode;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Open handles per connection, of all modes together.
pub(super) const MAX_OPEN_HANDLES: usize = 128;

pub(super) enum Handle {
    Read(File),
    /// Writes hold the lock for their duration; `None` once closed while a write was queued.
    Write(Mutex<Option<WriteHandle>>),
}

impl Handle {
    /// Opens `path` for a stream in `mode`: the same code in the daemon and, for a sandboxed
    /// open, in the helper.
    pub(super) fn open(path: &Path, mode: OpenMode, follow: bool) -> Result<Self, FsError> {
        Ok(match mode {
            OpenMode::Read => Handle::Read(open_regular(path, follow)?.0),
            mode => Handle::Write(Mutex::new(Some(WriteHandle::open(path, mode, follow)?))),
        })
    }

    /// The open file and how to rebuild the handle around it; None for a handle already
    /// closed (a fresh one never is).
    pub(super) fn into_transfer(self) -> Option<(File, Transfer)> {
        match self {
            Handle::Read(file) => Some((file, Transfer::Read)),
            Handle::Write(writer) => writer
                .into_inner()
                .unwrap_or_else(|poison| poison.into_inner())
                .map(|writer| {
                    let (file, transfer) = writer.into_transfer();
                    (file, Transfer::Write(transfer))
                }),
        }
    }

    /// Rebuilds a handle from the file a helper opened `confined` and passed back.
    pub(super) fn from_transfer(
        file: File,
        transfer: Transfer,
        confined: Confined,
    ) -> Result<Self, FsError> {
        Ok(match transfer {
            Transfer::Read => Handle::Read(file),
            Transfer::Write(transfer) => Handle::Write(Mutex::new(Some(
                WriteHandle::from_transfer(file, transfer, confined)?,
            ))),
        })
    }
}

#[derive(Default)]
pub(super) struct Handles {
    table: Mutex<Table>,
}

/// Open handles, and the ids of `fs/open` calls still opening: those hold a slot too, so a
/// burst of opens cannot overshoot the limit or race for one id (as upstream counts them).
#[derive(Default)]
struct Table {
    open: HashMap<String, Arc<Handle>>,
    opening: HashSet<String>,
}

/// A slot held by an `fs/open` in flight; released on drop unless filled.
pub(super) struct Reservation<'a> {
    handles: &'a Handles,
    /// None once filled.
    id: Option<String>,
}

impl Handles {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // A poisoned lock still holds a consistent table: every update is a single insert/remove.
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Holds a slot for `id` before anything is opened, so a full table costs nothing.
    pub(super) fn reserve(&self, id: String) -> Result<Reservation<'_>, FsError> {
        let mut table = self.table();
        if table.open.contains_key(&id) || table.opening.contains(&id) {
            return Err(FsError::refused(format!(
                "file handle `{id}` already exists"
            )));
        }
        if table.open.len() + table.opening.len() >= MAX_OPEN_HANDLES {
            return Err(FsError::refused(format!(
                "at most {MAX_OPEN_HANDLES} file handles may be open per connection"
            )));
        }
        table.opening.insert(id.clone());
        Ok(Reservation {
            handles: self,
            id: Some(id),
        })
    }

    pub(super) fn get(&self, id: &str) -> Option<Arc<Handle>> {
        self.table().open.get(id).cloned()
    }

    pub(super) fn remove(&self, id: &str) -> Option<Arc<Handle>> {
        self.table().open.remove(id)
    }
}

impl Reservation<'_> {
    pub(super) fn fill(mut self, handle: Handle) {
        let id = self.id.take().expect("a reservation is filled once");
        let mut table = self.handles.table();
        table.opening.remove(&id);
        table.open.insert(id, Arc::new(handle));
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            self.handles.table().opening.remove(id);
        }
    }
}
