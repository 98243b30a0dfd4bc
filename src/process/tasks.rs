//! What runs in the background for a managed process, from its start (or adoption) until it
//! is done: a reader per output (with backpressure while the attached client lags), the
//! supervision of its tree (exit, gone, usage), its timeout and its input-wait sampling.
//!
//! Invariants: the tasks hold the table weakly (they never keep an ended session's table
//! alive) and the process strongly; the exit is recorded once, after the outputs drained (or
//! `EXIT_DRAIN_GRACE`), and the process counts as live until its supervisor is gone.

use super::managed::{InputWait, ManagedProcess};
use super::output::{stream_index, Exit, Record, Span};
use super::store::Entry;
use super::table::TableInner;
use super::{input_wait, io, live, Timing};
use crate::ipc::message::Report;
use crate::launcher::{cgroup, tree};
use crate::os::proc_tree::descendants;
use exec_server_protocol::process::{ExitDetails, ExitReason, OutputStream, ProcessUsage};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long the exit waits for the pipes to drain, so `exited` follows the output before it.
const EXIT_DRAIN_GRACE: Duration = Duration::from_millis(50);

impl TableInner {
    /// Reads each output into its file, from where each file ends (`ends`, by stream).
    pub(super) fn read_outputs(
        self: &Arc<Self>,
        process: &Arc<ManagedProcess>,
        outputs: Vec<(OutputStream, OwnedFd)>,
        pipes: bool,
        ends: &[u64],
    ) {
        for (stream, fd) in outputs {
            let end = ends[stream_index(stream)];
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
}

impl ManagedProcess {
    /// Its `timeoutMs` (of which `elapsed` ran already, under a predecessor) and its input
    /// waits, on the stdin `object` (none: none watched).
    pub(super) fn arm(
        self: &Arc<Self>,
        timing: &Timing,
        object: Option<input_wait::StdinObject>,
        elapsed: Duration,
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
            // While a client is attached, output its delivery has not taken yet grows the last
            // chunk rather than adding one.
            let attached = attachment.borrow_and_update().is_some();
            if let Some(record) = state.log.push(stream, span, attached) {
                self.store.journal(&Entry::Log(record));
            }
            state.activity();
            state.evict(attached, &self.store)
        };
        self.changed.send_replace(());
        if !must_wait {
            return;
        }
        // Backpressure: until the client received the oldest output, stop reading.
        self.set_paused(true);
        while must_wait {
            tokio::select! {
                result = drained.changed() => if result.is_err() { break },
                result = attachment.changed() => if result.is_err() { break },
            }
            let attached = attachment.borrow_and_update().is_some();
            must_wait = self.state.lock().unwrap().evict(attached, &self.store);
        }
        self.set_paused(false);
    }

    /// Counts this output's reader among those waiting for receipt, or no longer.
    fn set_paused(&self, paused: bool) {
        let mut state = self.state.lock().unwrap();
        state.paused_readers = if paused {
            state.paused_readers + 1
        } else {
            state.paused_readers - 1
        };
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
                state.journal(&self.store, record);
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
}

/// Samples the tree for an input wait while the process runs, its stdin is open and it has
/// been quiet for `quiet`: every [`INPUT_SAMPLE_INTERVAL`] at first, then at doubling
/// intervals up to [`INPUT_SAMPLE_BACKOFF`] while it stays quiet without waiting, and never
/// while a wait is already found (until output or input ends it).
async fn watch_input(
    process: Weak<ManagedProcess>,
    object: input_wait::StdinObject,
    quiet: Duration,
) {
    let first = (quiet / 2).clamp(Duration::from_millis(50), INPUT_SAMPLE_INTERVAL);
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
const INPUT_SAMPLE_INTERVAL: Duration = Duration::from_millis(400);

/// The longest time between samples of a process that stays quiet: a wait that starts long
/// after its last output is found within this.
const INPUT_SAMPLE_BACKOFF: Duration = Duration::from_secs(4);

async fn read_output(
    table: Weak<TableInner>,
    process: Arc<ManagedProcess>,
    stream: OutputStream,
    mut reader: io::OutputReader,
) {
    // Open while the process runs (it closes only once every output ended).
    if let Some(file) = process.store.file(stream_index(stream)) {
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
pub(super) async fn supervise(
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
            state.journal(&process.store, record);
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
