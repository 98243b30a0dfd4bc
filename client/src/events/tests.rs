use super::notification::NotificationKind;
use super::*;
use exec_server_protocol::process::OutputChunk;

fn out(seq: u64) -> ProcessEvent {
    ProcessEvent::Output {
        seq,
        stream: OutputStream::Stdout,
        data: vec![seq as u8].into(),
    }
}

fn read(chunks: &[u64], next_seq: u64) -> ReadResult {
    ReadResult {
        chunks: chunks
            .iter()
            .map(|&seq| OutputChunk {
                seq,
                stream: OutputStream::Stdout,
                chunk: exec_server_protocol::base64_bytes::Base64Bytes(vec![seq as u8]),
            })
            .collect(),
        next_seq,
        exited: false,
        exit_code: None,
        closed: false,
        failure: None,
        sandbox_denied: false,
        first_retained_seq: chunks.first().copied().unwrap_or(next_seq),
        truncated: false,
        details: Default::default(),
        live_descendants: None,
        waiting_for_input: false,
        retention: Default::default(),
    }
}

fn seqs(events: &[ProcessEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            ProcessEvent::Output { seq, .. } => format!("o{seq}"),
            ProcessEvent::Exited { seq, exit_code, .. } => format!("x{seq}:{exit_code}"),
            ProcessEvent::Closed { seq } => format!("c{seq}"),
            ProcessEvent::Gap { from_seq, to_seq } => format!("gap{from_seq}-{to_seq}"),
            ProcessEvent::Failed { .. } => "failed".into(),
            ProcessEvent::InputWait { after_seq } => format!("w{after_seq}"),
        })
        .collect()
}

#[test]
fn pushed_events_are_deduplicated_and_held_behind_a_hole() {
    let mut log = SeqLog::default();
    assert_eq!(seqs(&log.push(1, out(1))), ["o1"]);
    assert!(log.push(1, out(1)).is_empty(), "a duplicate is dropped");
    assert!(log.push(3, out(3)).is_empty(), "3 waits for 2");
    assert!(log.has_hole());
    assert_eq!(seqs(&log.push(2, out(2))), ["o2", "o3"]);
    assert!(!log.has_hole());
}

#[test]
fn a_catch_up_read_fills_the_hole_and_merges_with_pushed_events() {
    let mut log = SeqLog::default();
    log.push(1, out(1));
    // After a reconnect the new connection pushes 5 before the read answers.
    assert!(log.push(5, out(5)).is_empty());
    let delivered = log.apply_read(read(&[2, 3, 4, 5], 6));
    assert_eq!(seqs(&delivered), ["o2", "o3", "o4", "o5"]);
    assert_eq!(log.last_seq(), 5);
    assert!(log.push(4, out(4)).is_empty());
    assert_eq!(seqs(&log.push(6, out(6))), ["o6"]);
}

#[test]
fn exited_and_closed_are_inferred_from_the_read_state() {
    let mut log = SeqLog::default();
    log.push(1, out(1));
    let mut result = read(&[2, 4], 6);
    result.exited = true;
    result.exit_code = Some(3);
    result.closed = true;
    result.first_retained_seq = 2;
    // Output 4 came after the exit (a grandchild kept the pipe open).
    assert_eq!(seqs(&log.apply_read(result)), ["o2", "x3:3", "o4", "c5"]);
    assert!(log.is_finished());
}

#[test]
fn evicted_output_is_reported_as_a_gap_not_skipped() {
    let mut log = SeqLog::default();
    log.push(1, out(1));
    let mut result = read(&[5, 6], 8);
    result.exited = true;
    result.exit_code = Some(0);
    result.first_retained_seq = 5;
    result.truncated = true;
    assert_eq!(
        seqs(&log.apply_read(result)),
        ["gap2-4", "o5", "o6", "x7:0"]
    );
    assert!(!log.is_finished());
    assert_eq!(seqs(&log.push(8, ProcessEvent::Closed { seq: 8 })), ["c8"]);
}

#[test]
fn a_truncated_read_is_no_gap_when_pushed_events_cover_it() {
    // The new connection's notifications were evicted after delivery, before the read.
    let mut log = SeqLog::default();
    log.push(1, out(1));
    log.push(2, out(2));
    let mut result = read(&[], 3);
    result.truncated = true;
    result.first_retained_seq = 3;
    assert!(log.apply_read(result).is_empty());
    assert_eq!(log.last_seq(), 2);
}

