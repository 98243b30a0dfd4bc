//! Per-process event delivery: every event reaches the user exactly once and in seq order,
//! whether it came as a pushed notification or from a catch-up `process/read` after a
//! reconnect. Missing seqs that nothing can fill are reported as [`ProcessEvent::Gap`].

use bytes::Bytes;
use exec_server_protocol::fs::ChangedNotification;
use exec_server_protocol::process::{ExitReason, OutputStream, ReadResult};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tokio::sync::mpsc;

mod notification;
pub use notification::Notification;

/// What happens to a process, in seq order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessEvent {
    Output {
        seq: u64,
        stream: OutputStream,
        /// As received: a slice of the daemon's message, not a copy.
        data: Bytes,
    },
    Exited {
        seq: u64,
        exit_code: i32,
        sandbox_denied: bool,
        /// Why it ended, when the daemon says (this daemon does): a timeout, a limit, a kill...
        reason: Option<ExitReason>,
    },
    /// The last event: the process exited and its output streams are at EOF.
    Closed { seq: u64 },
    /// An error, not the end: the events `from_seq..=to_seq` were evicted on the daemon before
    /// this client could receive them. Later events still follow.
    Gap { from_seq: u64, to_seq: u64 },
    /// The last event: the session could not be resumed, so the process's fate is unknown.
    Failed { message: String },
    /// Not an event of the log (it has no seq): after the event `after_seq`, the process's tree
    /// has been blocked reading its stdin, with no output, for its quiet period. Once per wait.
    InputWait { after_seq: u64 },
}

impl ProcessEvent {
    /// True for the events after which nothing more is delivered.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Closed { .. } | Self::Failed { .. })
    }
}

/// The seq bookkeeping of one process, free of I/O.
#[derive(Debug, Default)]
pub struct SeqLog {
    /// Highest seq handed to the user.
    last_seq: u64,
    /// Events that arrived ahead of a hole, waiting for it to be filled.
    ahead: BTreeMap<u64, ProcessEvent>,
    exited: bool,
    finished: bool,
    /// The last read may have been cut at the daemon's budget: read again before anything is
    /// inferred past it.
    read_again: bool,
}

impl SeqLog {
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether events wait behind a hole that only a `process/read` can fill, or the last read
    /// may have stopped short of the end.
    pub fn has_hole(&self) -> bool {
        self.read_again
            || self
                .ahead
                .keys()
                .next()
                .is_some_and(|&seq| seq > self.last_seq + 1)
    }

    /// A pushed event. Returns what can now be delivered, in order.
    pub fn push(&mut self, seq: u64, event: ProcessEvent) -> Vec<ProcessEvent> {
        if self.finished || seq <= self.last_seq {
            return Vec::new();
        }
        self.ahead.insert(seq, event);
        let mut out = Vec::new();
        self.drain_contiguous(&mut out);
        out
    }

