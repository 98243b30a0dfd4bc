//! The per-process event log: output chunks, the exit and the close, on one seq counter.
//!
//! Retention is bounded by bytes and chunks. A chunk is *received* once the client proved it
//! has it (a `process/read` after it, or the pong to a ping sent after its notification:
//! `super::delivery`). While a connection is attached, or always for a process started with
//! `onRetentionFull: "pause"`, only received chunks are evicted; otherwise the reader waits,
//! which backpressures the child instead of dropping output. While detached (`"evict"`), the
//! oldest chunks are evicted, and reads say so (`firstRetainedSeq`, `truncated`): never a
//! silent gap.
//!
//! The log holds where each chunk's bytes are ([`Span`]s of its stream's file,
//! `super::store`), not the bytes: reads and deliveries return [`Stored`] chunks, which the
//! caller loads (outside any lock). Every change is also a [`Record`], which the daemon journals
//! and a successor replays ([`OutputLog::restore`]).

use bytes::Bytes;
use exec_server_protocol::process::{ExitDetails, OutputStream};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A chunk as read or delivered: its bytes loaded.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    pub seq: u64,
    pub stream: OutputStream,
    pub data: Bytes,
}

/// The largest chunk pushes grow (see [`OutputLog::push`]): what one move from a full pipe
/// gives, so that no message is larger than before chunks grew.
const MAX_CHUNK_BYTES: u64 = crate::os::pipe::OUTPUT_PIPE_BYTES as u64;

/// The file of a stream: a terminal's output is in the first.
pub(crate) fn stream_index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout | OutputStream::Pty => 0,
        OutputStream::Stderr => 1,
    }
}

/// Where a chunk's bytes are in its stream's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Span {
    pub offset: u64,
    pub len: u64,
}

impl Span {
    pub(crate) fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A retained chunk: its bytes stay in the stream's file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stored {
    pub seq: u64,
    pub stream: OutputStream,
    pub span: Span,
}

impl Stored {
    pub(crate) fn loaded(&self, data: Bytes) -> Chunk {
        Chunk {
            seq: self.seq,
            stream: self.stream,
            data,
        }
    }
}

/// An event, its output chunk as stored (the caller loads it).
#[derive(Clone, Debug)]
pub(crate) enum Event {
    Output(Stored),
    Exited { seq: u64, exit: Exit },
    Closed { seq: u64 },
}

impl Event {
    pub(crate) fn seq(&self) -> u64 {
        match self {
            Event::Output(chunk) => chunk.seq,
            Event::Exited { seq, .. } | Event::Closed { seq } => *seq,
        }
    }
}

/// How the process itself ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Exit {
    pub code: i32,
    pub sandbox_denied: bool,
    pub details: ExitDetails,
}

/// A change of the log, as journaled: replaying them in order rebuilds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Record {
    Output {
        seq: u64,
        stream: OutputStream,
        span: Span,
    },
    Exit {
        seq: u64,
        exit: Exit,
    },
    /// The exit's details changed (the tree's final usage, an unconfirmed cleanup).
    ExitDetails(ExitDetails),
    Closed {
        seq: u64,
    },
    /// Chunks up to this seq were evicted.
    Evicted {
        through: u64,
    },
}

