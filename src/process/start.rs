//! A start: the id reserved, the child launched beside its spare process directory, where its
//! output goes decided (`keep`), the process made and its tasks started.
//!
//! Invariants: whatever happens after the launch, its tree is tracked in the table or killed at
//! once, and the reservation is either filled or given back; the spare taken for a launch
//! that failed is put back.

use super::input_wait::StdinObject;
use super::managed::{ManagedProcess, Origin, Parts, Writes};
use super::store::{Meta, Spare, Store};
use super::table::{Reservation, TableInner};
use super::{delivery, tasks, KeepError, ProcessError, Timing};
use crate::ipc::message::Hold;
use crate::launcher::sandboxed::{Launch, Sandboxed};
use crate::launcher::spawn::{self, ChildIo, Spawned};
use crate::launcher::spec::LaunchSpec;
use crate::launcher::tree;
use exec_server_protocol::process::{ExitReason, OutputStream};
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A new process's ends, as its launch left them.
struct Ends {
    outputs: Vec<(OutputStream, OwnedFd)>,
    stdin: Option<OwnedFd>,
    /// A terminal's master, for resizing.
    master: Option<OwnedFd>,
    /// What its stdin is, for input waits.
    stdin_object: Option<StdinObject>,
}

impl TableInner {
    /// What [`super::ProcessTable::start`] runs, on a task of its own.
    pub(super) async fn start(
        self: Arc<Self>,
        origin: Origin,
        spec: LaunchSpec,
        mut launch: Option<Launch>,
        timing: Timing,
        replied: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<(), ProcessError> {
        let id = origin.params.process_id.clone();
        let Reservation { token, live } = self.reserve(&id)?;
        let (spawned, spare) = self.spawn(&spec, &mut launch).await;
        let spawned = match spawned {
            Ok(spawned) => spawned,
            Err(err) => return Err(self.not_launched(&id, spare, err)),
        };
        let sandbox = launch.map(Launch::into_sandboxed);
        let tree::Tree {
            supervisor,
            supervisor_pid,
            program_pid,
            group,
            reports,
            orders,
            ..
        } = spawned.tree;
        let launched = Launched {
            pid: program_pid,
            supervisor_pid,
            started_at: SystemTime::now(),
        };
        let (ends, store) = match self.keep(&origin, spawned.io, spare, &launched, &orders) {
            Ok(kept) => kept,
            Err(err) => {
                orders.kill();
                self.unreserve(&id);
                return Err(err);
            }
        };
        let log = self.output_log(&origin.params);
        let process = ManagedProcess::new(Parts {
            origin,
            pid: program_pid,
            supervisor_pid,
            orders,
            started_at: launched.started_at,
            log,
            open_streams: ends.outputs.len(),
            denial: sandbox.as_ref().map(Sandboxed::scanner),
            stdin: ends.stdin,
            writes: Writes::default(),
            master: ends.master,
            sandbox,
            store,
        });
        // Supervised from now on, so that even a cancelled start's tree is reaped.
        tokio::spawn(tasks::supervise(
            Arc::downgrade(&self),
            process.clone(),
            supervisor,
            reports,
            group,
            true,
            live,
        ));
        if !self.fill(token, &process) {
            process.kill(ExitReason::Terminated);
            return Err(ProcessError::StartCancelled(id));
        }
        tracing::info!(
            process = %id,
            pid = program_pid,
            sandbox = ?process.origin.sandbox_type,
            "process started"
        );
        self.run(process, ends.outputs, ends.stdin_object, &timing, replied);
        Ok(())
    }

    /// A launch failed: its id is free again, and the spare taken for it kept for the next.
    fn not_launched(
        &self,
        id: &str,
        spare: Option<Result<Spare, KeepError>>,
        err: ProcessError,
    ) -> ProcessError {
        if let (Some(spares), Some(Ok(spare))) = (&self.spares, spare) {
            spares.put_back(spare);
        }
        self.unreserve(id);
        err
    }

    /// Starts a new process's readers, its timeout and input waits, and the delivery of its
    /// events once its start's reply went out (`replied`).
    fn run(
        self: &Arc<Self>,
        process: Arc<ManagedProcess>,
        outputs: Vec<(OutputStream, OwnedFd)>,
        stdin_object: Option<StdinObject>,
        timing: &Timing,
        replied: tokio::sync::oneshot::Receiver<()>,
    ) {
        self.read_outputs(&process, outputs, !process.origin.params.tty, &[0, 0]);
        process.arm(timing, stdin_object, Duration::ZERO);
        let attachment = self.attachment.clone();
        tokio::spawn(async move {
            let _ = replied.await;
            delivery::deliver(process, attachment).await
        });
    }
}

/// What the launch made, for the process's meta.
struct Launched {
    pid: i32,
    supervisor_pid: i32,
    started_at: SystemTime,
}

impl TableInner {
    /// Launches `spec` (sandboxed with `launch`) while taking a spare process directory, so
    /// that where its output will be kept is ready by the time the program is.
    async fn spawn(
        &self,
        spec: &LaunchSpec,
        launch: &mut Option<Launch>,
    ) -> (
        Result<Spawned, ProcessError>,
        Option<Result<Spare, KeepError>>,
    ) {
        let spawning = async {
            match launch {
                None => spawn::start(spec).await,
                Some(launch) => launch.spawn(spec).await,
            }
            .map_err(|error| ProcessError::Launch {
                program: spec.program.clone(),
                error,
            })
        };
        let keeping = async {
            match &self.spares {
                Some(spares) => Some(spares.take().await),
                None => None,
            }
        };
        tokio::join!(spawning, keeping)
    }