    /// A catch-up read with `afterSeq` ≤ [`Self::last_seq`] and no `maxBytes`, so `nextSeq - 1`
    /// is the newest event of the process, unless the daemon cut the read at its default
    /// budget: then `nextSeq` follows the read's last chunk, and `closed`/`exited` speak of
    /// events past it. Everything up to `nextSeq - 1` is delivered now: from the read, from
    /// events that arrived meanwhile, inferred terminal events, or as a gap; after a read that
    /// may have been cut, only what is certain, and [`Self::has_hole`] asks for another.
    pub fn apply_read(&mut self, read: ReadResult) -> Vec<ProcessEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let target = read.next_seq.saturating_sub(1);
        // Ending on a chunk while it says the process exited or closed, the read was cut (or the
        // chunk is simply the newest event, output after the exit, and the next read returns
        // nothing new). A read of a running process infers nothing past itself anyway.
        let cut = (read.exited || read.closed)
            && read.chunks.last().is_some_and(|chunk| chunk.seq == target);
        self.read_again = cut;
        for chunk in read.chunks {
            if chunk.seq > self.last_seq {
                self.ahead.entry(chunk.seq).or_insert(ProcessEvent::Output {
                    seq: chunk.seq,
                    stream: chunk.stream,
                    data: chunk.chunk.0.into(),
                });
            }
        }
        let known = |ahead: &BTreeMap<u64, ProcessEvent>, pred: fn(&ProcessEvent) -> bool| {
            ahead.values().any(pred)
        };
        if read.closed
            && !cut
            && target > self.last_seq
            && !known(&self.ahead, |e| matches!(e, ProcessEvent::Closed { .. }))
        {
            self.ahead
                .insert(target, ProcessEvent::Closed { seq: target });
        }
        let mut holes = self.holes_through(target);
        if read.exited
            && !self.exited
            && !known(&self.ahead, |e| matches!(e, ProcessEvent::Exited { .. }))
        {
            let exit_seq = infer_exit_seq(&mut holes, read.first_retained_seq, cut);
            let event = ProcessEvent::Exited {
                seq: exit_seq.unwrap_or(self.last_seq),
                exit_code: read.exit_code.unwrap_or(-1),
                sandbox_denied: read.sandbox_denied,
                reason: read.details.reason,
            };
            match exit_seq {
                Some(seq) => {
                    self.ahead.insert(seq, event);
                }
                // Past a read that may have been cut: the next read finds it.
                None if cut => {}
                // Its seq was lost in an earlier gap; it still must not be lost itself.
                None => {
                    self.exited = true;
                    out.push(event);
                }
            }
        }
        for (from, to) in holes {
            self.ahead.insert(
                from,
                ProcessEvent::Gap {
                    from_seq: from,
                    to_seq: to,
                },
            );
        }
        self.drain_contiguous(&mut out);
        out
    }

    /// The seq ranges in (last_seq, target] for which no event is known.
    fn holes_through(&self, target: u64) -> Vec<(u64, u64)> {
        let mut holes = Vec::new();
        let mut next = self.last_seq + 1;
        if target < next {
            return holes;
        }
        for &seq in self.ahead.range(next..=target).map(|(seq, _)| seq) {
            if seq > next {
                holes.push((next, seq - 1));
            }
            next = seq + 1;
        }
        if next <= target {
            holes.push((next, target));
        }
        holes
    }

    fn drain_contiguous(&mut self, out: &mut Vec<ProcessEvent>) {
        while let Some(entry) = self.ahead.first_entry() {
            let seq = *entry.key();
            let event = entry.get();
            let end = match event {
                ProcessEvent::Gap { to_seq, .. } => *to_seq,
                _ => seq,
            };
            if seq != self.last_seq + 1 {
                break;
            }
            let event = entry.remove();
            self.last_seq = end;
            self.exited |= matches!(event, ProcessEvent::Exited { .. });
            let last = event.is_final();
            out.push(event);
            if last {
                self.finish();
                return;
            }
        }
    }

    /// Marks the process done; later events are ignored.
    pub fn finish(&mut self) {
        self.finished = true;
        self.ahead.clear();
    }
}

/// Picks the exited event's seq among the holes and removes it from them. Seqs at or after
/// `first_retained` cannot be evicted output, so a hole there is a terminal event; otherwise a
/// single one-seq hole is the only unambiguous choice, unless `certain_only`.
fn infer_exit_seq(
    holes: &mut Vec<(u64, u64)>,
    first_retained: u64,
    certain_only: bool,
) -> Option<u64> {
    if certain_only
        && !holes
            .iter()
            .any(|&(_, to)| first_retained > 0 && to >= first_retained)
    {
        return None;
    }
    let total: u64 = holes.iter().map(|(from, to)| to - from + 1).sum();
    let index = if first_retained > 0 {
        holes
            .iter()
            .position(|&(_, to)| to >= first_retained)
            .or_else(|| holes.len().checked_sub(1))?
    } else if total == 1 {
        0
    } else {
        holes.len().checked_sub(1)?
    };
    let (from, to) = holes[index];
    let seq = if first_retained > 0 && to >= first_retained {
        from.max(first_retained)
    } else {
        to
    };
    holes.remove(index);
    if from < seq {
        holes.insert(index, (from, seq - 1));
    }
    if seq < to {
        let at = if from < seq { index + 1 } else { index };
        holes.insert(at, (seq + 1, to));
    }
    Some(seq)
}

