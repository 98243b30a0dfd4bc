"""The seq bookkeeping alone (the Rust client's SeqLog tests, client/src/events.rs): each event
once, in order; holes filled by a read; terminal events inferred; evictions as gaps."""

from __future__ import annotations

from base64 import b64encode
from typing import Any

from exec_server.events import Closed, Event, Exited, Gap, Output, SeqLog, _infer_exit_seq


def out(seq: int) -> Output:
    return Output(seq, "stdout", bytes([seq]))


def read(chunks: list[int], next_seq: int, **state: Any) -> dict[str, Any]:
    return {
        "chunks": [
            {"seq": seq, "stream": "stdout", "chunk": b64encode(bytes([seq])).decode()}
            for seq in chunks
        ],
        "nextSeq": next_seq,
        "exited": False,
        "exitCode": None,
        "closed": False,
        "firstRetainedSeq": chunks[0] if chunks else next_seq,
        **state,
    }


def seqs(events: list[Event]) -> list[str]:
    names = []
    for event in events:
        if isinstance(event, Output):
            names.append(f"o{event.seq}")
        elif isinstance(event, Exited):
            names.append(f"x{event.seq}:{event.status.exit_code}")
        elif isinstance(event, Closed):
            names.append(f"c{event.seq}")
        elif isinstance(event, Gap):
            names.append(f"gap{event.from_seq}-{event.to_seq}")
    return names


def test_pushed_events_are_deduplicated_and_held_behind_a_hole() -> None:
    log = SeqLog()
    assert seqs(log.push(1, out(1))) == ["o1"]
    assert log.push(1, out(1)) == [], "a duplicate is dropped"
    assert log.push(3, out(3)) == [], "3 waits for 2"
    assert log.has_hole()
    assert seqs(log.push(2, out(2))) == ["o2", "o3"]
    assert not log.has_hole()


def test_a_catch_up_read_fills_the_hole_and_merges_with_pushed_events() -> None:
    log = SeqLog()
    log.push(1, out(1))
    assert log.push(5, out(5)) == []
    assert seqs(log.apply_read(read([2, 3, 4, 5], 6))) == ["o2", "o3", "o4", "o5"]
    assert log.last_seq == 5
    assert log.push(4, out(4)) == []
    assert seqs(log.push(6, out(6))) == ["o6"]


def test_exited_and_closed_are_inferred_from_the_read_state() -> None:
    log = SeqLog()
    log.push(1, out(1))
    # Output 4 came after the exit (a grandchild kept the pipe open).
    result = read([2, 4], 6, exited=True, exitCode=3, closed=True, firstRetainedSeq=2)
    assert seqs(log.apply_read(result)) == ["o2", "x3:3", "o4", "c5"]
    assert log.finished


def test_evicted_output_is_reported_as_a_gap_not_skipped() -> None:
    log = SeqLog()
    log.push(1, out(1))
    result = read([5, 6], 8, exited=True, exitCode=0, firstRetainedSeq=5, truncated=True)
    assert seqs(log.apply_read(result)) == ["gap2-4", "o5", "o6", "x7:0"]
    assert not log.finished
    assert seqs(log.push(8, Closed(8))) == ["c8"]


def test_a_truncated_read_is_no_gap_when_pushed_events_cover_it() -> None:
    log = SeqLog()
    log.push(1, out(1))
    log.push(2, out(2))
    assert log.apply_read(read([], 3, truncated=True, firstRetainedSeq=3)) == []
    assert log.last_seq == 2


def test_a_read_of_an_exited_process_on_a_server_without_retention_info() -> None:
    log = SeqLog()
    result = read([1], 4, exited=True, exitCode=1, closed=True, firstRetainedSeq=0)
    assert seqs(log.apply_read(result)) == ["o1", "x2:1", "c3"]


def test_exit_seq_inference_splits_holes() -> None:
    holes = [(2, 4), (9, 12)]
    assert _infer_exit_seq(holes, 10) == 10
    assert holes == [(2, 4), (9, 9), (11, 12)]
    holes = [(2, 4)]
    assert _infer_exit_seq(holes, 0) == 4
    assert holes == [(2, 3)]
    assert _infer_exit_seq([], 5) is None
