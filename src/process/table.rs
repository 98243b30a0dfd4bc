//! A session's table of processes, keyed by client-chosen ids.
//!
//! Invariants: an id is in the table from the start that reserves it (`Slot::Starting`, with
//! a token telling this start from a later one) until the retention after its process closed
//! and its tree is gone; a terminate or a closing table removes a reservation, and the start
//! that finds its token gone kills what it launched. Once `closed`, no start adds a process.
//! Every change to a reservation bumps `settled`, on which an idempotent repeat waits.

use super::delivery::Attachment;
use super::managed::{ManagedProcess, Origin};
use super::output::OutputLog;
use super::store::{self, Kept, Meta};
use super::{forgotten, live, AdoptError, ProcessError, Timing};
use crate::config::Config;
use crate::launcher::sandboxed::Launch;
use crate::launcher::spec::LaunchSpec;
use exec_server_protocol::process::{
    ExitReason, OnRetentionFull, ProcessInfo, StartParams, StartResult,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

pub(crate) enum Lookup {
    Unknown,
    Starting,
    Ready(Arc<ManagedProcess>),
}

enum Slot {
    /// Reserved while the child is being launched; the token tells this start from a later one.
    Starting(u64),
    Ready(Arc<ManagedProcess>),
}

pub(crate) struct ProcessTable {
    inner: Arc<TableInner>,
}

#[derive(Default)]
struct Slots {
    map: HashMap<String, Slot>,
    /// Set when the table's processes were killed for good (session expiry, shutdown): no
    /// start may add one after that pass.
    closed: bool,
    /// Idempotent starts whose processes were removed.
    forgotten: forgotten::Forgotten,
}

/// The table's state, shared with its processes' tasks (which hold it weakly).
pub(super) struct TableInner {
    slots: Mutex<Slots>,
    /// Bumped whenever a start in progress ends (ready, failed or cancelled), so an idempotent
    /// repeat waiting on it looks again.
    settled: watch::Sender<()>,
    pub(super) config: Arc<Config>,
    pub(super) attachment: watch::Receiver<Option<Attachment>>,
    next_token: AtomicU64,
    pub(super) session_id: String,
    /// Where processes are kept across a restart of the daemon (None: not kept).
    pub(super) spares: Option<Arc<store::Spares>>,
    /// Live processes of this session (`live`).
    pub(super) live: Arc<AtomicUsize>,
}

impl ProcessTable {
    /// The processes of session `session_id`, kept in the state directory when there is one
    /// (`spares` are made there).
    pub(crate) fn new(
        config: Arc<Config>,
        attachment: watch::Receiver<Option<Attachment>>,
        session_id: String,
        spares: Option<Arc<store::Spares>>,
    ) -> Self {
        Self {
            inner: Arc::new(TableInner {
                slots: Mutex::new(Slots::default()),
                settled: watch::channel(()).0,
                config,
                attachment,
                next_token: AtomicU64::new(1),
                session_id,
                spares,
                live: Default::default(),
            }),
        }
    }

    /// Adopts the process a predecessor daemon kept in `dir` (see `store`), started as `meta`
    /// says, with its tree if that still runs.
    pub(crate) async fn adopt(&self, kept: Kept, meta: Meta) -> Result<(), AdoptError> {
        self.inner.clone().adopt(kept, meta).await
    }

    pub(crate) fn lookup(&self, id: &str) -> Lookup {
        match self.inner.slots.lock().unwrap().map.get(id) {
            None => Lookup::Unknown,
            Some(Slot::Starting(_)) => Lookup::Starting,
            Some(Slot::Ready(process)) => Lookup::Ready(process.clone()),
        }
    }

    /// The process `id`, once a start of it in progress has ended; None when there is none.
    pub(crate) async fn settled(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        let mut settled = self.inner.settled.subscribe();
        loop {
            match self.lookup(id) {
                Lookup::Unknown => return None,
                Lookup::Ready(process) => return Some(process),
                Lookup::Starting => {
                    // The table outlives every waiter, so the sender does too.
                    let _ = settled.changed().await;
                }
            }
        }
    }

    /// The result of an idempotent start that repeats one whose process was removed since:
    /// None when there was none.
    pub(crate) fn repeat_forgotten(
        &self,
        params: &StartParams,
    ) -> Option<Result<StartResult, ProcessError>> {
        let id = &params.process_id;
        let slots = self.inner.slots.lock().unwrap();
        Some(match slots.forgotten.find(id, &Origin::identity(params))? {
            forgotten::Found::Same(sandbox_type) => Ok(StartResult {
                process_id: id.clone(),
                sandbox_type,
                sandbox_backend: crate::sandbox::backend_for(sandbox_type),
                existing: true,
            }),
            forgotten::Found::Different => Err(ProcessError::StartConflict {
                id: id.clone(),
                fields: Vec::new(),
            }),
        })
    }

    /// The state of every process of the table (what `process/list` shows, without the rest).
    pub(crate) fn lifecycles(&self) -> Vec<exec_server_protocol::process::ProcessState> {
        let processes = self.inner.slots.lock().unwrap().ready();
        processes
            .iter()
            .map(|process| process.lifecycle())
            .collect()
    }

    /// Every process of the table, by id.
    /// Every process started (and not yet removed), in no order.
    pub(crate) fn processes(&self) -> Vec<Arc<ManagedProcess>> {
        self.inner.slots.lock().unwrap().ready()
    }

    pub(crate) fn list(&self) -> Vec<ProcessInfo> {
        let mut processes = self.inner.slots.lock().unwrap().ready();
        processes.sort_by(|a, b| a.id.cmp(&b.id));
        processes.iter().map(|process| process.info()).collect()
    }

    /// Reserves `id`, launches the child and starts its reader, supervision and delivery
    /// tasks. With a sandbox `launch`, the supervisor is the sandbox helper. Runs to its end
    /// even when the request is cancelled (its connection dropped), so that a launched tree is
    /// always tracked (and killed with its session) or killed at once, never left behind.
    /// Its events are pushed once `replied` resolves (Ok or Err): a client hears of a process
    /// only after the reply that started it.
    pub(crate) async fn start(
        &self,
        origin: Origin,
        spec: LaunchSpec,
        launch: Option<Launch>,
        timing: Timing,
        replied: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), ProcessError> {
        // In the launch span, so that its log lines carry the client's trace.
        tokio::spawn(tracing::Instrument::in_current_span(
            self.inner
                .clone()
                .start(origin, spec, launch, timing, replied),
        ))
        .await
        .map_err(ProcessError::StartTask)?
    }

    /// Kills the tree of a process still running, or cancels a start in progress. Returns
    /// whether the process was still running. After the exit it leaves the rest of the tree
    /// alone, as codex's server does: codex's agent terminates every command once it has read
    /// its exit, and a job the command put in the background (a dev server) must outlive that;
    /// `process/signal` `kill` still ends the whole tree then.
    pub(crate) fn terminate(&self, id: &str) -> bool {
        let mut slots = self.inner.slots.lock().unwrap();
        match slots.map.get(id) {
            None => false,
            Some(Slot::Starting(_)) => {
                slots.map.remove(id);
                self.inner.settled.send_replace(());
                true
            }
            Some(Slot::Ready(process)) if process.is_exited() => false,
            Some(Slot::Ready(process)) => {
                let process = process.clone();
                drop(slots);
                process.kill(ExitReason::Terminated)
            }
        }
    }

    /// Kills every tree for good (session expiry, daemon shutdown: `reason`), cancels starts in
    /// progress and refuses later ones; returns the processes, so the caller can wait until
    /// their trees are gone.
    pub(crate) fn kill_all(&self, reason: ExitReason) -> Vec<Arc<ManagedProcess>> {
        let mut slots = self.inner.slots.lock().unwrap();
        slots.closed = true;
        slots.map.retain(|_, slot| matches!(slot, Slot::Ready(_)));
        self.inner.settled.send_replace(());
        let processes = slots.ready();
        drop(slots);
        for process in &processes {
            process.kill(reason);
        }
        processes
    }
}

impl Slots {
    /// The processes started (not those still starting).
    fn ready(&self) -> Vec<Arc<ManagedProcess>> {
        self.map
            .values()
            .filter_map(|slot| match slot {
                Slot::Ready(process) => Some(process.clone()),
                Slot::Starting(_) => None,
            })
            .collect()
    }
}

/// A start's hold on its id: its token, and its count among the live processes.
pub(super) struct Reservation {
    pub(super) token: u64,
    pub(super) live: live::Live,
}

impl TableInner {
    /// Reserves `id` for a start, unless the table is closed, has `id`, or is at a cap on live
    /// processes; an idempotent start of `id` is no longer remembered from then on.
    pub(super) fn reserve(&self, id: &str) -> Result<Reservation, ProcessError> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap();
        if slots.closed {
            return Err(ProcessError::SessionClosing);
        }
        if slots.map.contains_key(id) {
            return Err(ProcessError::Exists(id.to_owned()));
        }
        let live = live::Live::start(&self.live, &self.config)?;
        slots.forgotten.forget(id);
        slots.map.insert(id.to_owned(), Slot::Starting(token));
        Ok(Reservation { token, live })
    }

    /// A start of `id` failed: its id is free again.
    pub(super) fn unreserve(&self, id: &str) {
        self.slots.lock().unwrap().map.remove(id);
        self.settled.send_replace(());
    }

    /// Puts a started process in the place its start reserved; false when that start was
    /// cancelled meanwhile (then the caller kills it).
    pub(super) fn fill(&self, token: u64, process: &Arc<ManagedProcess>) -> bool {
        let mut slots = self.slots.lock().unwrap();
        match slots.map.get(&process.id) {
            Some(Slot::Starting(current)) if *current == token => {
                let ready = Slot::Ready(process.clone());
                slots.map.insert(process.id.clone(), ready);
                drop(slots);
                self.settled.send_replace(());
                true
            }
            _ => false,
        }
    }

    /// Puts a process adopted after a restart in the table (before any client can use it).
    pub(super) fn insert_adopted(&self, process: &Arc<ManagedProcess>) {
        let ready = Slot::Ready(process.clone());
        self.slots
            .lock()
            .unwrap()
            .map
            .insert(process.id.clone(), ready);
    }

    /// An empty output log, retaining what the daemon's config says, for a process started
    /// with `params`.
    pub(super) fn output_log(&self, params: &StartParams) -> OutputLog {
        OutputLog::new(
            self.config.output_retention_bytes,
            self.config.output_retention_chunks,
            params.on_retention_full == Some(OnRetentionFull::Pause),
        )
    }

    /// Frees the id once the retention after close has passed.
    pub(super) fn schedule_removal(self: Arc<Self>, process: &Arc<ManagedProcess>) {
        let weak = Arc::downgrade(process);
        let retention = self.config.exited_retention;
        let table = Arc::downgrade(&self);
        tokio::spawn(async move {
            tokio::time::sleep(retention).await;
            let (Some(table), Some(process)) = (table.upgrade(), weak.upgrade()) else {
                return;
            };
            let mut slots = table.slots.lock().unwrap();
            if matches!(slots.map.get(&process.id), Some(Slot::Ready(p)) if Arc::ptr_eq(p, &process))
            {
                slots.map.remove(&process.id);
                let origin = &process.origin;
                if origin.idempotent {
                    let (id, params) = (&process.id, &origin.params);
                    slots.forgotten.remember(id, params, origin.sandbox_type);
                }
                crate::memory::release_soon();
            }
        });
    }
}
