//! The per-process event log: output chunks, the exit and the close, on one seq counter.
//!
//! Retention is bounded by bytes and chunks. While a connection is attached, a chunk is evicted
//! only after its notification was handed to that connection; otherwise the reader waits, which
//! backpressures the child instead of dropping output. While detached, the oldest chunks are
//! evicted, and reads say so (`firstRetainedSeq`, `truncated`): never a silent gap.

use bytes::Bytes;
use exec_server_protocol::process::{ExitDetails, OutputStream};
use std::collections::VecDeque;

#[derive(Clone, Debug)]
pub struct Chunk {
    pub seq: u64,
    pub stream: OutputStream,
    pub data: Bytes,
}

#[derive(Clone, Debug)]
pub enum Event {
    Output(Chunk),
    Exited { seq: u64, exit: Exit },
    Closed { seq: u64 },
}

impl Event {
    pub fn seq(&self) -> u64 {
        match self {
            Event::Output(chunk) => chunk.seq,
            Event::Exited { seq, .. } | Event::Closed { seq } => *seq,
        }
    }
}

/// How the process itself ended.
#[derive(Clone, Debug, Default)]
pub struct Exit {
    pub code: i32,
    pub sandbox_denied: bool,
    pub details: ExitDetails,
}

#[derive(Debug)]
pub struct OutputLog {
    chunks: VecDeque<Chunk>,
    retained_bytes: usize,
    max_bytes: usize,
    max_chunks: usize,
    next_seq: u64,
    /// Highest seq handed to an attached connection as a notification.
    delivered_seq: u64,
    /// Highest seq of an evicted chunk (0: nothing evicted).
    evicted_through: u64,
    exit: Option<(u64, Exit)>,
    closed_seq: Option<u64>,
}

/// What `process/read` returns, before encoding.
#[derive(Debug)]
pub struct ReadSnapshot {
    pub chunks: Vec<Chunk>,
    pub next_seq: u64,
    pub exit_code: Option<i32>,
    pub sandbox_denied: bool,
    pub details: ExitDetails,
    pub closed: bool,
    pub first_retained_seq: u64,
    pub truncated: bool,
    /// A terminal event the caller has not seen yet, or output, is available.
    pub ready: bool,
}

impl Drop for OutputLog {
    fn drop(&mut self) {
        crate::metrics::get()
            .retained_output_bytes
            .dec_by(self.retained_bytes as i64);
    }
}

impl OutputLog {
    pub fn new(max_bytes: usize, max_chunks: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            retained_bytes: 0,
            max_bytes,
            max_chunks,
            next_seq: 1,
            delivered_seq: 0,
            evicted_through: 0,
            exit: None,
            closed_seq: None,
        }
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    pub fn push(&mut self, stream: OutputStream, data: Bytes) {
        let seq = self.take_seq();
        self.retained_bytes += data.len();
        crate::metrics::get()
            .retained_output_bytes
            .inc_by(data.len() as i64);
        self.chunks.push_back(Chunk { seq, stream, data });
    }

    /// Evicts what may be evicted; returns true while the log is still over its limits, i.e.
    /// the reader must wait for delivery before reading more.
    pub fn evict(&mut self, attached: bool) -> bool {
        while self.over_limit() {
            let front = self.chunks.front().expect("over the limit means non-empty");
            if attached && front.seq > self.delivered_seq {
                return true;
            }
            let chunk = self.chunks.pop_front().expect("checked above");
            self.retained_bytes -= chunk.data.len();
            let metrics = crate::metrics::get();
            metrics
                .retained_output_bytes
                .dec_by(chunk.data.len() as i64);
            metrics.output_evictions.inc();
            self.evicted_through = chunk.seq;
        }
        false
    }

    fn over_limit(&self) -> bool {
        // One oversized chunk alone is kept: a read must always be able to return something.
        self.chunks.len() > 1
            && (self.retained_bytes > self.max_bytes || self.chunks.len() > self.max_chunks)
    }

    pub fn record_exit(&mut self, exit: Exit) {
        if self.exit.is_none() {
            let seq = self.take_seq();
            self.exit = Some((seq, exit));
        }
    }

