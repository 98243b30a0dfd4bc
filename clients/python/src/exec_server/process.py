"""A started process: its events, and the calls that control it."""

from __future__ import annotations

import asyncio
import math
import uuid
from base64 import b64encode
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Literal, Sequence

from .errors import OutputLostError, ProcessFailed, ProcessTimeout, RpcError, SessionLostError
from .events import Closed, Event, Exited, ExitStatus, Failed, Gap, Output, is_final

if TYPE_CHECKING:
    from .client import Client

#: How long a write waits out a full stdin queue (``data.retryable``) before giving up.
FULL_QUEUE_PATIENCE = 60.0
#: How long ``run(timeout=…)`` waits beyond the timeout for the daemon's kill to be reported
#: before it kills the tree itself.
TIMEOUT_GRACE = 5.0


class Process:
    """A process started by :meth:`Client.start`. Its events are queued as they arrive, so
    :meth:`wait` works whether or not anyone reads :meth:`output`."""

    def __init__(self, client: Client, process_id: str, args: list[str]) -> None:
        self.client = client
        self.id = process_id
        self.args = args
        self.sandbox_type = "none"
        self.gaps: list[Gap] = []
        self._queue: deque[Event] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._exit: asyncio.Future[ExitStatus] = asyncio.get_running_loop().create_future()
        self._ended = False

    def _deliver(self, event: Event) -> None:
        self._queue.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if isinstance(event, Exited) and not self._exit.done():
            self._exit.set_result(event.status)
        elif isinstance(event, Failed) and not self._exit.done():
            self._exit.set_exception(SessionLostError(event.message))
            # Retrieved here so that an unawaited wait() does not warn.
            self._exit.exception()

    async def events(self) -> AsyncIterator[Event]:
        """Every event in seq order, until the last (:class:`Closed` or :class:`Failed`)."""
        while not self._ended:
            if not self._queue:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
                self._waiter = None
                continue
            event = self._queue.popleft()
            if isinstance(event, Gap):
                self.gaps.append(event)
            self._ended = is_final(event)
            yield event

    async def output(self) -> AsyncIterator[Output]:
        """The output chunks (``.data``, ``.stream``), until the process closed. Raises
        :class:`OutputLostError` for output the daemon evicted before it could be delivered
        (iterating again goes on after it), and :class:`SessionLostError` when the session
        could not be resumed."""
        async for event in self.events():
            if isinstance(event, Output):
                yield event
            elif isinstance(event, Gap):
                raise OutputLostError(self.id, event.from_seq, event.to_seq)
            elif isinstance(event, Failed):
                raise SessionLostError(event.message)

    async def wait(self) -> ExitStatus:
        """Waits for the exit: code, reason, signal, usage."""
        return await asyncio.shield(self._exit)

    @property
    def exit_status(self) -> ExitStatus | None:
        """The exit, once it was delivered."""
        if self._exit.done() and self._exit.exception() is None:
            return self._exit.result()
        return None

    async def write(self, data: bytes) -> str:
        """Queues ``data`` on the process's stdin; returns the status (``accepted``,
        ``stdinClosed``, ...). The ``writeId`` stays the same across retries (a reconnect, a
        full stdin queue), so the bytes land exactly once."""
        params = {
            "processId": self.id,
            "chunk": b64encode(data).decode("ascii"),
            "writeId": uuid.uuid4().hex,
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FULL_QUEUE_PATIENCE
        pause = 0.001
        while True:
            try:
                result = await self.client.call("process/write", params)
                return result["status"]  # type: ignore[no-any-return]
            except RpcError as error:
                if not error.retryable or loop.time() >= deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)

    async def close_stdin(self) -> None:
        """EOF on stdin (an EOF character on a terminal)."""
        await self.client.call("process/closeStdin", {"processId": self.id})

    async def signal(
        self, signal: Literal["interrupt", "terminate", "kill", "hangup", "quit"]
    ) -> None:
        """``interrupt``, ``terminate`` (the whole tree, killed 2 s later), ``kill``, ``hangup``
        or ``quit``."""
        await self.client.call("process/signal", {"processId": self.id, "signal": signal})

    async def terminate(self) -> bool:
        """Kills the whole tree; returns whether the process was still running."""
        result = await self.client.call("process/terminate", {"processId": self.id})
        return bool(result["running"])

    async def resize(self, rows: int, cols: int) -> None:
        await self.client.call("process/resize", {"processId": self.id, "rows": rows, "cols": cols})

    async def read(self, after_seq: int = 0, max_bytes: int | None = None, wait_ms: int = 0) -> Any:
        """A raw ``process/read`` (pull instead of the pushed events)."""
        params: dict[str, Any] = {"processId": self.id, "afterSeq": after_seq, "waitMs": wait_ms}
        if max_bytes is not None:
            params["maxBytes"] = max_bytes
        return await self.client.call("process/read", params)


