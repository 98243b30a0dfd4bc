//! Managed processes: each session owns a table of them, keyed by client-chosen ids.

mod adopt;
mod delivery;
pub mod env;
mod error;
mod forgotten;
pub(crate) mod input_wait;
mod io;
mod live;
pub mod methods;
pub mod output;
mod stdin;
pub(crate) mod store;

pub(crate) use error::ProcessError;

use crate::config::Config;
use crate::ipc::message::{Hold, Report};
use crate::launcher::sandboxed::{Launch, Sandboxed};
use crate::launcher::spawn::{self, ChildIo};
use crate::launcher::spec::LaunchSpec;
use crate::launcher::{cgroup, tree};
use crate::os::proc_tree::descendants;
use crate::sandbox::denial::Scanner;
use crate::session::Attachment;
use bytes::Bytes;
use exec_server_protocol::process::{
    ExitDetails, ExitReason, OutputStream, ProcessInfo, ProcessSignal, ProcessUsage, SandboxType,
    StartParams, StartResult, TerminalSize, WriteStatus,
};
use nix::sys::signal::Signal;
use output::{Event, Exit, OutputLog, ReadSnapshot, Record, Span};
use std::collections::HashMap;
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use store::{Entry, Meta, Store};
use tokio::sync::watch;

/// Output one `process/read` returns when it asks for no `maxBytes` (then `nextSeq` says where
/// to go on): retention is far larger than a reply should be.
const READ_MAX_BYTES: usize = 4 * 1024 * 1024;

/// How long the exit waits for the pipes to drain, so `exited` follows the output before it.
const EXIT_DRAIN_GRACE: std::time::Duration = std::time::Duration::from_millis(50);
/// How long the `terminate` signal leaves a tree to end by itself before it is killed: long
/// enough for a program to save its state, short enough for an agent waiting on it.
const TERMINATE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

pub enum Lookup {
    Unknown,
    Starting,
    Ready(Arc<ManagedProcess>),
}

enum Slot {
    /// Reserved while the child is being launched; the token tells this start from a later one.
    Starting(u64),
    Ready(Arc<ManagedProcess>),
}

pub struct ProcessTable {
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

struct TableInner {
    slots: Mutex<Slots>,
    /// Bumped whenever a start in progress ends (ready, failed or cancelled), so an idempotent
    /// repeat waiting on it looks again.
    settled: watch::Sender<()>,
    config: Arc<Config>,
    attachment: watch::Receiver<Option<Attachment>>,
    next_token: AtomicU64,
    session_id: String,
    /// Where processes are kept across a restart of the daemon (None: not kept).
    spares: Option<Arc<store::Spares>>,
    /// Live processes of this session (`live`).
    live: Arc<std::sync::atomic::AtomicUsize>,
}

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
    /// `params` without `trace` (a retry may carry another span) and `idempotent`.
    pub fn identity(params: &StartParams) -> StartParams {
        StartParams {
            trace: None,
            idempotent: false,
            ..params.clone()
        }
    }
}

pub struct ManagedProcess {
    pub id: String,
    /// Its start's params (`tty` among them).
    origin: Origin,
    /// The program's process.
    pid: i32,
    started_at: std::time::SystemTime,
    exited_at: std::sync::OnceLock<std::time::SystemTime>,
    /// The supervisor holding the tree, and the orders to it.
    supervisor_pid: i32,
    orders: tree::Orders,
    started: std::time::Instant,
    /// Why the daemon killed the tree, if it did: the first reason wins.
    kill_reason: std::sync::OnceLock<ExitReason>,
    state: Mutex<ProcessState>,
    /// Bumped on every new event, so long-polls and delivery wake up.
    changed: watch::Sender<()>,
    /// Bumped when notifications were handed to a connection, so a backpressured reader resumes.
    drained: watch::Sender<()>,
    stdin: stdin::Stdin,
    pty_size: Option<stdin::PtyResizer>,
    /// Released (placeholders removed) once the process has exited.
    sandbox: Mutex<Option<Sandboxed>>,
    /// Its output and journal.
    store: Arc<Store>,
}