    /// Where a new process's output goes: its directory in the state directory, its stdio
    /// held by its supervisor (so that both outlive this daemon); memory files when the daemon
    /// keeps no state, or when this process's state cannot be kept (said in the log).
    fn keep(
        &self,
        origin: &Origin,
        io: ChildIo,
        spare: Option<Result<Spare, KeepError>>,
        launched: &Launched,
        orders: &tree::Orders,
    ) -> Result<(Ends, Arc<Store>), ProcessError> {
        let ends = Ends::of(io)?;
        let in_memory = || Store::in_memory(ends.outputs.len()).map_err(ProcessError::OutputFile);
        let store = match spare {
            Some(spare) => match self.keep_in_state_dir(origin, &ends, spare, launched, orders) {
                Ok(store) => store,
                Err(err) => {
                    tracing::warn!(
                        process = %origin.params.process_id,
                        "cannot keep the process in the state directory, so it will not \
                         survive a restart of the daemon: {err}"
                    );
                    in_memory()?
                }
            },
            None => in_memory()?,
        };
        Ok((ends, Arc::new(store)))
    }

    /// The process's directory, made of `spare` with its meta, and its stdio handed to its
    /// supervisor to hold.
    fn keep_in_state_dir(
        &self,
        origin: &Origin,
        ends: &Ends,
        spare: Result<Spare, KeepError>,
        launched: &Launched,
        orders: &tree::Orders,
    ) -> Result<Store, KeepError> {
        let meta = Meta {
            session: self.session_id.clone(),
            params: origin.params.clone(),
            sandbox_type: origin.sandbox_type,
            idempotent: origin.idempotent,
            pid: launched.pid,
            supervisor_pid: launched.supervisor_pid,
            started_at_ms: launched
                .started_at
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64,
        };
        let name = uuid::Uuid::new_v4().simple().to_string();
        let (store, listener) =
            spare.and_then(|spare| spare.into_store(&name, &meta, self.spares.as_ref()))?;
        let hold = Hold {
            tty: origin.params.tty,
            stdin: ends.stdin.is_some(),
            max_tail: self.config.output_retention_bytes as u64,
        };
        let files: Vec<_> = (0..ends.outputs.len())
            .filter_map(|index| store.file(index))
            .collect();
        let dir = store.dir();
        // The socket a successor finds it on, the directory, the files and the ends (a
        // terminal's master is its output already).
        let fds: Vec<_> = std::iter::once(listener.as_fd())
            .chain(dir.as_ref().map(|dir| dir.as_fd()))
            .chain(files.iter().map(|file| file.as_fd()))
            .chain(ends.outputs.iter().map(|(_, fd)| fd.as_fd()))
            .chain(
                (ends.stdin.iter())
                    .filter(|_| ends.master.is_none())
                    .map(|fd| fd.as_fd()),
            )
            .collect();
        match orders.hold(hold, &fds) {
            Ok(()) => {}
            // A tree gone already (a sandbox helper exits with it) needs no holding: its
            // output is all in the pipes.
            Err(err) if err.raw_os_error() == Some(libc::EPIPE) => {}
            Err(err) => tracing::warn!(
                process = %origin.params.process_id,
                "the process will not survive a restart of the daemon: its supervisor cannot \
                 hold its stdio: {err}"
            ),
        }
        Ok(store)
    }
}

impl Ends {
    /// A terminal's master is its output, its stdin and what resizes it.
    fn of(io: ChildIo) -> Result<Self, ProcessError> {
        Ok(match io {
            ChildIo::Pipes {
                stdin,
                stdout,
                stderr,
            } => Self {
                stdin_object: stdin.as_ref().and_then(StdinObject::of),
                outputs: vec![
                    (OutputStream::Stdout, stdout),
                    (OutputStream::Stderr, stderr),
                ],
                stdin,
                master: None,
            },
            ChildIo::Pty { master, terminal } => {
                let clone = || master.try_clone().map_err(ProcessError::TerminalClone);
                Self {
                    outputs: vec![(OutputStream::Pty, clone()?)],
                    stdin: Some(clone()?),
                    master: Some(master),
                    stdin_object: terminal.map(|rdev| StdinObject::Terminal { rdev }),
                }
            }
        })
    }
}
