//! Managed processes: each session owns a table of them, keyed by client-chosen ids.

mod delivery;
pub mod env;
pub mod methods;
pub mod output;
pub mod spawn;
mod stdin;

use crate::config::Config;
use crate::rpc::RpcError;
use crate::sandbox::denial::Scanner;
use crate::sandbox::{Launch, Sandboxed};
use crate::session::Attachment;
use bytes::{Bytes, BytesMut};
use exec_server_protocol::process::{OutputStream, ProcessSignal, TerminalSize, WriteStatus};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use output::{Event, OutputLog, ReadSnapshot};
use spawn::{ChildIo, LaunchSpec};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::io::AsyncReadExt as _;
use tokio::sync::watch;

/// Bytes read from a child per system call, at most: a full output pipe.
const READ_BUFFER_BYTES: usize = spawn::OUTPUT_PIPE_BYTES;

/// A read goes into the rest of the current buffer while at least this much is left. Chunks
/// share their buffer, so this packs small chunks together instead of each pinning a whole
/// fresh buffer for as long as it is retained. Also the size of a first buffer.
const MIN_READ_BYTES: usize = 16 * 1024;

/// How long the exit waits for the pipes to drain, so `exited` follows the output before it.
const EXIT_DRAIN_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

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

struct TableInner {
    slots: Mutex<HashMap<String, Slot>>,
    config: Arc<Config>,
    attachment: watch::Receiver<Option<Attachment>>,
    next_token: AtomicU64,
}

pub struct ManagedProcess {
    pub id: String,
    pid: i32,
    tty: bool,
    state: Mutex<ProcessState>,
    /// Bumped on every new event, so long-polls and delivery wake up.
    changed: watch::Sender<()>,
    /// Bumped when notifications were handed to a connection, so a backpressured reader resumes.
    drained: watch::Sender<()>,
    stdin: stdin::Stdin,
    pty_size: Option<stdin::PtyResizer>,
    /// Released (placeholders removed) once the process has exited.
    sandbox: Mutex<Option<Sandboxed>>,
}

struct ProcessState {
    log: OutputLog,
    open_streams: u8,
    /// Present for sandboxed processes: decides `sandboxDenied` at exit.
    denial: Option<Scanner>,
}

impl ProcessTable {
    pub fn new(config: Arc<Config>, attachment: watch::Receiver<Option<Attachment>>) -> Self {
        Self {
            inner: Arc::new(TableInner {
                slots: Mutex::new(HashMap::new()),
                config,
                attachment,
                next_token: AtomicU64::new(1),
            }),
        }
    }

    pub fn lookup(&self, id: &str) -> Lookup {
        match self.inner.slots.lock().unwrap().get(id) {
            None => Lookup::Unknown,
            Some(Slot::Starting(_)) => Lookup::Starting,
            Some(Slot::Ready(process)) => Lookup::Ready(process.clone()),
        }
    }

    /// Reserves `id`, launches the child and starts its reader, waiter and delivery tasks. With
    /// a sandbox `launch`, the child is the helper and the start waits for its verdict.
    pub async fn start(
        &self,
        id: String,
        spec: LaunchSpec,
        mut launch: Option<Launch>,
    ) -> Result<(), RpcError> {
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        {
            let mut slots = self.inner.slots.lock().unwrap();
            if slots.contains_key(&id) {
                return Err(RpcError::invalid_request(format!(
                    "process {id} already exists"
                )));
            }
            slots.insert(id.clone(), Slot::Starting(token));
        }
        let spawned = match &mut launch {
            None => spawn::start(&spec),
            Some(launch) => launch.spawn(&spec).await,
        };
        let spawned = match spawned {
            Ok(spawned) => spawned,
            Err(err) => {
                self.inner.slots.lock().unwrap().remove(&id);
                return Err(err);
            }
        };
        let sandbox = match launch {
            None => None,
            Some(launch) => match launch.confirm().await {
                Ok(sandboxed) => Some(sandboxed),
                Err(err) => {
                    // Nothing ran; make sure the helper is gone before the id is free again.
                    let _ = nix::sys::signal::killpg(Pid::from_raw(spawned.pid), Signal::SIGKILL);
                    let mut child = spawned.child;
                    let _ = child.wait().await;
                    self.inner.slots.lock().unwrap().remove(&id);
                    return Err(err);
                }
            },
        };
        let denial = sandbox.as_ref().map(Sandboxed::scanner);
        let config = &self.inner.config;
        let (streams, stdin, pty_size): (Vec<(OutputStream, Box<dyn ChildOutput>)>, _, _) =
            match spawned.io {
                ChildIo::Pipes {
                    stdin,
                    stdout,
                    stderr,
                } => (
                    vec![
                        (OutputStream::Stdout, Box::new(stdout)),
                        (OutputStream::Stderr, Box::new(stderr)),
                    ],
                    stdin::Stdin::pipe(stdin),
                    None,
                ),
                ChildIo::Pty {
                    reader,
                    writer,
                    master,
                } => {
                    let (stdin, resizer) = stdin::Stdin::pty(writer, master);
                    (
                        vec![(OutputStream::Pty, Box::new(reader))],
                        stdin,
                        Some(resizer),
                    )
                }
            };
        let process = Arc::new(ManagedProcess {
            id: id.clone(),
            pid: spawned.pid,
            tty: spec.tty,
            state: Mutex::new(ProcessState {
                log: OutputLog::new(
                    config.output_retention_bytes,
                    config.output_retention_chunks,
                ),
                open_streams: streams.len() as u8,
                denial,
            }),
            changed: watch::channel(()).0,
            drained: watch::channel(()).0,
            stdin,
            pty_size,
            sandbox: Mutex::new(sandbox),
        });
        {
            let mut slots = self.inner.slots.lock().unwrap();
            match slots.get(&id) {
                Some(Slot::Starting(current)) if *current == token => {
                    slots.insert(id.clone(), Slot::Ready(process.clone()));
                }
                _ => {
                    drop(slots);
                    process.signal_group(Signal::SIGKILL);
                    return Err(RpcError::invalid_request(format!(
                        "process {id} start was cancelled"
                    )));
                }
            }
        }
        for (stream, reader) in streams {
            tokio::spawn(read_output(
                Arc::downgrade(&self.inner),
                process.clone(),
                stream,
                reader,
            ));
        }
        tokio::spawn(wait_for_exit(
            Arc::downgrade(&self.inner),
            process.clone(),
            spawned.child,
        ));
        tokio::spawn(delivery::deliver(
            process.clone(),
            self.inner.attachment.clone(),
        ));
        Ok(())
    }

