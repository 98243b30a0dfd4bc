//! One managed process: what it was started as, its state (output log, exit, tree, input
//! wait) and what the `process/*` methods ask of it. Its background tasks are in
//! `super::tasks`.
//!
//! Invariants: `state` is never held across an await; every change a reader or the delivery
//! may wait for bumps `changed`. A process is exited once its
//! log has an exit, closed once its outputs ended too, and removable (its id freed after the
//! retention) once closed with its tree gone; the tree is killed at most for the first reason
//! given (`kill_reason`) and never again once it is gone.

use super::output::{Event, OutputLog, ReadSnapshot, Record, Retention};
use super::store::{Entry, Store};
use super::{stdin, ProcessError};
use crate::launcher::sandboxed::Sandboxed;
use crate::launcher::tree;
use crate::os::proc_tree::descendants;
use crate::sandbox::denial::Scanner;
use bytes::Bytes;
use exec_server_protocol::process::{
    ExitReason, OnRetentionFull, ProcessInfo, ProcessSignal, ProcessUsage, RetentionStatus,
    SandboxType, StartParams, StartResult, TerminalSize, WriteStatus,
};
use nix::sys::signal::Signal;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Output one `process/read` returns when it asks for no `maxBytes` (then `nextSeq` says where
/// to go on): retention is far larger than a reply should be.
const READ_MAX_BYTES: usize = 4 * 1024 * 1024;

/// How long the `terminate` signal leaves a tree to end by itself before it is killed: long
/// enough for a program to save its state, short enough for an agent waiting on it.
const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// What a process was started with: what an idempotent repeat is compared with, and what
/// `process/list` shows.
pub(crate) struct Origin {
    /// As the client sent them, without what does not make a start different
    /// ([`Origin::identity`]).
    pub params: StartParams,
    pub sandbox_type: SandboxType,
    /// Started with `idempotent`: remembered after the process is removed.
    pub idempotent: bool,
}

impl Origin {
    /// `params` without `trace` (a retry may carry another span) and `idempotent`, and
    /// `onRetentionFull` only when it is not the default (which is the same start).
    pub(crate) fn identity(params: &StartParams) -> StartParams {
        StartParams {
            trace: None,
            idempotent: false,
            on_retention_full: params
                .on_retention_full
                .filter(|mode| *mode != OnRetentionFull::Evict),
            ..params.clone()
        }
    }
}

pub(crate) struct ManagedProcess {
    pub id: String,
    /// Its start's params (`tty` among them).
    pub(super) origin: Origin,
    /// The program's process.
    pub(super) pid: i32,
    started_at: SystemTime,
    pub(super) exited_at: OnceLock<SystemTime>,
    /// The supervisor holding the tree, and the orders to it.
    pub(super) supervisor_pid: i32,
    pub(super) orders: tree::Orders,
    /// When the program started, for its wall time.
    pub(super) started: Instant,
    /// Why the daemon killed the tree, if it did: the first reason wins.
    pub(super) kill_reason: OnceLock<ExitReason>,
    pub(super) state: Mutex<ProcessState>,
    /// Bumped on every new event, so long-polls and delivery wake up.
    pub(super) changed: watch::Sender<()>,
    /// Bumped when the client proved receipt of output, so a reader waiting for it resumes.
    pub(super) drained: watch::Sender<()>,
    pub(super) stdin: stdin::Stdin,
    pty_size: Option<stdin::PtyResizer>,
    /// Released (placeholders removed) once the process has exited.
    pub(super) sandbox: Mutex<Option<Sandboxed>>,
    /// Its output and journal.
    pub(super) store: Arc<Store>,
    /// Readers following the output outside any connection ([`ManagedProcess::follow`]).
    followers: Mutex<usize>,
}

/// A reader following a process's output: while one lives, output it has not received is not
/// evicted (the process waits when retention is full), as for an attached connection.
pub(crate) struct Following(Arc<ManagedProcess>);

impl Drop for Following {
    fn drop(&mut self) {
        let process = &self.0;
        let mut followers = process.followers.lock().unwrap();
        *followers -= 1;
        if *followers == 0 {
            process.state.lock().unwrap().log.set_followed(false);
            // A reader waiting for receipt may evict and go on now.
            process.drained.send_replace(());
        }
    }
}

pub(super) struct ProcessState {
    pub(super) log: OutputLog,
    pub(super) open_streams: u8,
    /// Every process of the tree is gone (or the supervisor is, which could not say).
    pub(super) tree_gone: bool,
    /// The supervisor could not confirm that a killed tree is gone.
    pub(super) cleanup_unconfirmed: bool,
    /// The tree's usage as last reported.
    pub(super) usage: Option<ProcessUsage>,
    /// Present for sandboxed processes: decides `sandboxDenied` at exit.
    pub(super) denial: Option<Scanner>,
    /// When output or input last came.
    pub(super) last_activity: Instant,
    pub(super) input_wait: InputWait,
    /// Output readers waiting for the client to receive what is retained.
    pub(super) paused_readers: u8,
}

/// Where the process stands on waiting for input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum InputWait {
    /// Not waiting, or not yet found waiting since the last output or input.
    #[default]
    No,
    /// Waiting since after this seq; `notified` once `process/inputWait` went out.
    Since { after_seq: u64, notified: bool },
}