struct Route {
    log: SeqLog,
    events: mpsc::UnboundedSender<ProcessEvent>,
    catching_up: bool,
    /// The recovery generation when its start was sent; None once the start was answered.
    /// A recovery passes over a start still in flight: the daemon it resumes on may not have
    /// it yet, and the start, repeated on the new connection, is what makes it known there.
    starting: Option<u64>,
}

#[derive(Default)]
struct Routes {
    map: HashMap<String, Route>,
    /// Counts recoveries that listed the unfinished processes.
    recoveries: u64,
}

/// All processes of a client, keyed by process id.
pub struct Router {
    routes: Mutex<Routes>,
    /// Process ids whose events wait behind a hole; a worker reads them to fill it.
    holes: mpsc::UnboundedSender<String>,
    /// `fs/changed` by watch id.
    watches: Mutex<HashMap<String, mpsc::UnboundedSender<ChangedNotification>>>,
}

impl Router {
    pub fn new(holes: mpsc::UnboundedSender<String>) -> Self {
        Self {
            routes: Mutex::new(Routes::default()),
            holes,
            watches: Mutex::new(HashMap::new()),
        }
    }

    /// Registers a process before it is started, so that no early notification is lost.
    /// Returns None if the id is in use.
    pub fn register(&self, id: &str) -> Option<mpsc::UnboundedReceiver<ProcessEvent>> {
        self.insert(id, SeqLog::default(), false, true)
    }

    /// Registers a process started elsewhere (another client, an earlier connection), whose
    /// events up to `after_seq` are not wanted; [`Self::request_catch_up`] then reads the rest.
    pub fn register_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Option<mpsc::UnboundedReceiver<ProcessEvent>> {
        let log = SeqLog {
            last_seq: after_seq,
            ..SeqLog::default()
        };
        // Pushed events wait for the catch-up rather than each asking for one.
        self.insert(id, log, true, false)
    }

    /// `start_in_flight`: registered before its start is sent (see [`Route::starting`]).
    fn insert(
        &self,
        id: &str,
        log: SeqLog,
        catching_up: bool,
        start_in_flight: bool,
    ) -> Option<mpsc::UnboundedReceiver<ProcessEvent>> {
        let mut routes = self.routes.lock().unwrap();
        if routes.map.contains_key(id) {
            return None;
        }
        let (events, receiver) = mpsc::unbounded_channel();
        let route = Route {
            log,
            events,
            catching_up,
            starting: start_in_flight.then_some(routes.recoveries),
        };
        routes.map.insert(id.to_owned(), route);
        Some(receiver)
    }

    /// Has the hole worker read `id` from its last delivered seq on.
    pub fn request_catch_up(&self, id: &str) {
        let _ = self.holes.send(id.to_owned());
    }

    pub fn unregister(&self, id: &str) {
        self.routes.lock().unwrap().map.remove(id);
    }

    /// The start of `id` was answered. Returns true when a recovery passed over it meanwhile:
    /// then the caller catches it up, since what the old connection carried may be lost.
    pub fn started(&self, id: &str) -> bool {
        let mut routes = self.routes.lock().unwrap();
        let recoveries = routes.recoveries;
        let Some(route) = routes.map.get_mut(id) else {
            return false;
        };
        route
            .starting
            .take()
            .is_some_and(|since| since != recoveries)
    }