#[test]
fn a_read_of_an_exited_process_on_a_server_without_retention_info() {
    let mut log = SeqLog::default();
    let mut result = read(&[1], 4);
    result.exited = true;
    result.exit_code = Some(1);
    result.closed = true;
    result.first_retained_seq = 0;
    assert_eq!(seqs(&log.apply_read(result)), ["o1", "x2:1", "c3"]);
}

#[test]
fn exit_seq_inference_splits_holes() {
    let mut holes = vec![(2, 4), (9, 12)];
    assert_eq!(infer_exit_seq(&mut holes, 10, false), Some(10));
    assert_eq!(holes, [(2, 4), (9, 9), (11, 12)]);
    let mut holes = vec![(2, 4)];
    assert_eq!(infer_exit_seq(&mut holes, 0, false), Some(4));
    assert_eq!(holes, [(2, 3)]);
    assert_eq!(infer_exit_seq(&mut Vec::new(), 5, false), None);
}

#[test]
fn a_read_cut_at_the_daemons_budget_ends_nothing_and_asks_for_the_rest() {
    // Chunks 1..=3, the exit at 4, chunks 5..=6, closed at 7; the first read is cut after 2.
    let mut log = SeqLog::default();
    let mut first = read(&[1, 2], 3);
    (first.exited, first.closed, first.exit_code) = (true, true, Some(3));
    let got = log.apply_read(first);
    assert_eq!(seqs(&got), ["o1", "o2"]);
    assert!(!log.is_finished() && log.has_hole(), "read again");
    let mut rest = read(&[3, 5, 6], 8);
    (rest.exited, rest.closed, rest.exit_code) = (true, true, Some(3));
    rest.first_retained_seq = 1;
    let got = log.apply_read(rest);
    assert_eq!(seqs(&got), ["o3", "x4:3", "o5", "o6", "c7"]);
    assert!(log.is_finished());
}

#[test]
fn a_recovery_passes_over_a_start_in_flight_and_its_answer_asks_for_a_catch_up() {
    let (holes, _hole_ids) = mpsc::unbounded_channel();
    let router = Router::new(holes);
    let _a = router.register("a").unwrap();
    assert!(!router.started("a"), "no recovery since its start was sent");
    let _b = router.register("b").unwrap();
    // A reconnect while b's start is in flight: the new daemon may not know b yet.
    assert_eq!(router.unfinished(), ["a"]);
    assert!(
        router.started("b"),
        "its answer came after the recovery listed the others"
    );
    assert!(!router.started("b"), "once");
    let mut listed = router.unfinished();
    listed.sort();
    assert_eq!(listed, ["a", "b"]);
}

#[test]
fn router_reports_holes_once_until_caught_up() {
    let (holes, mut hole_ids) = mpsc::unbounded_channel();
    let router = Router::new(holes);
    let mut events = router.register("p").unwrap();
    assert!(router.register("p").is_none(), "ids are unique");
    let note = |seq: u64| {
        let params = format!(r#"{{"processId":"p","seq":{seq},"stream":"stdout","chunk":"eA=="}}"#);
        NotificationKind::Output.decode(&params, None).unwrap()
    };
    router.notification(note(2));
    router.notification(note(3));
    assert_eq!(hole_ids.try_recv().unwrap(), "p");
    assert!(hole_ids.try_recv().is_err(), "one catch-up at a time");
    assert_eq!(router.begin_catch_up("p"), Some(0));
    router.apply_read("p", read(&[1, 2], 3));
    assert!(!router.end_catch_up("p"));
    let got: Vec<_> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(seqs(&got), ["o1", "o2", "o3"]);
    // An input wait is passed on after the event it follows, never behind a hole.
    let wait = |after: u64| {
        let params = format!(r#"{{"processId":"p","afterSeq":{after}}}"#);
        NotificationKind::InputWait.decode(&params, None).unwrap()
    };
    router.notification(wait(3));
    assert_eq!(
        events.try_recv().unwrap(),
        ProcessEvent::InputWait { after_seq: 3 }
    );
    router.notification(wait(2));
    assert!(events.try_recv().is_err(), "a stale wait is dropped");
    let closed = NotificationKind::Closed.decode(r#"{"processId":"p","seq":4}"#, None);
    router.notification(closed.unwrap());
    assert_eq!(events.try_recv().unwrap(), ProcessEvent::Closed { seq: 4 });
    assert!(
        router.unfinished().is_empty(),
        "finished routes are dropped"
    );
}