/// What a process is made of, however it came to this daemon: launched by it
/// (`super::start`) or adopted from a predecessor (`super::adopt`).
pub(super) struct Parts {
    pub(super) origin: Origin,
    pub(super) pid: i32,
    pub(super) supervisor_pid: i32,
    pub(super) orders: tree::Orders,
    /// When the program started (under a predecessor, for an adopted one).
    pub(super) started_at: SystemTime,
    /// Its output so far (none for a new process).
    pub(super) log: OutputLog,
    /// Its outputs being read.
    pub(super) open_streams: usize,
    pub(super) denial: Option<Scanner>,
    /// None: it has no stdin, or it was closed.
    pub(super) stdin: Option<OwnedFd>,
    pub(super) writes: Writes,
    /// A terminal's master, for resizing.
    pub(super) master: Option<OwnedFd>,
    pub(super) sandbox: Option<Sandboxed>,
    pub(super) store: Arc<Store>,
}

/// The stdin writes a predecessor accepted (by id), and those of them it had not begun to
/// write (written first); none for a new process.
#[derive(Default)]
pub(super) struct Writes {
    pub(super) accepted: Vec<String>,
    pub(super) pending: Vec<(String, Bytes)>,
}

impl ManagedProcess {
    /// The process `parts` make; its caller puts it in the table and starts its tasks.
    pub(super) fn new(parts: Parts) -> Arc<Self> {
        let Parts {
            origin,
            pid,
            supervisor_pid,
            orders,
            started_at,
            log,
            open_streams,
            denial,
            stdin,
            writes,
            master,
            sandbox,
            store,
        } = parts;
        let running_for = started_at.elapsed().unwrap_or_default();
        Arc::new(Self {
            id: origin.params.process_id.clone(),
            origin,
            pid,
            started_at,
            exited_at: Default::default(),
            supervisor_pid,
            orders,
            started: Instant::now()
                .checked_sub(running_for)
                .unwrap_or_else(Instant::now),
            kill_reason: Default::default(),
            state: Mutex::new(ProcessState::new(log, open_streams, denial)),
            changed: watch::channel(()).0,
            drained: watch::channel(()).0,
            stdin: stdin::Stdin::new(stdin, store.clone(), writes.accepted, writes.pending),
            pty_size: master.map(stdin::PtyResizer::new),
            sandbox: Mutex::new(sandbox),
            store,
            followers: Mutex::new(0),
        })
    }

    /// The program's OS pid.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// What it was started with.
    pub(crate) fn params(&self) -> &StartParams {
        &self.origin.params
    }