struct ProcessState {
    log: OutputLog,
    open_streams: u8,
    /// Every process of the tree is gone (or the supervisor is, which could not say).
    tree_gone: bool,
    /// The supervisor could not confirm that a killed tree is gone.
    cleanup_unconfirmed: bool,
    /// The tree's usage as last reported.
    usage: Option<ProcessUsage>,
    /// Present for sandboxed processes: decides `sandboxDenied` at exit.
    denial: Option<Scanner>,
    /// When output or input last came.
    last_activity: std::time::Instant,
    input_wait: InputWait,
}

/// Where the process stands on waiting for input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum InputWait {
    /// Not waiting, or not yet found waiting since the last output or input.
    #[default]
    No,
    /// Waiting since after this seq; `notified` once `process/inputWait` went out.
    Since { after_seq: u64, notified: bool },
}

impl ProcessTable {
    /// The processes of session `session_id`, kept in the state directory when there is one
    /// (`spares` are made there).
    pub fn new(
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
    pub async fn adopt(&self, kept: store::Kept, meta: Meta) -> std::io::Result<()> {
        self.inner.clone().adopt(kept, meta).await
    }

    pub fn lookup(&self, id: &str) -> Lookup {
        match self.inner.slots.lock().unwrap().map.get(id) {
            None => Lookup::Unknown,
            Some(Slot::Starting(_)) => Lookup::Starting,
            Some(Slot::Ready(process)) => Lookup::Ready(process.clone()),
        }
    }

    /// The process `id`, once a start of it in progress has ended; None when there is none.
    pub async fn settled(&self, id: &str) -> Option<Arc<ManagedProcess>> {
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
                existing: true,
            }),
            forgotten::Found::Different => Err(ProcessError::StartConflict {
                id: id.clone(),
                fields: Vec::new(),
            }),
        })
    }

    /// The state of every process of the table (what `process/list` shows, without the rest).
    pub fn lifecycles(&self) -> Vec<exec_server_protocol::process::ProcessState> {
        let processes = self.inner.slots.lock().unwrap().ready();
        processes
            .iter()
            .map(|process| process.lifecycle())
            .collect()
    }

    /// Every process of the table, by id.
    pub fn list(&self) -> Vec<ProcessInfo> {
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
    pub async fn start(
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
        .map_err(|err| ProcessError::Internal(format!("the start failed: {err}")))?
    }

    /// Kills the tree of a process, or cancels a start in progress. Returns whether the
    /// process was still running.
    pub fn terminate(&self, id: &str) -> bool {
        let mut slots = self.inner.slots.lock().unwrap();
        match slots.map.get(id) {
            None => false,
            Some(Slot::Starting(_)) => {
                slots.map.remove(id);
                self.inner.settled.send_replace(());
                true
            }
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
    pub fn kill_all(&self, reason: ExitReason) -> Vec<Arc<ManagedProcess>> {
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

impl TableInner {
    async fn start(
        self: Arc<Self>,
        origin: Origin,
        spec: LaunchSpec,
        mut launch: Option<Launch>,
        timing: Timing,
        replied: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), ProcessError> {
        let id = origin.params.process_id.clone();
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let live = {
            let mut slots = self.slots.lock().unwrap();
            if slots.closed {
                return Err(ProcessError::SessionClosing);
            }
            if slots.map.contains_key(&id) {
                return Err(ProcessError::Exists(id));
            }
            let live = live::Live::start(&self.live, &self.config)?;
            slots.forgotten.forget(&id);
            slots.map.insert(id.clone(), Slot::Starting(token));
            live
        };
        let spawning = async {
            match &mut launch {
                None => spawn::start(&spec).await,
                Some(launch) => launch.spawn(&spec).await,
            }
            .map_err(|error| ProcessError::Launch {
                program: spec.program.clone(),
                error,
            })
        };
        // Where its output will be kept, ready by the time the program is.
        let keeping = async {
            match &self.spares {
                Some(spares) => Some(spares.take().await),
                None => None,
            }
        };
        let (spawned, spare) = tokio::join!(spawning, keeping);
        let spawned = match spawned {
            Ok(spawned) => spawned,
            Err(err) => {
                if let (Some(spares), Some(Ok(spare))) = (&self.spares, spare) {
                    spares.put_back(spare);
                }
                self.slots.lock().unwrap().map.remove(&id);
                self.settled.send_replace(());
                return Err(err);
            }
        };
        let sandbox = launch.map(Launch::into_sandboxed);
        let denial = sandbox.as_ref().map(Sandboxed::scanner);
        let tree::Tree {
            supervisor,
            supervisor_pid,
            program_pid,
            group,
            reports,
            orders,
            ..
        } = spawned.tree;
        let tty = origin.params.tty;
        let parts = match self.keep(
            &origin,
            spawned.io,
            spare,
            program_pid,
            supervisor_pid,
            &orders,
        ) {
            Ok(parts) => parts,
            Err(err) => {
                orders.kill();
                self.slots.lock().unwrap().map.remove(&id);
                self.settled.send_replace(());
                return Err(ProcessError::Internal(format!(
                    "cannot keep the process's output: {err}"
                )));
            }
        };
        let process = Arc::new(ManagedProcess {
            id: id.clone(),
            origin,
            pid: program_pid,
            started_at: std::time::SystemTime::now(),
            exited_at: Default::default(),
            supervisor_pid,
            orders,
            started: std::time::Instant::now(),
            kill_reason: Default::default(),
            state: Mutex::new(ProcessState::new(
                OutputLog::new(
                    self.config.output_retention_bytes,
                    self.config.output_retention_chunks,
                ),
                parts.outputs.len(),
                denial,
            )),
            changed: watch::channel(()).0,
            drained: watch::channel(()).0,
            stdin: stdin::Stdin::new(parts.stdin, parts.store.clone(), Vec::new(), Vec::new()),
            pty_size: parts.master.map(stdin::PtyResizer::new),
            sandbox: Mutex::new(sandbox),
            store: parts.store,
        });
        tokio::spawn(supervise(
            Arc::downgrade(&self),
            process.clone(),
            supervisor,
            reports,
            group,
            true,
            live,
        ));
        {
            let mut slots = self.slots.lock().unwrap();
            match slots.map.get(&id) {
                Some(Slot::Starting(current)) if *current == token => {
                    slots.map.insert(id.clone(), Slot::Ready(process.clone()));
                    drop(slots);
                    self.settled.send_replace(());
                    tracing::info!(
                        process = %id,
                        pid = program_pid,
                        sandbox = ?process.origin.sandbox_type,
                        "process started"
                    );
                }
                _ => {
                    drop(slots);
                    process.kill(ExitReason::Terminated);
                    return Err(ProcessError::StartCancelled(id));
                }
            }
        }
        self.read_outputs(&process, parts.outputs, !tty, &[0, 0]);
        process.arm(&timing, parts.stdin_object, std::time::Duration::ZERO);
        let attachment = self.attachment.clone();
        let process = process.clone();
        tokio::spawn(async move {
            let _ = replied.await;
            delivery::deliver(process, attachment).await
        });
        Ok(())
    }

    /// Where a new process's output goes: its directory in the state directory, its stdio
    /// held by its supervisor (so that both outlive this daemon); memory files when the daemon
    /// keeps no state, or when this process's state cannot be kept (said in the log).
    fn keep(
        &self,
        origin: &Origin,
        io: ChildIo,
        spare: Option<std::io::Result<store::Spare>>,
        pid: i32,
        supervisor_pid: i32,
        orders: &tree::Orders,
    ) -> std::io::Result<Parts> {
        let (outputs, stdin, master, stdin_object) = match io {
            ChildIo::Pipes {
                stdin,
                stdout,
                stderr,
            } => {
                let object = stdin.as_ref().and_then(input_wait::StdinObject::of);
                let outputs = vec![
                    (OutputStream::Stdout, stdout),
                    (OutputStream::Stderr, stderr),
                ];
                (outputs, stdin, None, object)
            }
            ChildIo::Pty { master, terminal } => (
                vec![(OutputStream::Pty, master.try_clone()?)],
                Some(master.try_clone()?),
                Some(master),
                terminal.map(|rdev| input_wait::StdinObject::Terminal { rdev }),
            ),
        };
        let store = match spare {
            Some(spare) => {
                let meta = Meta {
                    session: self.session_id.clone(),
                    params: origin.params.clone(),
                    sandbox_type: origin.sandbox_type,
                    idempotent: origin.idempotent,
                    pid,
                    supervisor_pid,
                    started_at_ms: std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis() as u64,
                };
                let name = uuid::Uuid::new_v4().simple().to_string();
                match spare.and_then(|spare| spare.into_store(&name, &meta)) {
                    Ok((store, listener)) => {
                        let hold = Hold {
                            tty: origin.params.tty,
                            stdin: stdin.is_some(),
                            max_tail: self.config.output_retention_bytes as u64,
                        };
                        let files: Vec<_> = (0..outputs.len())
                            .filter_map(|index| store.file(index))
                            .collect();
                        let dir = store.dir();
                        let fds: Vec<_> = std::iter::once(listener.as_fd())
                            .chain(dir.as_ref().map(|dir| dir.as_fd()))
                            .chain(files.iter().map(|file| file.as_fd()))
                            .chain(outputs.iter().map(|(_, fd)| fd.as_fd()))
                            .chain(
                                stdin
                                    .iter()
                                    .filter(|_| master.is_none())
                                    .map(|fd| fd.as_fd()),
                            )
                            .collect();
                        match orders.hold(hold, &fds) {
                            Ok(()) => {}
                            // A tree gone already (a sandbox helper exits with it) needs no
                            // holding: its output is all in the pipes.
                            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => {}
                            Err(err) => tracing::warn!(
                                process = %origin.params.process_id,
                                "the process will not survive a restart of the daemon: its \
                                 supervisor cannot hold its stdio: {err}"
                            ),
                        }
                        store
                    }
                    Err(err) => {
                        tracing::warn!(
                            process = %origin.params.process_id,
                            "cannot keep the process in the state directory, so it will not \
                             survive a restart of the daemon: {err}"
                        );
                        Store::in_memory(outputs.len())?
                    }
                }
            }
            None => Store::in_memory(outputs.len())?,
        };
        Ok(Parts {
            store: Arc::new(store),
            outputs,
            stdin,
            master,
            stdin_object,
        })
    }

    /// Reads each output into its file, from where each file ends (`ends`, by stream).
    fn read_outputs(
        self: &Arc<Self>,
        process: &Arc<ManagedProcess>,
        outputs: Vec<(OutputStream, OwnedFd)>,
        pipes: bool,
        ends: &[u64],
    ) {
        for (stream, fd) in outputs {
            let end = ends[store::stream_index(stream)];
            match io::OutputReader::new(fd, pipes, end) {
                Ok(reader) => {
                    tokio::spawn(read_output(
                        Arc::downgrade(self),
                        process.clone(),
                        stream,
                        reader,
                    ));
                }
                Err(err) => {
                    tracing::warn!(process = %process.id, "cannot read an output: {err}");
                    process.finish_stream();
                }
            }
        }
    }

    /// Frees the id once the retention after close has passed.
    fn schedule_removal(self: Arc<Self>, process: &Arc<ManagedProcess>) {
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

/// A new process's ends and where its output goes.
struct Parts {
    store: Arc<Store>,
    outputs: Vec<(OutputStream, OwnedFd)>,
    stdin: Option<OwnedFd>,
    /// A terminal's master, for resizing.
    master: Option<OwnedFd>,
    stdin_object: Option<input_wait::StdinObject>,
}

/// A start's durations: its `timeoutMs` and its input waits' quiet period (None: neither).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    pub timeout: Option<std::time::Duration>,
    pub input_quiet: Option<std::time::Duration>,
}

/// Samples the tree for an input wait while the process runs, its stdin is open and it has
/// been quiet for `quiet`: every [`INPUT_SAMPLE_INTERVAL`] at first, then at doubling
/// intervals up to [`INPUT_SAMPLE_BACKOFF`] while it stays quiet without waiting, and never
/// while a wait is already found (until output or input ends it).
async fn watch_input(
    process: Weak<ManagedProcess>,
    object: input_wait::StdinObject,
    quiet: std::time::Duration,
) {
    let first = (quiet / 2).clamp(std::time::Duration::from_millis(50), INPUT_SAMPLE_INTERVAL);
    let mut interval = first;
    loop {
        tokio::time::sleep(interval).await;
        let Some(process) = process.upgrade() else {
            return;
        };
        let after_seq = {
            let state = process.state.lock().unwrap();
            if state.log.exit_code().is_some() {
                return;
            }
            if state.input_wait != InputWait::No
                || state.last_activity.elapsed() < quiet
                || !process.stdin.is_open()
            {
                interval = first;
                continue;
            }
            state.log.next_seq() - 1
        };
        let supervisor = process.supervisor_pid;
        let waiting = tokio::task::spawn_blocking(move || {
            input_wait::sample(object, &descendants(supervisor))
        })
        .await
        .unwrap_or(false);
        // A process that stays quiet without waiting (a server) is sampled less and less often.
        interval = (interval * 2).min(INPUT_SAMPLE_BACKOFF);
        if waiting {
            let mut state = process.state.lock().unwrap();
            // Nothing came while sampling: the wait is after what the sample saw.
            if state.input_wait == InputWait::No && state.log.next_seq() - 1 == after_seq {
                state.input_wait = InputWait::Since {
                    after_seq,
                    notified: false,
                };
                drop(state);
                process.changed.send_replace(());
            }
        }
    }
}

/// How often a quiet process is sampled (twice per quiet period when that is shorter): a wait is
/// found within this much of the quiet period's end.
const INPUT_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(400);

/// The longest time between samples of a process that stays quiet: a wait that starts long
/// after its last output is found within this.
const INPUT_SAMPLE_BACKOFF: std::time::Duration = std::time::Duration::from_secs(4);

/// Whether `maxMemoryBytes` and `maxProcesses` can both be enforced here.
pub fn tree_limits_supported() -> bool {
    cgroup::supported() == (true, true)
}

async fn read_output(
    table: Weak<TableInner>,
    process: Arc<ManagedProcess>,
    stream: OutputStream,
    mut reader: io::OutputReader,
) {
    // Open while the process runs (it closes only once every output ended).
    if let Some(file) = process.store.file(store::stream_index(stream)) {
        while let Some(span) = reader.next(&file).await {
            process.push_output(stream, span, &table).await
        }
    }
    if process.finish_stream() && process.state.lock().unwrap().tree_gone {
        if let Some(table) = table.upgrade() {
            table.schedule_removal(&process);
        }
    }
}

/// Follows the supervisor's reports until it is gone, then reaps it. The process counts as
/// `live` until then.
async fn supervise(
    table: Weak<TableInner>,
    process: Arc<ManagedProcess>,
    supervisor: Option<crate::launcher::pool::HelperProcess>,
    mut reports: tree::Reports,
    group: Option<cgroup::Group>,
    reusable: bool,
    _live: live::Live,
) {
    // A plain supervisor is reused once it confirmed the tree gone and reported the exit.
    let (mut exited, mut confirmed_gone) = (false, false);
    while let Some(report) = reports.next().await {
        let tree_gone = process.state.lock().unwrap().tree_gone;
        match report {
            Report::Exited {
                code,
                signal,
                mut usage,
            } => {
                let mut oom = false;
                if let Some(group) = &group {
                    usage.max_rss_kib = group.peak_kib().unwrap_or(usage.max_rss_kib);
                    oom = group.oom_killed();
                }
                record_exit(&table, &process, code, signal, usage, oom, tree_gone).await;
                exited = true;
            }
            Report::Gone { confirmed, usage } => {
                process.record_gone(&table, confirmed, usage);
                confirmed_gone = confirmed;
            }
            Report::Started { .. } | Report::Failed { .. } => {}
        }
        if reusable && supervisor.is_none() && exited && confirmed_gone {
            // Empty now: removed before the supervisor can start another tree.
            drop(group);
            tree::reuse(reports, &process.orders);
            return;
        }
    }
    if !process.is_exited() {
        tracing::warn!(process = %process.id, "the supervisor ended before the process did");
        record_exit(
            &table,
            &process,
            -1,
            None,
            ProcessUsage::default(),
            false,
            false,
        )
        .await;
    }
    if !process.state.lock().unwrap().tree_gone {
        process.record_gone(&table, false, ProcessUsage::default());
    }
    if let Some(supervisor) = supervisor {
        supervisor.exited().await;
    }
    // Empty now: removed.
    drop(group);
    if let Some(sandbox) = process.sandbox.lock().unwrap().take() {
        tokio::task::spawn_blocking(move || drop(sandbox));
    }
}

async fn record_exit(
    table: &Weak<TableInner>,
    process: &Arc<ManagedProcess>,
    code: i32,
    signal: Option<i32>,
    mut usage: ProcessUsage,
    oom_killed: bool,
    tree_gone: bool,
) {
    // Let go of (its placeholders, and the mount namespace) when the tree is gone; otherwise
    // when it is.
    let sandbox = process.sandbox.lock().unwrap().take_if(|_| tree_gone);
    let mut changes = process.changed.subscribe();
    let _ = tokio::time::timeout(EXIT_DRAIN_GRACE, async {
        while process.state.lock().unwrap().open_streams > 0 {
            if changes.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
    usage.wall_ms = process.started.elapsed().as_millis() as u64;
    let reason = match (process.kill_reason.get(), signal) {
        (_, Some(libc::SIGKILL)) if oom_killed => ExitReason::MemoryLimit,
        (Some(reason), Some(_)) => *reason,
        (_, Some(_)) => ExitReason::Signaled,
        (_, None) => ExitReason::Exited,
    };
    let removable = {
        let mut state = process.state.lock().unwrap();
        let denied = state
            .denial
            .as_mut()
            .is_some_and(|scanner| scanner.verdict(code, signal));
        if denied {
            crate::metrics::get().sandbox_denials.inc();
        }
        state.usage = Some(usage);
        let _ = process.exited_at.set(std::time::SystemTime::now());
        let exit = Exit {
            code,
            sandbox_denied: denied,
            details: ExitDetails {
                reason: Some(reason),
                signal,
                usage: Some(usage),
                cleanup_unconfirmed: state.cleanup_unconfirmed,
            },
        };
        if let Some(record) = state.log.record_exit(exit) {
            process.store.journal(&Entry::Log(record));
        }
        tracing::info!(process = %process.id, pid = process.pid, ?reason, code, signal, "process exited");
        if state.open_streams == 0 {
            state.record_closed(&process.id, &process.store);
        }
        state.removable()
    };
    process.changed.send_replace(());
    // Its mount namespace is torn down only now, off the async workers.
    if let Some(sandbox) = sandbox {
        tokio::task::spawn_blocking(move || drop(sandbox));
    }
    if removable {
        if let Some(table) = table.upgrade() {
            table.schedule_removal(process);
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
            last_activity: std::time::Instant::now(),
            input_wait: InputWait::No,
        }
    }

    /// Running, exited, or closed (exited and its output ended).
    fn lifecycle(&self) -> exec_server_protocol::process::ProcessState {
        use exec_server_protocol::process::ProcessState as S;
        match (self.log.exit_code(), self.log.is_closed()) {
            (None, _) => S::Running,
            (Some(_), false) => S::Exited,
            (Some(_), true) => S::Closed,
        }
    }

    /// The process `id` exited and its output ended.
    fn record_closed(&mut self, id: &str, store: &Store) {
        if let Some(record) = self.log.record_closed() {
            store.journal(&Entry::Log(record));
        }
        store.closed(self.log.retains_output());
        tracing::info!(process = %id, "process closed");
    }

    /// Evicts what the log may (see `OutputLog::evict`), freeing its space and journaling it;
    /// true while the reader must wait.
    fn evict(&mut self, attached: bool, store: &Store) -> bool {
        let mut evicted = Vec::new();
        let must_wait = self.log.evict(attached, &mut evicted);
        if let Some(last) = evicted.last() {
            store.journal(&Entry::Log(Record::Evicted { through: last.seq }));
            store.release(&evicted);
        }
        must_wait
    }

    /// Output or input came: any wait for input is over.
    fn activity(&mut self) {
        self.last_activity = std::time::Instant::now();
        self.input_wait = InputWait::No;
    }

    /// Closed, and nothing of its tree left: the id may be freed after the retention.
    fn removable(&self) -> bool {
        self.log.is_closed() && self.tree_gone
    }
}

impl ManagedProcess {
    /// Its `timeoutMs` (of which `elapsed` ran already, under a predecessor) and its input
    /// waits, on the stdin `object` (none: none watched).
    fn arm(
        self: &Arc<Self>,
        timing: &Timing,
        object: Option<input_wait::StdinObject>,
        elapsed: std::time::Duration,
    ) {
        if let (Some(object), Some(quiet)) = (object, timing.input_quiet) {
            tokio::spawn(watch_input(Arc::downgrade(self), object, quiet));
        }
        if let Some(timeout) = timing.timeout {
            let weak = Arc::downgrade(self);
            let left = timeout.saturating_sub(elapsed);
            tokio::spawn(async move {
                tokio::time::sleep(left).await;
                if let Some(process) = weak.upgrade() {
                    process.kill(ExitReason::Timeout);
                }
            });
        }
    }

    async fn push_output(&self, stream: OutputStream, span: Span, table: &Weak<TableInner>) {
        let Some(attachment) = table.upgrade().map(|t| t.attachment.clone()) else {
            return;
        };
        let mut drained = self.drained.subscribe();
        let mut attachment = attachment;
        let mut must_wait = {
            let mut state = self.state.lock().unwrap();
            if let Some(scanner) = &mut state.denial {
                scanner.feed(stream, &self.store.load(stream, span));
            }
            crate::metrics::get().output_bytes.inc_by(span.len);
            let record = state.log.push(stream, span);
            self.store.journal(&Entry::Log(record));
            state.activity();
            state.evict(attachment.borrow_and_update().is_some(), &self.store)
        };
        self.changed.send_replace(());
        // Backpressure: while the attached client has not taken the oldest output, stop reading.
        while must_wait {
            tokio::select! {
                result = drained.changed() => if result.is_err() { return },
                result = attachment.changed() => if result.is_err() { return },
            }
            let attached = attachment.borrow_and_update().is_some();
            must_wait = self.state.lock().unwrap().evict(attached, &self.store);
        }
    }

    /// Returns true when this was the last open stream of an exited process: it is now closed.
    fn finish_stream(&self) -> bool {
        let closed = {
            let mut state = self.state.lock().unwrap();
            state.open_streams -= 1;
            let closed = state.open_streams == 0 && state.log.exit_code().is_some();
            if closed {
                state.record_closed(&self.id, &self.store);
            }
            closed
        };
        self.changed.send_replace(());
        closed
    }

    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// Chunks are loaded outside the lock, so a long read never holds up the output; one
    /// evicted meanwhile (its space freed) is left out and the read says so.
    pub fn read(&self, after_seq: u64, max_bytes: Option<usize>) -> ReadSnapshot {
        let snapshot = (self.state.lock().unwrap().log).read(after_seq, max_bytes, READ_MAX_BYTES);
        let loaded: Vec<_> = snapshot
            .chunks
            .iter()
            .map(|chunk| self.store.load(chunk.stream, chunk.span))
            .collect();
        let first_retained = self.state.lock().unwrap().log.first_retained_seq();
        let mut loaded = loaded.into_iter();
        snapshot.load(|chunk| loaded.next().filter(|_| chunk.seq >= first_retained))
    }

    /// Every event so far was handed to a connection.
    pub(crate) fn delivered_all(&self) -> bool {
        self.undelivered(1).is_empty()
    }

    /// Loaded outside the lock: while a connection is attached, a chunk not yet delivered is
    /// never evicted.
    fn undelivered(&self, limit: usize) -> Vec<Event> {
        let pending = self.state.lock().unwrap().log.undelivered(limit);
        pending
            .into_iter()
            .map(|event| event.load(|chunk| self.store.load(chunk.stream, chunk.span)))
            .collect()
    }

    fn mark_delivered(&self, seq: u64) {
        self.state.lock().unwrap().log.mark_delivered(seq);
        self.drained.send_replace(());
    }

    pub fn is_exited(&self) -> bool {
        self.state.lock().unwrap().log.exit_code().is_some()
    }

    /// Kills the whole tree (however it detached), even after the process itself exited or
    /// closed, until the supervisor reported it gone. Returns whether the process itself had
    /// not exited yet.
    pub fn kill(&self, reason: ExitReason) -> bool {
        let running = !self.is_exited();
        if !self.state.lock().unwrap().tree_gone {
            let _ = self.kill_reason.set(reason);
            self.orders.kill();
        }
        running
    }

    pub fn signal(self: &Arc<Self>, signal: ProcessSignal) -> Result<(), ProcessError> {
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

    fn record_gone(
        self: &Arc<Self>,
        table: &Weak<TableInner>,
        confirmed: bool,
        usage: ProcessUsage,
    ) {
        let removable = {
            let mut state = self.state.lock().unwrap();
            state.tree_gone = true;
            if !confirmed {
                state.cleanup_unconfirmed = true;
                tracing::warn!(
                    process = %self.id,
                    "cannot confirm that every process of the tree is gone"
                );
            }
            let wall_ms = state.usage.map_or(0, |usage| usage.wall_ms);
            if confirmed {
                state.usage = Some(ProcessUsage { wall_ms, ..usage });
            }
            let (latest, unconfirmed) = (state.usage, state.cleanup_unconfirmed);
            if let Some(details) = state.log.exit_details_mut() {
                details.usage = latest;
                details.cleanup_unconfirmed = unconfirmed;
                let record = Record::ExitDetails(details.clone());
                self.store.journal(&Entry::Log(record));
            }
            state.removable()
        };
        self.changed.send_replace(());
        if removable {
            if let Some(table) = table.upgrade() {
                table.schedule_removal(self);
            }
        }
    }

    pub fn write(&self, write_id: &str, data: Bytes) -> Result<WriteStatus, ProcessError> {
        let status = self.stdin.write(write_id, data)?;
        if status == WriteStatus::Accepted {
            self.state.lock().unwrap().activity();
        }
        Ok(status)
    }

    /// The process is found waiting for input (and has not exited).
    pub fn waiting_for_input(&self) -> bool {
        let state = self.state.lock().unwrap();
        state.input_wait != InputWait::No && state.log.exit_code().is_none()
    }

    /// The seq an input wait not yet notified follows, once every event up to it was
    /// delivered; [`ManagedProcess::input_wait_notified`] records that it went out.
    fn input_wait_to_notify(&self) -> Option<u64> {
        let state = self.state.lock().unwrap();
        match state.input_wait {
            InputWait::Since {
                after_seq,
                notified: false,
            } if state.log.exit_code().is_none() => Some(after_seq),
            _ => None,
        }
    }

    fn input_wait_notified(&self, after_seq: u64) {
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

    pub fn close_stdin(&self) -> Result<(), ProcessError> {
        if self.stdin.close(self.origin.params.tty) {
            self.store.journal(&Entry::StdinClosed);
            if !self.origin.params.tty {
                self.orders.close_stdin();
            }
        }
        Ok(())
    }

    pub fn resize(&self, size: TerminalSize) -> Result<(), ProcessError> {
        match &self.pty_size {
            Some(resizer) => resizer.resize(size),
            None => Err(ProcessError::NoTerminal(self.id.clone())),
        }
    }

    /// Processes of the tree still running besides the process itself; None once the tree is
    /// gone. Counted from the supervisor down, through every thread's children.
    pub fn live_descendants(&self) -> Option<u32> {
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
            existing: true,
        })
    }

    fn lifecycle(&self) -> exec_server_protocol::process::ProcessState {
        self.state.lock().unwrap().lifecycle()
    }

    fn info(&self) -> ProcessInfo {
        let rfc3339 = |time| humantime::format_rfc3339_millis(time).to_string();
        let (next_seq, first_retained_seq, exit_code, state) = {
            let state = self.state.lock().unwrap();
            let log = &state.log;
            let (next, first) = (log.next_seq(), log.first_retained_seq());
            (next, first, log.exit_code(), state.lifecycle())
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
        }
    }

    /// The process exited, its output closed, and its tree is gone.
    pub fn is_finished(&self) -> bool {
        self.state.lock().unwrap().removable()
    }

    /// Resolves once the process has exited, its output closed, and its tree is gone.
    pub async fn wait_finished(&self) {
        let mut changes = self.subscribe();
        while !self.state.lock().unwrap().removable() {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
}
