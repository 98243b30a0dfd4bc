//! The per-connection table of open `fs/open` handles. Each handle pins an open file, so a
//! path renamed or replaced mid-stream keeps serving the original. Dropping the table (the
//! connection ended) closes every file and discards uncommitted staged writes.

use super::write_stream::WriteHandle;
use crate::rpc::RpcError;
use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex};

/// Open handles per connection, of all modes together.
pub const MAX_OPEN_HANDLES: usize = 128;

pub enum Handle {
    Read(File),
    /// Writes hold the lock for their duration; `None` once closed while a write was queued.
    Write(Mutex<Option<WriteHandle>>),
}

#[derive(Default)]
pub struct Handles {
    table: Mutex<HashMap<String, Arc<Handle>>>,
}

impl Handles {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Handle>>> {
        // A poisoned lock still holds a consistent map: every update is a single insert/remove.
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Whether `id` could be inserted now; checked before opening so a full table costs nothing.
    pub fn check_room(&self, id: &str) -> Result<(), RpcError> {
        room(&self.table(), id)
    }

    pub fn insert(&self, id: String, handle: Handle) -> Result<(), RpcError> {
        let mut table = self.table();
        room(&table, &id)?;
        table.insert(id, Arc::new(handle));
        Ok(())
    }

    pub fn get(&self, id: &str) -> Option<Arc<Handle>> {
        self.table().get(id).cloned()
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Handle>> {
        self.table().remove(id)
    }
}

fn room(table: &HashMap<String, Arc<Handle>>, id: &str) -> Result<(), RpcError> {
    if table.contains_key(id) {
        return Err(RpcError::invalid_request(format!(
            "file read handle `{id}` already exists"
        )));
    }
    if table.len() >= MAX_OPEN_HANDLES {
        return Err(RpcError::invalid_request(format!(
            "at most {MAX_OPEN_HANDLES} file reads may be open per connection"
        )));
    }
    Ok(())
}