    /// Kills the group of a running process, or cancels a start in progress. Returns whether
    /// the process was still running.
    pub fn terminate(&self, id: &str) -> bool {
        let mut slots = self.inner.slots.lock().unwrap();
        match slots.get(id) {
            None => false,
            Some(Slot::Starting(_)) => {
                slots.remove(id);
                true
            }
            Some(Slot::Ready(process)) => {
                let process = process.clone();
                drop(slots);
                process.kill()
            }
        }
    }

    /// Kills every process (session expiry, daemon shutdown) and returns them, so the caller can
    /// wait for them to be reaped.
    pub fn kill_all(&self) -> Vec<Arc<ManagedProcess>> {
        let mut slots = self.inner.slots.lock().unwrap();
        slots.retain(|_, slot| matches!(slot, Slot::Ready(_)));
        let processes: Vec<_> = slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Ready(process) => Some(process.clone()),
                Slot::Starting(_) => None,
            })
            .collect();
        drop(slots);
        for process in &processes {
            process.kill();
        }
        processes
    }
}

impl TableInner {
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
            if matches!(slots.get(&process.id), Some(Slot::Ready(p)) if Arc::ptr_eq(p, &process)) {
                slots.remove(&process.id);
                crate::memory::release_soon();
            }
        });
    }
}

/// A child's output half: a pipe or the PTY master.
trait ChildOutput: tokio::io::AsyncRead + Unpin + Send {}
impl<T: tokio::io::AsyncRead + Unpin + Send> ChildOutput for T {}

async fn read_output(
    table: Weak<TableInner>,
    process: Arc<ManagedProcess>,
    stream: OutputStream,
    mut reader: Box<dyn ChildOutput>,
) {
    // Buffers start small and double while reads fill them, so a quiet child costs little
    // and a streaming one is read a full pipe at a time.
    let mut block = MIN_READ_BYTES;
    let mut buffer = BytesMut::new();
    loop {
        if buffer.capacity() - buffer.len() < MIN_READ_BYTES {
            buffer = BytesMut::with_capacity(block);
        }
        let spare = buffer.capacity() - buffer.len();
        // A PTY master reports EIO once the terminal's last writer closes: that is its EOF.
        match reader.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if read == spare {
                    block = (block * 2).min(READ_BUFFER_BYTES);
                }
                process
                    .push_output(stream, buffer.split().freeze(), &table)
                    .await
            }
        }
    }
    if process.finish_stream() {
        if let Some(table) = table.upgrade() {
            table.schedule_removal(&process);
        }
    }
}