    /// The exit's details change after it (the tree's final usage, an unconfirmed cleanup).
    pub fn exit_details_mut(&mut self) -> Option<&mut ExitDetails> {
        self.exit.as_mut().map(|(_, exit)| &mut exit.details)
    }

    pub fn record_closed(&mut self) {
        if self.closed_seq.is_none() {
            let seq = self.take_seq();
            self.closed_seq = Some(seq);
        }
    }

    pub fn exit_code(&self) -> Option<i32> {
        self.exit.as_ref().map(|(_, exit)| exit.code)
    }

    pub fn is_closed(&self) -> bool {
        self.closed_seq.is_some()
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn first_retained_seq(&self) -> u64 {
        self.chunks.front().map_or(self.next_seq, |chunk| chunk.seq)
    }

    fn chunks_after(&self, seq: u64) -> impl Iterator<Item = &Chunk> {
        let start = self.chunks.partition_point(|chunk| chunk.seq <= seq);
        self.chunks.range(start..)
    }

    pub fn read(&self, after_seq: u64, max_bytes: Option<usize>) -> ReadSnapshot {
        let mut chunks = Vec::new();
        let mut total = 0usize;
        for chunk in self.chunks_after(after_seq) {
            if let Some(max) = max_bytes {
                // The first chunk always goes out, so a small budget still makes progress.
                if !chunks.is_empty() && (total >= max || total + chunk.data.len() > max) {
                    break;
                }
            }
            total += chunk.data.len();
            chunks.push(chunk.clone());
        }
        let next_seq = match (max_bytes, chunks.last()) {
            (Some(_), Some(last)) => last.seq + 1,
            _ => self.next_seq,
        };
        let unseen_terminal = self.exit.is_some() && after_seq < self.next_seq - 1;
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
            truncated: self.evicted_through > after_seq,
        }
    }

    /// Events not yet handed to a connection, in seq order, at most `limit`.
    pub fn undelivered(&self, limit: usize) -> Vec<Event> {
        let after = self.delivered_seq;
        let mut events: Vec<Event> = self
            .chunks_after(after)
            .take(limit)
            .map(|chunk| Event::Output(chunk.clone()))
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
        events
    }

    pub fn mark_delivered(&mut self, seq: u64) {
        self.delivered_seq = self.delivered_seq.max(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn seq_is_shared_by_output_exit_and_close() {
        let mut log = OutputLog::new(1024, 10);
        log.push(OutputStream::Stdout, data(1));
        log.push(OutputStream::Stderr, data(1));
        log.record_exit(Exit {
            code: 7,
            ..Exit::default()
        });
        log.record_closed();
        let snapshot = log.read(0, None);
        assert_eq!(
            snapshot.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(snapshot.next_seq, 5);
        let seqs: Vec<u64> = log.undelivered(10).iter().map(Event::seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
    }

    #[test]
    fn attached_logs_wait_for_delivery_and_detached_logs_evict_visibly() {
        let mut log = OutputLog::new(10, 100);
        log.push(OutputStream::Stdout, data(8));
        log.push(OutputStream::Stdout, data(8));
        assert!(
            log.evict(true),
            "undelivered output must not be dropped while attached"
        );
        log.mark_delivered(1);
        assert!(!log.evict(true));
        assert_eq!(log.read(0, None).first_retained_seq, 2);
        log.push(OutputStream::Stdout, data(8));
        assert!(!log.evict(false));
        let snapshot = log.read(0, None);
        assert!(snapshot.truncated);
        assert_eq!(snapshot.first_retained_seq, 3);
        assert!(!log.read(2, None).truncated);
    }

    #[test]
    fn max_bytes_always_returns_the_first_chunk() {
        let mut log = OutputLog::new(1024, 10);
        log.push(OutputStream::Stdout, data(5));
        log.push(OutputStream::Stdout, data(5));
        let snapshot = log.read(0, Some(3));
        assert_eq!(snapshot.chunks.len(), 1);
        assert_eq!(snapshot.next_seq, 2);
        assert_eq!(log.read(0, Some(10)).chunks.len(), 2);
    }
}