#[derive(Debug)]
pub(crate) struct OutputLog {
    chunks: VecDeque<Stored>,
    retained_bytes: usize,
    max_bytes: usize,
    max_chunks: usize,
    next_seq: u64,
    /// Highest seq handed to an attached connection as a notification.
    delivered_seq: u64,
    /// Highest seq the client proved it received, with everything before it.
    received_seq: u64,
    /// What the attached connection acknowledged: the events it was sent, from the first seq
    /// through the last. They count once everything before them is received too: events sent
    /// to a connection that died before the client decoded them leave a gap, which the client
    /// fills with `process/read`.
    acknowledged: Option<(u64, u64)>,
    /// Full retention waits for receipt even while detached (`onRetentionFull: "pause"`).
    pause: bool,
    /// A reader other than a connection follows the output (an envd stream): full retention
    /// waits for it as for an attached connection.
    followed: bool,
    /// Highest seq of an evicted chunk (0: nothing evicted).
    evicted_through: u64,
    /// Highest seq of a chunk evicted before the client received it: lost to it.
    lost_through: u64,
    /// Highest seq a reader was handed or named (a delivery, a read): its chunk is sealed, and
    /// output after it starts a chunk of its own.
    sealed_seq: u64,
    /// The last chunk's record while no reader has seen the chunk and it may still grow: it is
    /// journaled once it cannot grow (another event follows) or before a reader sees it
    /// ([`OutputLog::take_unjournaled`]), so a busy stream writes a journal line per chunk,
    /// not per move. A crash loses at most this record: its bytes are in the file, which a
    /// successor adopts as new chunks (`super::adopt`) under the seq nobody saw.
    unjournaled: Option<Record>,
    exit: Option<(u64, Exit)>,
    closed_seq: Option<u64>,
}

/// What `process/read` returns, before encoding (its chunks as stored, then loaded).
#[derive(Debug)]
pub(crate) struct ReadSnapshot<C = Chunk> {
    pub chunks: Vec<C>,
    pub next_seq: u64,
    pub exit_code: Option<i32>,
    pub sandbox_denied: bool,
    pub details: ExitDetails,
    pub closed: bool,
    pub first_retained_seq: u64,
    pub truncated: bool,
    pub retention: Retention,
    /// A terminal event the caller has not seen yet, or output, is available.
    pub ready: bool,
}

/// What the log holds: bytes retained, and how many of them the client has not received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Retention {
    pub retained_bytes: u64,
    pub unreceived_bytes: u64,
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        crate::metrics::get()
            .retained_output_bytes
            .dec_by(self.retained_bytes as i64);
    }
}

