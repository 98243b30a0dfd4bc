//! Output spans a connection's writer sends straight from their file (`sendfile`, see
//! `transport::zero_copy`), and the freeing of evicted spans that waits for them: a hole punched
//! under a span still to be sent would send zeros in place of the output.
//!
//! Invariant: no span ending after the lowest pinned offset of its stream is freed while that
//! pin lives. While a client is attached only received chunks are evicted, and they come before
//! every chunk in flight, so a punch waits only when a detached process's output is evicted
//! from under messages still queued to its last connection.

use super::output::{stream_index, Stored};
use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct Pins {
    /// By stream index: pinned offsets, with how many pins each.
    pinned: [BTreeMap<u64, usize>; 2],
    /// Evicted chunks whose freeing waits for a pin.
    deferred: Vec<Stored>,
}

impl Pins {
    fn blocks(&self, chunk: &Stored) -> bool {
        self.pinned[stream_index(chunk.stream)]
            .first_key_value()
            .is_some_and(|(&lowest, _)| lowest < chunk.span.end())
    }

    pub(super) fn pin(&mut self, chunk: &Stored) {
        *self.pinned[stream_index(chunk.stream)]
            .entry(chunk.span.offset)
            .or_default() += 1;
    }

    /// Drops a pin of `chunk`; returns the evicted chunks now free.
    pub(super) fn unpin(&mut self, chunk: &Stored) -> Vec<Stored> {
        let pinned = &mut self.pinned[stream_index(chunk.stream)];
        if let Some(count) = pinned.get_mut(&chunk.span.offset) {
            *count -= 1;
            if *count == 0 {
                pinned.remove(&chunk.span.offset);
            }
        }
        let deferred = std::mem::take(&mut self.deferred);
        let (waiting, free) = deferred.into_iter().partition(|chunk| self.blocks(chunk));
        self.deferred = waiting;
        free
    }

    /// Of `evicted`, the chunks free now; the others wait for their pins.
    pub(super) fn release(&mut self, evicted: &[Stored]) -> Vec<Stored> {
        let (waiting, free): (Vec<_>, Vec<_>) =
            evicted.iter().partition(|chunk| self.blocks(chunk));
        self.deferred.extend(waiting);
        free
    }
}

#[cfg(test)]
mod tests {
    use super::super::output::Span;
    use super::*;
    use exec_server_protocol::process::OutputStream;

    fn chunk(seq: u64, offset: u64) -> Stored {
        Stored {
            seq,
            stream: OutputStream::Stdout,
            span: Span { offset, len: 10 },
        }
    }

    fn seqs(chunks: Vec<Stored>) -> Vec<u64> {
        chunks.iter().map(|chunk| chunk.seq).collect()
    }

    #[test]
    fn a_span_evicted_from_under_a_pin_is_freed_once_the_pin_drops() {
        let mut pins = Pins::default();
        pins.pin(&chunk(2, 10));
        pins.pin(&chunk(3, 20));
        // Received before the pinned ones: freed at once.
        assert_eq!(seqs(pins.release(&[chunk(1, 0)])), [1]);
        // Evicted from under the pins: each waits for the pins at or before it.
        assert_eq!(seqs(pins.release(&[chunk(2, 10), chunk(3, 20)])), [0u64; 0]);
        assert_eq!(seqs(pins.unpin(&chunk(2, 10))), [2]);
        assert_eq!(seqs(pins.unpin(&chunk(3, 20))), [3]);
        // Another stream's pins hold nothing of this one.
        let stderr = Stored {
            stream: OutputStream::Stderr,
            ..chunk(5, 0)
        };
        pins.pin(&stderr);
        assert_eq!(seqs(pins.release(&[chunk(4, 30)])), [4]);
        assert_eq!(seqs(pins.release(&[stderr])), [0u64; 0]);
        assert_eq!(seqs(pins.unpin(&stderr)), [5]);
    }
}