    /// Follows the output (see [`Following`]) until the guard is dropped.
    pub(crate) fn follow(self: &Arc<Self>) -> Following {
        let mut followers = self.followers.lock().unwrap();
        *followers += 1;
        if *followers == 1 {
            self.state.lock().unwrap().log.set_followed(true);
        }
        Following(self.clone())
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// Chunks are loaded outside the lock, so a long read never holds up the output; one
    /// evicted meanwhile (its space freed) is left out, and the read says it is truncated
    /// unless the client had received it.
    pub(crate) fn read(&self, after_seq: u64, max_bytes: Option<usize>) -> ReadSnapshot {
        let snapshot = {
            let mut state = self.state.lock().unwrap();
            let snapshot = state.log.read(after_seq, max_bytes, READ_MAX_BYTES);
            state.journal_unjournaled(&self.store);
            snapshot
        };
        let loaded: Vec<_> = snapshot
            .chunks
            .iter()
            .map(|chunk| self.store.load(chunk.stream, chunk.span))
            .collect();
        let (first_retained, lost) = {
            let log = &self.state.lock().unwrap().log;
            (log.first_retained_seq(), log.lost_after(after_seq))
        };
        let mut loaded = loaded.into_iter();
        snapshot.load(
            |chunk| loaded.next().filter(|_| chunk.seq >= first_retained),
            lost,
        )
    }

    /// Every event so far was handed to a connection.
    pub(crate) fn delivered_all(&self) -> bool {
        self.state.lock().unwrap().log.delivered_all()
    }

    /// As stored: the caller loads each chunk outside the lock (`Store::load_into`), which is
    /// safe because while a connection is attached, a chunk not yet delivered is never evicted.
    pub(super) fn undelivered(&self, limit: usize) -> Vec<Event> {
        let mut state = self.state.lock().unwrap();
        let events = state.log.undelivered(limit);
        state.journal_unjournaled(&self.store);
        events
    }

    pub(super) fn mark_delivered(&self, seq: u64) {
        self.state.lock().unwrap().log.mark_delivered(seq);
    }

    /// The client proved it has every event up to `seq`: their output may be evicted.
    pub(crate) fn mark_received(&self, seq: u64) {
        self.state.lock().unwrap().log.mark_received(seq);
        self.drained.send_replace(());
    }

    /// The attached connection acknowledged the events sent to it, `from` `through` a seq.
    pub(super) fn mark_acknowledged(&self, from: u64, through: u64) {
        self.state
            .lock()
            .unwrap()
            .log
            .mark_acknowledged(from, through);
        self.drained.send_replace(());
    }

    /// Delivered output awaits proof of receipt: the connection should ask for it.
    pub(super) fn wants_receipt(&self) -> bool {
        self.state.lock().unwrap().log.wants_receipt()
    }

    /// `retention` (the log's, as of a read) with whether the output's reader waits.
    pub(crate) fn retention_status(&self, retention: Retention) -> RetentionStatus {
        RetentionStatus {
            retained_bytes: retention.retained_bytes,
            unreceived_bytes: retention.unreceived_bytes,
            paused: self.state.lock().unwrap().paused_readers > 0,
        }
    }

    pub(crate) fn is_exited(&self) -> bool {
        self.state.lock().unwrap().log.exit_code().is_some()
    }

    /// Kills the whole tree (however it detached), even after the process itself exited or
    /// closed, until the supervisor reported it gone. Returns whether the process itself had
    /// not exited yet.
    pub(crate) fn kill(&self, reason: ExitReason) -> bool {
        let running = !self.is_exited();
        if !self.state.lock().unwrap().tree_gone {
            let _ = self.kill_reason.set(reason);
            self.orders.kill();
        }
        running
    }

    pub(crate) fn signal(self: &Arc<Self>, signal: ProcessSignal) -> Result<(), ProcessError> {
        let signal = match signal {
            ProcessSignal::Interrupt => Signal::SIGINT,
            ProcessSignal::Terminate => {
                self.terminate_gracefully();
                return Ok(());
            }
            // A kill is for the whole tree, as `process/terminate`.
            ProcessSignal::Kill => {
                self.kill(ExitReason::Terminated);
                return Ok(());
            }
            ProcessSignal::Hangup => Signal::SIGHUP,
            ProcessSignal::Quit => Signal::SIGQUIT,
        };
        if !self.is_exited() {
            self.orders.signal(signal);
        }
        Ok(())
    }

    /// SIGTERM to every process of the tree, however it detached, also after the process
    /// itself exited; what is left of the tree after [`TERMINATE_GRACE`] is killed
    /// (`reason: "terminated"`).
    fn terminate_gracefully(self: &Arc<Self>) {
        if self.state.lock().unwrap().tree_gone {
            return;
        }
        self.orders.signal_tree(Signal::SIGTERM);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(TERMINATE_GRACE).await;
            if let Some(process) = weak.upgrade() {
                process.kill(ExitReason::Terminated);
            }
        });
    }

    pub(crate) fn write(&self, write_id: &str, data: Bytes) -> Result<WriteStatus, ProcessError> {
        let status = self.stdin.write(write_id, data)?;
        if status == WriteStatus::Accepted {
            self.state.lock().unwrap().activity();
        }
        Ok(status)
    }

    /// The process is found waiting for input (and has not exited).
    pub(crate) fn waiting_for_input(&self) -> bool {
        let state = self.state.lock().unwrap();
        state.input_wait != InputWait::No && state.log.exit_code().is_none()
    }

    /// The seq an input wait not yet notified follows, once every event up to it was
    /// delivered; [`ManagedProcess::input_wait_notified`] records that it went out.
    pub(super) fn input_wait_to_notify(&self) -> Option<u64> {
        let state = self.state.lock().unwrap();
        match state.input_wait {
            InputWait::Since {
                after_seq,
                notified: false,
            } if state.log.exit_code().is_none() => Some(after_seq),
            _ => None,
        }
    }

    pub(super) fn input_wait_notified(&self, after_seq: u64) {
        let mut state = self.state.lock().unwrap();
        if let InputWait::Since {
            after_seq: current,
            notified,
        } = &mut state.input_wait
        {
            if *current == after_seq {
                *notified = true;
            }
        }
    }

    pub(crate) fn close_stdin(&self) -> Result<(), ProcessError> {
        if self.stdin.close(self.origin.params.tty) {
            self.store.journal(&Entry::StdinClosed);
            if !self.origin.params.tty {
                self.orders.close_stdin();
            }
        }
        Ok(())
    }

    pub(crate) fn resize(&self, size: TerminalSize) -> Result<(), ProcessError> {
        match &self.pty_size {
            Some(resizer) => resizer.resize(size),
            None => Err(ProcessError::NoTerminal(self.id.clone())),
        }
    }

    /// Processes of the tree still running besides the process itself; None once the tree is
    /// gone. Counted from the supervisor down, through every thread's children.
    pub(crate) fn live_descendants(&self) -> Option<u32> {
        if self.state.lock().unwrap().tree_gone {
            return None;
        }
        let tree = descendants(self.supervisor_pid).len() as u32;
        // The process itself, until it is reaped.
        Some(tree.saturating_sub(u32::from(!self.is_exited())))
    }

    /// The result of an idempotent start that repeats this process's: the first start's, or
    /// the conflict naming the params that differ.
    pub(crate) fn repeat(&self, params: &StartParams) -> Result<StartResult, ProcessError> {
        let as_object = |params: &StartParams| match serde_json::to_value(params) {
            Ok(serde_json::Value::Object(object)) => object,
            _ => unreachable!("StartParams serialize as an object"),
        };
        let (first, again) = (
            as_object(&self.origin.params),
            as_object(&Origin::identity(params)),
        );
        let fields: std::collections::BTreeSet<&String> = first
            .keys()
            .chain(again.keys())
            .filter(|key| first.get(*key) != again.get(*key))
            .collect();
        if !fields.is_empty() {
            return Err(ProcessError::StartConflict {
                id: self.id.clone(),
                fields: fields.into_iter().cloned().collect(),
            });
        }
        Ok(StartResult {
            process_id: self.id.clone(),
            sandbox_type: self.origin.sandbox_type,
            sandbox_backend: crate::sandbox::backend_for(self.origin.sandbox_type),
            existing: true,
        })
    }

    pub(super) fn lifecycle(&self) -> exec_server_protocol::process::ProcessState {
        self.state.lock().unwrap().lifecycle()
    }

    pub(super) fn info(&self) -> ProcessInfo {
        let rfc3339 = |time| humantime::format_rfc3339_millis(time).to_string();
        let (next_seq, first_retained_seq, exit_code, usage, state, retention) = {
            let state = self.state.lock().unwrap();
            let log = &state.log;
            let (next, first) = (log.next_seq(), log.first_retained_seq());
            (
                next,
                first,
                log.exit_code(),
                log.exit_usage(),
                state.lifecycle(),
                log.retention(),
            )
        };
        let params = &self.origin.params;
        ProcessInfo {
            process_id: self.id.clone(),
            argv: params.argv.clone(),
            cwd: params.cwd.clone(),
            pid: self.pid,
            tty: self.origin.params.tty,
            sandbox_type: self.origin.sandbox_type,
            state,
            exit_code,
            started_at: rfc3339(self.started_at),
            exited_at: exit_code.and(self.exited_at.get().copied()).map(rfc3339),
            next_seq,
            first_retained_seq,
            live_descendants: self.live_descendants(),
            limits: params.limits.clone(),
            usage,
            retention: self.retention_status(retention),
        }
    }

    /// The process exited, its output closed, and its tree is gone.
    pub(crate) fn is_finished(&self) -> bool {
        self.state.lock().unwrap().removable()
    }

    /// Resolves once the process has exited, its output closed, and its tree is gone.
    pub(crate) async fn wait_finished(&self) {
        let mut changes = self.subscribe();
        while !self.state.lock().unwrap().removable() {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
}

impl ProcessState {
    fn new(log: OutputLog, open_streams: usize, denial: Option<Scanner>) -> Self {
        Self {
            log,
            open_streams: open_streams as u8,
            tree_gone: false,
            cleanup_unconfirmed: false,
            usage: None,
            denial,
            last_activity: Instant::now(),
            input_wait: InputWait::No,
            paused_readers: 0,
        }
    }

    /// Running, exited, or closed (exited and its output ended).
    pub(super) fn lifecycle(&self) -> exec_server_protocol::process::ProcessState {
        use exec_server_protocol::process::ProcessState as S;
        match (self.log.exit_code(), self.log.is_closed()) {
            (None, _) => S::Running,
            (Some(_), false) => S::Exited,
            (Some(_), true) => S::Closed,
        }
    }

    /// The process `id` exited and its output ended.
    pub(super) fn record_closed(&mut self, id: &str, store: &Store) {
        if let Some(record) = self.log.record_closed() {
            self.journal(store, record);
        }
        store.closed(self.log.retains_output());
        // The buffers its output passed through stay in the allocator (`memory`) until a trim.
        crate::memory::release_soon();
        tracing::info!(process = %id, "process closed");
    }

    /// Evicts what the log may (see `OutputLog::evict`), freeing its space and journaling it;
    /// true while the reader must wait.
    pub(super) fn evict(&mut self, attached: bool, store: &Store) -> bool {
        let mut evicted = Vec::new();
        let must_wait = self.log.evict(attached, &mut evicted);
        if let Some(last) = evicted.last() {
            self.journal(store, Record::Evicted { through: last.seq });
            store.release(&evicted);
        }
        must_wait
    }

    /// Journals `record` after the log's last chunk if that is not journaled yet, so that the
    /// journal stays in seq order.
    pub(super) fn journal(&mut self, store: &Store, record: Record) {
        self.journal_unjournaled(store);
        store.journal(&Entry::Log(record));
    }

    /// Journals the log's last chunk if it is not yet: a reader is about to see it.
    pub(super) fn journal_unjournaled(&mut self, store: &Store) {
        if let Some(record) = self.log.take_unjournaled() {
            store.journal(&Entry::Log(record));
        }
    }

    /// Output or input came: any wait for input is over.
    pub(super) fn activity(&mut self) {
        self.last_activity = Instant::now();
        self.input_wait = InputWait::No;
    }

    /// Closed, and nothing of its tree left: the id may be freed after the retention.
    pub(super) fn removable(&self) -> bool {
        self.log.is_closed() && self.tree_gone
    }
}