impl OutputLog {
    pub(crate) fn new(max_bytes: usize, max_chunks: usize, pause: bool) -> Self {
        Self {
            chunks: VecDeque::new(),
            retained_bytes: 0,
            max_bytes,
            max_chunks,
            next_seq: 1,
            delivered_seq: 0,
            received_seq: 0,
            acknowledged: None,
            pause,
            followed: false,
            evicted_through: 0,
            lost_through: 0,
            sealed_seq: 0,
            unjournaled: None,
            exit: None,
            closed_seq: None,
        }
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Records `span` of `stream`: a chunk of its own, or, with `coalesce`, the growth of the
    /// last event when that is a chunk of the same stream just before it that no reader has
    /// seen, up to [`MAX_CHUNK_BYTES`]. A busy stream whose delivery lags behind its reads is
    /// thus sent in fewer, larger chunks. Returns the record to journal now: the previous
    /// chunk's, when this one starts a chunk (its own waits, see `unjournaled`).
    pub(crate) fn push(
        &mut self,
        stream: OutputStream,
        span: Span,
        coalesce: bool,
    ) -> Option<Record> {
        let last_seq = self.next_seq - 1;
        if let Some(&last) = self.chunks.back().filter(|last| {
            coalesce
                && last.seq == last_seq
                && last.seq > self.sealed_seq
                && last.stream == stream
                && last.span.end() == span.offset
                && last.span.len + span.len <= MAX_CHUNK_BYTES
        }) {
            let grown = self.grow_last(Span {
                offset: last.span.offset,
                len: last.span.len + span.len,
            });
            // Journaled before, when an eviction followed it: journaled again as it grew.
            self.unjournaled = Some(Record::Output {
                seq: grown.seq,
                stream,
                span: grown.span,
            });
            return None;
        }
        let seq = self.take_seq();
        self.retain(Stored { seq, stream, span });
        self.unjournaled
            .replace(Record::Output { seq, stream, span })
    }

    /// The last chunk's record if it is not journaled yet, to journal before a reader sees
    /// the chunk or another record follows it.
    pub(crate) fn take_unjournaled(&mut self) -> Option<Record> {
        self.unjournaled.take()
    }

    fn retain(&mut self, chunk: Stored) {
        self.count_retained(chunk.span.len as i64);
        self.chunks.push_back(chunk);
    }

    /// The last chunk, grown to `span` (which starts where it does).
    fn grow_last(&mut self, span: Span) -> Stored {
        let last = self.chunks.back_mut().expect("checked by the caller");
        let grown = span.len - last.span.len;
        last.span = span;
        let last = *last;
        self.count_retained(grown as i64);
        last
    }

    /// `len` bytes more retained (fewer, when negative), in the log and in the metric.
    fn count_retained(&mut self, len: i64) {
        self.retained_bytes = (self.retained_bytes as i64 + len) as usize;
        crate::metrics::get().retained_output_bytes.inc_by(len);
    }

    /// Evicts what may be evicted, into `evicted`; returns true while the log is still over
    /// its limits, i.e. the reader must wait for receipt before reading more.
    pub(crate) fn evict(&mut self, attached: bool, evicted: &mut Vec<Stored>) -> bool {
        while self.over_limit() {
            let front = self.chunks.front().expect("over the limit means non-empty");
            if (attached || self.pause || self.followed) && front.seq > self.received_seq {
                return true;
            }
            let chunk = self.drop_front();
            crate::metrics::get().output_evictions.inc();
            evicted.push(chunk);
        }
        false
    }

    fn drop_front(&mut self) -> Stored {
        let chunk = self.chunks.pop_front().expect("checked by the caller");
        self.count_retained(-(chunk.span.len as i64));
        self.evicted_through = chunk.seq;
        if chunk.seq > self.received_seq {
            self.lost_through = chunk.seq;
        }
        chunk
    }

    /// Rebuilds a log from its records, in journal order; everything in it counts as
    /// delivered (a successor's client catches up with `process/read`).
    pub(crate) fn restore(&mut self, records: impl IntoIterator<Item = Record>) {
        for record in records {
            match record {
                // A chunk journaled again has grown (see `push`).
                Record::Output { seq, span, .. }
                    if self.chunks.back().is_some_and(|last| last.seq == seq) =>
                {
                    self.grow_last(span);
                }
                Record::Output { seq, stream, span } => {
                    self.next_seq = seq + 1;
                    self.retain(Stored { seq, stream, span });
                }
                Record::Exit { seq, exit } => {
                    self.next_seq = seq + 1;
                    self.exit = Some((seq, exit));
                }
                Record::ExitDetails(details) => {
                    if let Some(current) = self.exit_details_mut() {
                        *current = details;
                    }
                }
                Record::Closed { seq } => {
                    self.next_seq = seq + 1;
                    self.closed_seq = Some(seq);
                }
                Record::Evicted { through } => {
                    while self.chunks.front().is_some_and(|c| c.seq <= through) {
                        self.drop_front();
                    }
                }
            }
        }
        self.delivered_seq = self.next_seq - 1;
        // A predecessor may have handed out any of them.
        self.sealed_seq = self.delivered_seq;
    }

    /// Whether a reader other than a connection follows the output (see `followed`).
    pub(crate) fn set_followed(&mut self, followed: bool) {
        self.followed = followed;
    }

    /// The client proved it received everything up to `seq`.
    pub(crate) fn mark_received(&mut self, seq: u64) {
        self.received_seq = self.received_seq.max(seq.min(self.next_seq - 1));
        self.sealed_seq = self.sealed_seq.max(self.received_seq);
        self.settle();
    }

    /// The attached connection acknowledged the events sent to it, `from` (the first sent to
    /// it) `through` a seq.
    pub(crate) fn mark_acknowledged(&mut self, from: u64, through: u64) {
        self.acknowledged = Some((from, through));
        self.settle();
    }

    /// Acknowledged events count as received once nothing before them is missing (evicted
    /// output cannot be received any more: it is no gap).
    fn settle(&mut self) {
        if let Some((from, through)) = self.acknowledged {
            if self.received_seq.max(self.evicted_through) + 1 >= from {
                self.received_seq = self.received_seq.max(through.min(self.next_seq - 1));
            }
        }
    }

    /// Output after `after_seq` was evicted before the client received it.
    pub(crate) fn lost_after(&self, after_seq: u64) -> bool {
        self.lost_through > after_seq
    }

    pub(crate) fn retention(&self) -> Retention {
        let received = self
            .chunks
            .partition_point(|chunk| chunk.seq <= self.received_seq);
        let unreceived: u64 = self.chunks.range(received..).map(|c| c.span.len).sum();
        Retention {
            retained_bytes: self.retained_bytes as u64,
            unreceived_bytes: unreceived,
        }
    }

    /// Delivered output the client has not yet proved it received is a quarter of what may be
    /// retained: time to ask for proof, before the reader has to wait for it.
    pub(crate) fn wants_receipt(&self) -> bool {
        let start = self
            .chunks
            .partition_point(|chunk| chunk.seq <= self.received_seq);
        let (mut bytes, mut count) = (0u64, 0usize);
        // Stops at the threshold: at most a quarter of the chunk limit is visited.
        for chunk in self.chunks.range(start..) {
            if chunk.seq > self.delivered_seq {
                return false;
            }
            (bytes, count) = (bytes + chunk.span.len, count + 1);
            if 4 * bytes >= self.max_bytes as u64 || 4 * count >= self.max_chunks {
                return true;
            }
        }
        false
    }

    fn over_limit(&self) -> bool {
        // One oversized chunk alone is kept: a read must always be able to return something.
        self.chunks.len() > 1
            && (self.retained_bytes > self.max_bytes || self.chunks.len() > self.max_chunks)
    }

    pub(crate) fn record_exit(&mut self, exit: Exit) -> Option<Record> {
        if self.exit.is_some() {
            return None;
        }
        let seq = self.take_seq();
        self.exit = Some((seq, exit.clone()));
        Some(Record::Exit { seq, exit })
    }

    /// The exit's details change after it (the tree's final usage, an unconfirmed cleanup).
    pub(crate) fn exit_details_mut(&mut self) -> Option<&mut ExitDetails> {
        self.exit.as_mut().map(|(_, exit)| &mut exit.details)
    }

    pub(crate) fn record_closed(&mut self) -> Option<Record> {
        if self.closed_seq.is_some() {
            return None;
        }
        let seq = self.take_seq();
        self.closed_seq = Some(seq);
        Some(Record::Closed { seq })
    }

    pub(crate) fn retains_output(&self) -> bool {
        !self.chunks.is_empty()
    }

    pub(crate) fn exit_code(&self) -> Option<i32> {
        self.exit.as_ref().map(|(_, exit)| exit.code)
    }

    /// What the tree used, once the process exited.
    pub(crate) fn exit_usage(&self) -> Option<exec_server_protocol::process::ProcessUsage> {
        self.exit.as_ref().and_then(|(_, exit)| exit.details.usage)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed_seq.is_some()
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub(crate) fn first_retained_seq(&self) -> u64 {
        self.chunks.front().map_or(self.next_seq, |chunk| chunk.seq)
    }

    fn chunks_after(&self, seq: u64) -> impl Iterator<Item = &Stored> {
        let start = self.chunks.partition_point(|chunk| chunk.seq <= seq);
        self.chunks.range(start..)
    }

    /// Chunks after `after_seq`, up to `max_bytes` (the client's), else up to `default_max`.
    pub(crate) fn read(
        &mut self,
        after_seq: u64,
        max_bytes: Option<usize>,
        default_max: usize,
    ) -> ReadSnapshot<Stored> {
        let mut chunks = Vec::new();
        let mut total = 0usize;
        let mut cut = false;
        let max = max_bytes.unwrap_or(default_max);
        for chunk in self.chunks_after(after_seq) {
            let len = chunk.span.len as usize;
            // The first chunk always goes out, so a small budget still makes progress.
            if !chunks.is_empty() && (total >= max || total + len > max) {
                cut = true;
                break;
            }
            total += len;
            chunks.push(*chunk);
        }
        // A read with the client's budget, or cut by the default one, goes on after its last
        // chunk; any other after everything.
        let next_seq = match chunks.last() {
            Some(last) if cut || max_bytes.is_some() => last.seq + 1,
            _ => self.next_seq,
        };
        let unseen_terminal = self.exit.is_some() && after_seq < self.next_seq - 1;
        if let Some(last) = chunks.last() {
            self.sealed_seq = self.sealed_seq.max(last.seq);
        }
        ReadSnapshot {
            ready: !chunks.is_empty() || self.closed_seq.is_some() || unseen_terminal,
            chunks,
            next_seq,
            exit_code: self.exit_code(),
            sandbox_denied: self
                .exit
                .as_ref()
                .is_some_and(|(_, exit)| exit.sandbox_denied),
            details: self
                .exit
                .as_ref()
                .map(|(_, exit)| exit.details.clone())
                .unwrap_or_default(),
            closed: self.closed_seq.is_some(),
            first_retained_seq: self.first_retained_seq(),
            truncated: self.lost_after(after_seq),
            retention: self.retention(),
        }
    }

    /// Events not yet handed to a connection, in seq order, at most `limit`.
    pub(crate) fn undelivered(&mut self, limit: usize) -> Vec<Event> {
        let after = self.delivered_seq;
        let mut events: Vec<Event> = self
            .chunks_after(after)
            .take(limit)
            .map(|chunk| Event::Output(*chunk))
            .collect();
        if let Some((seq, exit)) = self.exit.as_ref().filter(|(seq, _)| *seq > after) {
            events.push(Event::Exited {
                seq: *seq,
                exit: exit.clone(),
            });
        }
        if let Some(seq) = self.closed_seq.filter(|seq| *seq > after) {
            events.push(Event::Closed { seq });
        }
        events.sort_by_key(Event::seq);
        events.truncate(limit);
        if let Some(last) = events.last() {
            self.sealed_seq = self.sealed_seq.max(last.seq());
        }
        events
    }

    /// Every event so far was handed to a connection (nothing is sealed by asking).
    pub(crate) fn delivered_all(&self) -> bool {
        let after = self.delivered_seq;
        self.chunks.back().is_none_or(|chunk| chunk.seq <= after)
            && self.exit.as_ref().is_none_or(|(seq, _)| *seq <= after)
            && self.closed_seq.is_none_or(|seq| seq <= after)
    }

    pub(crate) fn mark_delivered(&mut self, seq: u64) {
        self.delivered_seq = self.delivered_seq.max(seq);
    }
}

impl ReadSnapshot<Stored> {
    /// The snapshot with its chunks loaded; those for which `load` has nothing (evicted since
    /// the snapshot was taken) are left out, and `lost` says whether any of them was lost
    /// (evicted before the client received it).
    pub(crate) fn load(
        self,
        mut load: impl FnMut(&Stored) -> Option<Bytes>,
        lost: bool,
    ) -> ReadSnapshot {
        let chunks = self
            .chunks
            .iter()
            .filter_map(|chunk| Some(chunk.loaded(load(chunk)?)))
            .collect();
        let truncated = self.truncated || lost;
        ReadSnapshot {
            chunks,
            next_seq: self.next_seq,
            exit_code: self.exit_code,
            sandbox_denied: self.sandbox_denied,
            details: self.details,
            closed: self.closed,
            first_retained_seq: self.first_retained_seq,
            truncated,
            retention: self.retention,
            ready: self.ready,
        }
    }
}

#[cfg(test)]
mod tests;