async fn wait_for_exit(
    table: Weak<TableInner>,
    process: Arc<ManagedProcess>,
    mut child: tokio::process::Child,
) {
    let (code, signal) = match child.wait().await {
        Ok(status) => spawn::exit_code(status),
        Err(_) => (-1, None),
    };
    // Placeholders go before `exited` is visible, so a client never sees them left over.
    let mut sandbox = process.sandbox.lock().unwrap().take();
    if let Some(mut held) = sandbox.take_if(|held| held.has_placeholders()) {
        sandbox = tokio::task::spawn_blocking(move || {
            held.release();
            held
        })
        .await
        .ok();
    }
    let mut changes = process.changed.subscribe();
    let _ = tokio::time::timeout(EXIT_DRAIN_GRACE, async {
        while process.state.lock().unwrap().open_streams > 0 {
            if changes.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
    let closed = {
        let mut state = process.state.lock().unwrap();
        let denied = state
            .denial
            .as_mut()
            .is_some_and(|scanner| scanner.verdict(code, signal));
        state.log.record_exit(code, denied);
        if state.open_streams == 0 {
            state.log.record_closed();
        }
        state.log.is_closed()
    };
    process.changed.send_replace(());
    // Its mount namespace is torn down only now, off the async workers.
    if let Some(sandbox) = sandbox {
        tokio::task::spawn_blocking(move || drop(sandbox));
    }
    if closed {
        if let Some(table) = table.upgrade() {
            table.schedule_removal(&process);
        }
    }
}

impl ManagedProcess {
    async fn push_output(&self, stream: OutputStream, data: Bytes, table: &Weak<TableInner>) {
        let Some(attachment) = table.upgrade().map(|t| t.attachment.clone()) else {
            return;
        };
        let mut drained = self.drained.subscribe();
        let mut attachment = attachment;
        let mut must_wait = {
            let mut state = self.state.lock().unwrap();
            if let Some(scanner) = &mut state.denial {
                scanner.feed(stream, &data);
            }
            state.log.push(stream, data);
            state.log.evict(attachment.borrow_and_update().is_some())
        };
        self.changed.send_replace(());
        // Backpressure: while the attached client has not taken the oldest output, stop reading.
        while must_wait {
            tokio::select! {
                result = drained.changed() => if result.is_err() { return },
                result = attachment.changed() => if result.is_err() { return },
            }
            let attached = attachment.borrow_and_update().is_some();
            must_wait = self.state.lock().unwrap().log.evict(attached);
        }
    }

    /// Returns true when this was the last open stream of an exited process: it is now closed.
    fn finish_stream(&self) -> bool {
        let closed = {
            let mut state = self.state.lock().unwrap();
            state.open_streams -= 1;
            let closed = state.open_streams == 0 && state.log.exit_code().is_some();
            if closed {
                state.log.record_closed();
            }
            closed
        };
        self.changed.send_replace(());
        closed
    }

    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    pub fn read(&self, after_seq: u64, max_bytes: Option<usize>) -> ReadSnapshot {
        self.state.lock().unwrap().log.read(after_seq, max_bytes)
    }

    fn undelivered(&self, limit: usize) -> Vec<Event> {
        self.state.lock().unwrap().log.undelivered(limit)
    }

    fn mark_delivered(&self, seq: u64) {
        self.state.lock().unwrap().log.mark_delivered(seq);
        self.drained.send_replace(());
    }

    pub fn is_exited(&self) -> bool {
        self.state.lock().unwrap().log.exit_code().is_some()
    }

    /// Whether the process or anything in its group may still be running.
    fn may_be_running(&self) -> bool {
        !self.state.lock().unwrap().log.is_closed()
    }

    /// SIGKILL to the whole group. Returns whether the process itself had not exited yet.
    pub fn kill(&self) -> bool {
        let running = !self.is_exited();
        if self.may_be_running() {
            self.signal_group(Signal::SIGKILL);
        }
        running
    }

    pub fn signal(&self, signal: ProcessSignal) -> Result<(), RpcError> {
        if self.is_exited() {
            return Ok(());
        }
        let signal = match signal {
            ProcessSignal::Interrupt => Signal::SIGINT,
            ProcessSignal::Terminate => Signal::SIGTERM,
            ProcessSignal::Kill => Signal::SIGKILL,
            ProcessSignal::Hangup => Signal::SIGHUP,
            ProcessSignal::Quit => Signal::SIGQUIT,
        };
        nix::sys::signal::killpg(Pid::from_raw(self.pid), signal)
            .map_err(|err| RpcError::internal(format!("failed to signal process: {err}")))
    }

    fn signal_group(&self, signal: Signal) {
        // The group outlives its leader while any member is alive, so its id cannot be reused
        // before the group is empty.
        let _ = nix::sys::signal::killpg(Pid::from_raw(self.pid), signal);
    }

    pub fn write(&self, write_id: &str, data: Bytes) -> Result<WriteStatus, RpcError> {
        self.stdin.write(write_id, data)
    }

    pub fn close_stdin(&self) -> Result<(), RpcError> {
        self.stdin.close(self.tty)
    }

    pub fn resize(&self, size: TerminalSize) -> Result<(), RpcError> {
        match &self.pty_size {
            Some(resizer) => resizer.resize(size),
            None => Err(RpcError::invalid_request(format!(
                "process {} has no terminal to resize",
                self.id
            ))),
        }
    }

    /// Resolves once the process has exited and its output closed.
    pub async fn wait_closed(&self) {
        let mut changes = self.subscribe();
        while self.may_be_running() {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }
}
