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
    log.push(OutputStream::Stdout, data(1));
    log.push(OutputStream::Stderr, data(1));
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
    log.push(OutputStream::Stdout, data(8));
    log.push(OutputStream::Stdout, data(8));
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
    log.push(OutputStream::Stdout, data(8));
    assert!(!log.evict(false, &mut Vec::new()));
    let snapshot = log.read(0, None, usize::MAX);
    assert!(snapshot.truncated);
    assert_eq!(snapshot.first_retained_seq, 3);
    assert!(!log.read(2, None, usize::MAX).truncated);
}

#[test]
fn a_pausing_log_waits_for_receipt_even_detached() {
    let mut log = OutputLog::new(10, 100, true);
    log.push(OutputStream::Stdout, data(8));
    log.push(OutputStream::Stdout, data(8));
    assert!(log.evict(false, &mut Vec::new()), "nothing is dropped");
    // Receipt beyond what exists counts only what exists.
    log.mark_received(99);
    let mut evicted = Vec::new();
    assert!(!log.evict(false, &mut evicted));
    assert_eq!(evicted.len(), 1, "over the limit, received output goes");
    log.push(OutputStream::Stdout, data(8));
    assert!(!log.evict(false, &mut Vec::new()), "seq 2 was received");
    log.push(OutputStream::Stdout, data(8));
    assert!(log.evict(false, &mut Vec::new()), "seq 3 was not");
    assert_eq!(log.retention().unreceived_bytes, 16);
    assert!(!log.read(2, None, usize::MAX).truncated);
}

#[test]
fn what_a_new_connection_acknowledges_counts_once_the_gap_before_it_is_read() {
    let mut log = OutputLog::new(1024, 100, true);
    for _ in 0..6 {
        log.push(OutputStream::Stdout, data(1));
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
        log.push(OutputStream::Stdout, data(10));
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
    log.push(OutputStream::Stdout, data(5));
    log.push(OutputStream::Stdout, data(5));
    let snapshot = log.read(0, Some(3), usize::MAX);
    assert_eq!(snapshot.chunks.len(), 1);
    assert_eq!(snapshot.next_seq, 2);
    assert_eq!(log.read(0, Some(10), usize::MAX).chunks.len(), 2);
}

#[test]
fn a_log_restored_from_its_records_reads_as_the_original() {
    let mut original = OutputLog::new(20, 100, false);
    let mut records = vec![
        original.push(OutputStream::Stdout, data(8)),
        original.push(OutputStream::Stderr, data(8)),
        original.push(OutputStream::Stdout, data(8)),
    ];
    let mut evicted = Vec::new();
    original.evict(false, &mut evicted);
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
