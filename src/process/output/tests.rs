//! The log's rules, without a process: seqs, eviction and receipt, reads, restoring.

use super::*;

/// Spans of `n` bytes, one after the other, and a loader of them.
fn data(n: usize) -> Span {
    thread_local!(static END: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
    let offset = END.with(|end| end.replace(end.get() + n as u64));
    Span {
        offset,
        len: n as u64,
    }
}

fn load(chunk: &Stored) -> Option<Bytes> {
    Some(Bytes::from(vec![b'x'; chunk.span.len as usize]))
}

#[test]
fn seq_is_shared_by_output_exit_and_close() {
    let mut log = OutputLog::new(1024, 10, false);
    log.push(OutputStream::Stdout, data(1), false);
    log.push(OutputStream::Stderr, data(1), false);
    log.record_exit(Exit {
        code: 7,
        ..Exit::default()
    });
    log.record_closed();
    let snapshot = log.read(0, None, usize::MAX);
    assert_eq!(
        snapshot.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(snapshot.next_seq, 5);
    let seqs: Vec<u64> = log.undelivered(10).iter().map(Event::seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

#[test]
fn attached_logs_wait_for_receipt_and_detached_logs_evict_visibly() {
    let mut log = OutputLog::new(10, 100, false);
    log.push(OutputStream::Stdout, data(8), false);
    log.push(OutputStream::Stdout, data(8), false);
    log.mark_delivered(2);
    assert!(
        log.evict(true, &mut Vec::new()),
        "output delivered but not received must not be dropped while attached"
    );
    assert_eq!(log.retention().unreceived_bytes, 16);
    log.mark_received(1);
    assert!(!log.evict(true, &mut Vec::new()));
    assert_eq!(log.read(0, None, usize::MAX).first_retained_seq, 2);
    assert_eq!(
        log.retention(),
        Retention {
            retained_bytes: 8,
            unreceived_bytes: 8
        }
    );
    log.push(OutputStream::Stdout, data(8), false);
    assert!(!log.evict(false, &mut Vec::new()));
    let snapshot = log.read(0, None, usize::MAX);
    assert!(snapshot.truncated);
    assert_eq!(snapshot.first_retained_seq, 3);
    assert!(!log.read(2, None, usize::MAX).truncated);
}

#[test]
fn a_pausing_log_waits_for_receipt_even_detached() {
    let mut log = OutputLog::new(10, 100, true);
    log.push(OutputStream::Stdout, data(8), false);
    log.push(OutputStream::Stdout, data(8), false);
    assert!(log.evict(false, &mut Vec::new()), "nothing is dropped");
    // Receipt beyond what exists counts only what exists.
    log.mark_received(99);
    let mut evicted = Vec::new();
    assert!(!log.evict(false, &mut evicted));
    assert_eq!(evicted.len(), 1, "over the limit, received output goes");
    log.push(OutputStream::Stdout, data(8), false);
    assert!(!log.evict(false, &mut Vec::new()), "seq 2 was received");
    log.push(OutputStream::Stdout, data(8), false);
    assert!(log.evict(false, &mut Vec::new()), "seq 3 was not");
    assert_eq!(log.retention().unreceived_bytes, 16);
    assert!(!log.read(2, None, usize::MAX).truncated);
}

#[test]
fn what_a_new_connection_acknowledges_counts_once_the_gap_before_it_is_read() {
    let mut log = OutputLog::new(1024, 100, true);
    for _ in 0..6 {
        log.push(OutputStream::Stdout, data(1), false);
    }
    // 1..=2 decoded on the first connection, 3..=4 sent to it as it died, 5.. to the next.
    log.mark_acknowledged(1, 2);
    log.mark_acknowledged(5, 6);
    assert_eq!(log.received_seq, 2, "3 and 4 may never have arrived");
    log.mark_received(4);
    assert_eq!(log.received_seq, 6, "the gap is read: 5 and 6 count");
}

#[test]
fn receipt_is_wanted_once_a_quarter_of_the_budget_is_delivered_unreceived() {
    let mut log = OutputLog::new(100, 1000, false);
    for _ in 0..3 {
        log.push(OutputStream::Stdout, data(10), false);
    }
    assert!(!log.wants_receipt(), "nothing delivered yet");
    log.mark_delivered(2);
    assert!(!log.wants_receipt(), "20 of 100 bytes");
    log.mark_delivered(3);
    assert!(log.wants_receipt(), "30 of 100 bytes");
    log.mark_received(2);
    assert!(!log.wants_receipt());
}

#[test]
fn max_bytes_always_returns_the_first_chunk() {
    let mut log = OutputLog::new(1024, 10, false);
    log.push(OutputStream::Stdout, data(5), false);
    log.push(OutputStream::Stdout, data(5), false);
    let snapshot = log.read(0, Some(3), usize::MAX);
    assert_eq!(snapshot.chunks.len(), 1);
    assert_eq!(snapshot.next_seq, 2);
    assert_eq!(log.read(0, Some(10), usize::MAX).chunks.len(), 2);
}

#[test]
fn a_log_restored_from_its_records_reads_as_the_original() {
    let mut original = OutputLog::new(20, 100, false);
    let mut records = Vec::new();
    for stream in [
        OutputStream::Stdout,
        OutputStream::Stderr,
        OutputStream::Stdout,
    ] {
        records.extend(original.push(stream, data(8), false));
    }
    let mut evicted = Vec::new();
    original.evict(false, &mut evicted);
    records.extend(original.take_unjournaled());
    records.push(Record::Evicted {
        through: evicted.last().unwrap().seq,
    });
    records.extend(original.record_exit(Exit {
        code: 3,
        ..Exit::default()
    }));
    records.extend(original.record_closed());
    let mut restored = OutputLog::new(20, 100, false);
    restored.restore(records);
    let (a, b) = (
        original.read(0, None, usize::MAX).load(load, false),
        restored.read(0, None, usize::MAX).load(load, false),
    );
    let seqs = |s: &ReadSnapshot| s.chunks.iter().map(|c| c.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&a), seqs(&b));
    assert_eq!(seqs(&b), [2, 3]);
    assert_eq!(
        (
            a.next_seq,
            a.first_retained_seq,
            a.truncated,
            a.exit_code,
            a.closed
        ),
        (
            b.next_seq,
            b.first_retained_seq,
            b.truncated,
            b.exit_code,
            b.closed
        )
    );
    // Everything restored counts as delivered: a successor pushes only what comes next.
    assert!(restored.undelivered(10).is_empty());
}

#[test]
fn attached_output_no_reader_has_seen_grows_the_last_chunk() {
    let mut log = OutputLog::new(1 << 20, 100, false);
    let first = data(4);
    assert!(log.push(OutputStream::Stdout, first, true).is_none());
    let grown = Span {
        offset: first.end(),
        len: 6,
    };
    assert!(
        log.push(OutputStream::Stdout, grown, true).is_none(),
        "a chunk that may still grow is not journaled yet"
    );
    assert_eq!(log.retention().retained_bytes, 10);
    // Handed to a connection: sealed, the next bytes are a chunk of their own; the caller
    // journals the chunk as it grew before anyone sees it.
    assert_eq!(log.undelivered(10).len(), 1);
    let record = log.take_unjournaled();
    assert!(
        matches!(record, Some(Record::Output { seq: 1, span, .. }) if span == Span { offset: first.offset, len: 10 })
    );
    assert!(log.take_unjournaled().is_none());
    let after = Span {
        offset: first.offset + 10,
        len: 5,
    };
    assert!(log.push(OutputStream::Stdout, after, true).is_none());
    // Not across streams, gaps, events, a read, or the size limit; nor without `coalesce`.
    // Each new chunk hands over the record of the one before it.
    let seq_of = |record: Option<Record>| match record {
        Some(Record::Output { seq, .. }) => Some(seq),
        _ => None,
    };
    // `len` more bytes of stdout, right after the last chunk.
    let stdout = |log: &mut OutputLog, len: u64, coalesce: bool| {
        let offset = log.chunks.back().unwrap().span.end();
        seq_of(log.push(OutputStream::Stdout, Span { offset, len }, coalesce))
    };
    assert_eq!(
        seq_of(log.push(OutputStream::Stderr, data(1), true)),
        Some(2)
    );
    assert_eq!(stdout(&mut log, 1, false), Some(3));
    log.read(3, None, usize::MAX);
    assert_eq!(seq_of(log.take_unjournaled()), Some(4));
    assert_eq!(stdout(&mut log, 1, true), None, "seq 4's record was taken");
    assert_eq!(stdout(&mut log, MAX_CHUNK_BYTES, true), Some(5));
    assert_eq!(seq_of(log.take_unjournaled()), Some(6));
    log.record_exit(Exit::default());
    assert_eq!(stdout(&mut log, 1, true), None);
    assert_eq!(seq_of(log.take_unjournaled()), Some(8));
}

#[test]
fn a_chunk_journaled_again_is_restored_as_it_grew() {
    let records = [
        Record::Output {
            seq: 1,
            stream: OutputStream::Stdout,
            span: Span { offset: 0, len: 4 },
        },
        Record::Output {
            seq: 1,
            stream: OutputStream::Stdout,
            span: Span { offset: 0, len: 10 },
        },
        Record::Output {
            seq: 2,
            stream: OutputStream::Stdout,
            span: Span { offset: 10, len: 5 },
        },
    ];
    let mut log = OutputLog::new(1 << 20, 100, false);
    log.restore(records);
    let spans: Vec<(u64, u64)> = log.chunks.iter().map(|c| (c.seq, c.span.len)).collect();
    assert_eq!(spans, [(1, 10), (2, 5)]);
    assert_eq!(log.retention().retained_bytes, 15);
    // Restored chunks may have been handed out: none grows.
    let more = Span { offset: 15, len: 1 };
    log.push(OutputStream::Stdout, more, true);
    assert!(matches!(
        log.take_unjournaled(),
        Some(Record::Output { seq: 3, .. })
    ));
}