@dataclass
class CompletedProcess:
    """What :meth:`Client.run` returns, as :class:`subprocess.CompletedProcess`."""

    args: list[str]
    returncode: int
    stdout: bytes
    """stdout, or the terminal's output with ``tty=True``."""
    stderr: bytes
    exit: ExitStatus
    sandbox_type: str = "none"
    gaps: list[Gap] = field(default_factory=list)

    def check_returncode(self) -> None:
        if self.returncode != 0:
            raise ProcessFailed(self)


async def run_process(
    client: Client,
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    check: bool = False,
    timeout: float | None = None,
    **start: Any,
) -> CompletedProcess:
    """Starts ``argv`` (with :meth:`Client.start`'s keyword arguments), feeds it ``input``,
    and collects its output until it closed. ``timeout`` (seconds) ends the whole tree: it is
    sent as ``limits.timeoutMs``, so the daemon kills everything the command started even if
    this client is gone, and raises :class:`ProcessTimeout`. ``check`` raises
    :class:`ProcessFailed` on a non-zero exit. Output the daemon lost raises
    :class:`OutputLostError`; a lost session :class:`SessionLostError`."""
    if timeout is not None:
        limits = dict(start.get("limits") or {})
        timeout_ms = max(1, math.ceil(timeout * 1000))
        limits["timeoutMs"] = min(limits.get("timeoutMs", timeout_ms), timeout_ms)
        start["limits"] = limits
    process = await client.start(argv, stdin=input is not None, **start)
    feeding = asyncio.ensure_future(_feed(process, input)) if input is not None else None
    if feeding is not None:
        # A feed that fails (the process exited without reading) is no error of the run.
        feeding.add_done_callback(lambda task: task.cancelled() or task.exception())
    stdout, stderr = bytearray(), bytearray()
    try:
        await asyncio.wait_for(
            _collect(process, stdout, stderr),
            None if timeout is None else timeout + TIMEOUT_GRACE,
        )
    except asyncio.TimeoutError:
        await process.terminate()
        raise ProcessTimeout(process.args, timeout or 0.0, bytes(stdout), bytes(stderr)) from None
    finally:
        if feeding is not None:
            feeding.cancel()
    status = await process.wait()
    if status.reason == "timeout" and timeout is not None:
        raise ProcessTimeout(process.args, timeout, bytes(stdout), bytes(stderr))
    result = CompletedProcess(
        process.args,
        status.exit_code,
        bytes(stdout),
        bytes(stderr),
        status,
        process.sandbox_type,
        process.gaps,
    )
    if check:
        result.check_returncode()
    return result


async def _feed(process: Process, data: bytes) -> None:
    if data:
        await process.write(data)
    await process.close_stdin()


async def _collect(process: Process, stdout: bytearray, stderr: bytearray) -> None:
    async for event in process.events():
        if isinstance(event, Output):
            (stderr if event.stream == "stderr" else stdout).extend(event.data)
        elif isinstance(event, Gap):
            raise OutputLostError(process.id, event.from_seq, event.to_seq)
        elif isinstance(event, Failed):
            raise SessionLostError(event.message)
        elif isinstance(event, Closed):
            return