    pub fn notification(&self, notification: Notification) {
        let (id, seq, event) = match notification {
            Notification::Output(n) => (
                n.process_id,
                n.seq,
                ProcessEvent::Output {
                    seq: n.seq,
                    stream: n.stream,
                    data: n.data,
                },
            ),
            Notification::Exited(n) => (
                n.process_id,
                n.seq,
                ProcessEvent::Exited {
                    seq: n.seq,
                    exit_code: n.exit_code,
                    sandbox_denied: n.sandbox_denied,
                    reason: n.details.reason,
                },
            ),
            Notification::Closed(n) => (n.process_id, n.seq, ProcessEvent::Closed { seq: n.seq }),
            Notification::InputWait(n) => return self.input_wait(&n.process_id, n.after_seq),
            Notification::Changed(n) => return self.changed(n),
        };
        self.update(&id, |log| log.push(seq, event));
    }

    /// Routes the `fs/changed` of `watch_id` to the receiver returned.
    pub fn register_watch(&self, watch_id: &str) -> mpsc::UnboundedReceiver<ChangedNotification> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.watches
            .lock()
            .unwrap()
            .insert(watch_id.to_owned(), sender);
        receiver
    }

    pub fn unregister_watch(&self, watch_id: &str) {
        self.watches.lock().unwrap().remove(watch_id);
    }

    fn changed(&self, notification: ChangedNotification) {
        if let Some(sender) = self.watches.lock().unwrap().get(&notification.watch_id) {
            let _ = sender.send(notification);
        }
    }

    /// Passed on when it follows the last event delivered: one that arrives behind a hole is
    /// stale by the time the hole is filled (`waitingForInput` on a read tells the truth).
    fn input_wait(&self, id: &str, after_seq: u64) {
        let routes = self.routes.lock().unwrap();
        if let Some(route) = routes.map.get(id) {
            if route.log.last_seq() == after_seq && !route.log.has_hole() {
                let _ = route.events.send(ProcessEvent::InputWait { after_seq });
            }
        }
    }

    /// Applies a catch-up read; returns false if the process is unknown.
    pub fn apply_read(&self, id: &str, read: ReadResult) -> bool {
        self.update(id, |log| log.apply_read(read))
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut SeqLog) -> Vec<ProcessEvent>) -> bool {
        let mut routes = self.routes.lock().unwrap();
        let Some(route) = routes.map.get_mut(id) else {
            return false;
        };
        for event in change(&mut route.log) {
            let _ = route.events.send(event);
        }
        if route.log.is_finished() {
            routes.map.remove(id);
        } else if route.log.has_hole() && !route.catching_up {
            route.catching_up = true;
            let _ = self.holes.send(id.to_owned());
        }
        true
    }

    /// Starts a catch-up of `id` unless one is running; returns its `afterSeq`.
    pub fn begin_catch_up(&self, id: &str) -> Option<u64> {
        let mut routes = self.routes.lock().unwrap();
        let route = routes.map.get_mut(id)?;
        route.catching_up = true;
        Some(route.log.last_seq())
    }

    /// Ends a catch-up; returns true if events still wait behind a hole (read again).
    pub fn end_catch_up(&self, id: &str) -> bool {
        let mut routes = self.routes.lock().unwrap();
        let Some(route) = routes.map.get_mut(id) else {
            return false;
        };
        route.catching_up = route.log.has_hole();
        route.catching_up
    }

    /// Ids of processes whose last event has not been delivered, for a recovery to catch up:
    /// those whose start was answered (see [`Route::starting`]).
    pub fn unfinished(&self) -> Vec<String> {
        let mut routes = self.routes.lock().unwrap();
        routes.recoveries += 1;
        let started = routes
            .map
            .iter()
            .filter(|(_, route)| route.starting.is_none());
        started.map(|(id, _)| id.clone()).collect()
    }

    /// Fails every unfinished process (the session is gone).
    pub fn fail_all(&self, message: &str) {
        let mut routes = self.routes.lock().unwrap();
        for (_, route) in routes.map.drain() {
            let _ = route.events.send(ProcessEvent::Failed {
                message: message.to_owned(),
            });
        }
    }

    /// Fails one process whose catch-up is impossible.
    pub fn fail(&self, id: &str, message: &str) {
        if let Some(route) = self.routes.lock().unwrap().map.remove(id) {
            let _ = route.events.send(ProcessEvent::Failed {
                message: message.to_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
