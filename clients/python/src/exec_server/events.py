"""A process's events, and the bookkeeping that delivers each exactly once in seq order, whether
it came pushed or from a catch-up ``process/read`` after a reconnect (the Rust client's
``SeqLog``, client/src/events.rs). Seqs nothing can fill any more are delivered as a
:class:`Gap`, never skipped silently."""

from __future__ import annotations

from base64 import b64decode
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Output:
    seq: int
    stream: str
    """``stdout``, ``stderr`` or ``pty``."""
    data: bytes


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended (``process/exited``, or a ``process/read`` after a reconnect)."""

    exit_code: int
    """The child's status, or 128+signal when a signal killed it."""
    reason: str | None = None
    """``exited``, ``signaled``, ``timeout``, ``memoryLimit``, ``terminated``,
    ``sessionExpired``, ``shutdown`` or ``disconnected``."""
    signal: int | None = None
    usage: dict[str, int] | None = None
    """``userCpuMs``, ``systemCpuMs``, ``maxRssKib``, ``wallMs`` of the whole tree."""
    sandbox_denied: bool = False
    cleanup_unconfirmed: bool = False

    @staticmethod
    def from_wire(message: dict[str, Any]) -> ExitStatus:
        """From ``process/exited`` params or a ``process/read`` result."""
        code = message.get("exitCode")
        return ExitStatus(
            exit_code=-1 if code is None else code,
            reason=message.get("reason"),
            signal=message.get("signal"),
            usage=message.get("usage"),
            sandbox_denied=bool(message.get("sandboxDenied", False)),
            cleanup_unconfirmed=bool(message.get("cleanupUnconfirmed", False)),
        )


@dataclass(frozen=True)
class Exited:
    seq: int
    status: ExitStatus


@dataclass(frozen=True)
class Closed:
    """The last event: the process exited and its output streams are at EOF."""

    seq: int


@dataclass(frozen=True)
class Gap:
    """Events ``from_seq..=to_seq`` were evicted before this client received them; later events
    still follow."""

    from_seq: int
    to_seq: int


@dataclass(frozen=True)
class Failed:
    """The last event: the session could not be resumed, so the process's fate is unknown."""

    message: str


@dataclass(frozen=True)
class InputWait:
    """No seq of its own: after event ``after_seq`` the process's tree has been blocked reading
    its stdin, with no output, for its quiet period."""

    after_seq: int


Event = Union[Output, Exited, Closed, Gap, Failed, InputWait]


def is_final(event: Event) -> bool:
    return isinstance(event, (Closed, Failed))


@dataclass
class SeqLog:
    last_seq: int = 0
    """Highest seq delivered."""
    ahead: dict[int, Event] = field(default_factory=dict)
    """Events that arrived ahead of a hole, waiting for it to be filled."""
    exited: bool = False
    finished: bool = False

    def has_hole(self) -> bool:
        return bool(self.ahead) and min(self.ahead) > self.last_seq + 1

    def push(self, seq: int, event: Event) -> list[Event]:
        """A pushed event; returns what can now be delivered, in order."""
        if self.finished or seq <= self.last_seq:
            return []
        if seq == self.last_seq + 1 and not self.ahead:
            # The common case, in order with nothing waiting.
            out: list[Event] = []
            self._deliver(event, seq, out)
            return out
        self.ahead[seq] = event
        out = []
        self._drain(out)
        return out

    def apply_read(self, read: dict[str, Any]) -> list[Event]:
        """A catch-up read with ``afterSeq`` <= :attr:`last_seq` and no ``maxBytes``: everything
        up to ``nextSeq - 1`` is delivered now, from the read, from events that arrived
        meanwhile, inferred terminal events, or as a gap."""
        out: list[Event] = []
        if self.finished:
            return out
        for chunk in read["chunks"]:
            seq = chunk["seq"]
            if seq > self.last_seq and seq not in self.ahead:
                self.ahead[seq] = Output(seq, chunk["stream"], b64decode(chunk["chunk"]))
        target = max(read["nextSeq"] - 1, 0)
        known = self.ahead.values()
        if (
            read["closed"]
            and target > self.last_seq
            and not any(isinstance(e, Closed) for e in known)
        ):
            self.ahead[target] = Closed(target)
        holes = self._holes_through(target)
        if read["exited"] and not self.exited and not any(isinstance(e, Exited) for e in known):
            exit_seq = _infer_exit_seq(holes, read.get("firstRetainedSeq", 0))
            event = Exited(exit_seq or self.last_seq, ExitStatus.from_wire(read))
            if exit_seq is None:
                # Its seq was lost in an earlier gap; it still must not be lost itself.
                self.exited = True
                out.append(event)
            else:
                self.ahead[exit_seq] = event
        for start, end in holes:
            self.ahead[start] = Gap(start, end)
        self._drain(out)
        return out

    def finish(self) -> None:
        self.finished = True
        self.ahead.clear()

    def _holes_through(self, target: int) -> list[tuple[int, int]]:
        holes = []
        following = self.last_seq + 1
        for seq in sorted(s for s in self.ahead if following <= s <= target):
            if seq > following:
                holes.append((following, seq - 1))
            following = seq + 1
        if following <= target:
            holes.append((following, target))
        return holes

    def _drain(self, out: list[Event]) -> None:
        while not self.finished and self.ahead:
            seq = min(self.ahead)
            if seq != self.last_seq + 1:
                return
            self._deliver(self.ahead.pop(seq), seq, out)

    def _deliver(self, event: Event, seq: int, out: list[Event]) -> None:
        self.last_seq = event.to_seq if isinstance(event, Gap) else seq
        self.exited |= isinstance(event, Exited)
        out.append(event)
        if is_final(event):
            self.finish()


def _infer_exit_seq(holes: list[tuple[int, int]], first_retained: int) -> int | None:
    """Picks the exited event's seq among the holes and removes it from them. Seqs at or after
    ``first_retained`` cannot be evicted output, so a hole there is a terminal event; otherwise a
    single one-seq hole is the only unambiguous choice."""
    if not holes:
        return None
    total = sum(end - start + 1 for start, end in holes)
    index = len(holes) - 1
    if first_retained > 0:
        index = next((i for i, (_, end) in enumerate(holes) if end >= first_retained), index)
    elif total == 1:
        index = 0
    start, end = holes[index]
    seq = max(start, first_retained) if first_retained > 0 and end >= first_retained else end
    pieces = []
    if start < seq:
        pieces.append((start, seq - 1))
    if seq < end:
        pieces.append((seq + 1, end))
    holes[index : index + 1] = pieces
    return seq
