"""The asyncio client: a session on one daemon that survives dropped connections.

When the socket drops, the client reconnects and resumes the session (``initialize
{resumeSessionId}``), retrying transport errors and -32010 ("still attached") with pauses from
2 ms doubling to 100 ms, for up to ``reconnect_deadline`` seconds; then catches every unfinished
process up with ``process/read {afterSeq}``, so each event reaches its :class:`Process` exactly
once and in seq order. Calls are repeated on the new connection when the protocol's table says
that is safe (:data:`exec_server.wire.RETRY_SAFE`); starts are sent ``idempotent`` and writes keep
their ``writeId``, so both are safe. These are the Rust client's rules (client/src/lib.rs).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import stat
import uuid
from base64 import b64decode
from typing import Any, Callable, Literal, Mapping, Sequence

from . import wire
from ._connection import Answer, Connection, Dropped, header_pairs, open_socket
from .errors import (
    ConnectError,
    DisconnectedError,
    ExecServerError,
    RpcError,
    SessionAttached,
    SessionLostError,
)
from .events import Closed, Event, Exited, ExitStatus, Failed, InputWait, Output, SeqLog
from .fs import FileSystem, Watch
from .http import HttpResponse, http_request
from .paths import to_uri
from .process import CompletedProcess, Process, run_process
from .sandbox import Sandbox

#: How long to keep trying to resume: inside the daemon's default 30 s session TTL.
DEFAULT_RECONNECT_DEADLINE = 25.0
#: The first pause between resume attempts (the daemon usually notices the old socket's end
#: within a millisecond); pauses double up to the codex client's fixed 100 ms.
FIRST_RECONNECT_PAUSE = 0.002
RECONNECT_INTERVAL = 0.1


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in ``path``, which only its owner may read (as the daemon's
    ``--connection-token-file``): a token others can read is no secret."""
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConnectError(f"token file {os.fspath(path)} is accessible to group or others")
    with open(path, encoding="utf-8") as file:
        token = file.read().rstrip("\r\n")
    if not token:
        raise ConnectError(f"token file {os.fspath(path)} is empty")
    return token


class _Route:
    __slots__ = ("log", "process", "catching_up", "started")

    def __init__(self, process: Process) -> None:
        self.log = SeqLog()
        self.process = process
        self.catching_up = False
        #: The start was answered: before that the daemon may not know the id yet.
        self.started = False


class Client:
    """A session on one daemon. Open it with :meth:`connect`; use it as an async context
    manager to close it."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.url = url
        self._options = options
        self.session_id = ""
        self.environment_info: wire.EnvironmentInfo | None = None
        self._conn: Connection | None = None
        self._failed: str | None = None
        self._changed = asyncio.Event()
        self._next_id = 1000
        self._epochs = 0
        self._routes: dict[str, _Route] = {}
        self._watches: dict[str, Watch] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._recoveries = 0
        self.fs = FileSystem(self)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
        ca_file: str | None = None,
        client_name: str = "exec-server-python",
        resume_session_id: str | None = None,
        reconnect_deadline: float | None = DEFAULT_RECONNECT_DEADLINE,
        binary_payloads: bool = True,
        on_disconnect: Literal["keep", "kill"] | None = None,
        session_ttl: float | None = None,
        open_timeout: float = 10.0,
    ) -> Client:
        """Connects to ``ws://HOST:PORT``, ``wss://HOST:PORT`` (trusting ``ca_file`` besides the
        system's roots) or ``unix:///PATH``, creates (or resumes) a session and completes the
        handshake. ``reconnect_deadline`` None disables resuming after a drop;
        ``on_disconnect="kill"`` ends the session's processes when the connection ends (then
        nothing can be resumed); ``session_ttl`` (seconds) is how long a detached session waits.

        The token goes as ``Authorization: Bearer`` and as ``X-Access-Token``; ``headers`` are
        sent with every upgrade, reconnects included, e.g. ``{"X-Sandbox-ID": "sandbox-3"}``
        through agent-sandbox's router (which drops ``Authorization`` and routes by that).
        """
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token_file is not None:
            token = read_token_file(token_file)
        options = {
            "token": token,
            "headers": header_pairs(headers),
            "ca_file": ca_file,
            "client_name": client_name,
            "reconnect_deadline": reconnect_deadline,
            "binary_payloads": binary_payloads,
            "on_disconnect": on_disconnect,
            "session_ttl": session_ttl,
            "open_timeout": open_timeout,
        }
        client = cls(url, options)
        if resume_session_id is not None:
            connection, init = await client._resume(resume_session_id, 1)
        else:
            connection = await client._open(1)
            try:
                init = await client._handshake(connection, None)
            except BaseException:
                connection.kill()
                raise
        client._epochs = 1
        client.session_id = init["sessionId"]
        client.environment_info = init.get("environmentInfo")
        client._set_connection(connection)
        return client

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls -------------------------------------------------------------------------------

    async def call(self, method: str, params: Any = None) -> Any:
        """Any method; repeated after a reconnect only when the protocol says that is safe.
        A result that came as a binary payload has its ``chunk`` as bytes."""
        answer = await self.call_raw(method, params, wire.RETRY_SAFE.get(method, False))
        if answer.chunk is not None:
            answer.result["chunk"] = answer.chunk
        return answer.result

    async def call_raw(self, method: str, params: Any, retry: bool) -> Answer:
        """The reply as it came (``chunk`` apart when it was a binary payload)."""
        text = json.dumps(params, separators=(",", ":"))
        method_text = json.dumps(method)
        after_epoch = 0
        while True:
            connection = await self._connection_after(after_epoch)
            request_id = self._next_id
            self._next_id += 1
            envelope = f'{{"id":{request_id},"method":{method_text},"params":{text}}}'
            try:
                return await connection.request(request_id, envelope)
            except Dropped as dropped:
                if dropped.sent and not retry:
                    raise DisconnectedError(method) from None
                after_epoch = connection.epoch

    async def environment(self) -> wire.EnvironmentInfo:
        """The daemon's environment: from the initialize reply, or asked for."""
        if self.environment_info is None:
            self.environment_info = await self.call("environment/info")
        return self.environment_info

    # -- processes ---------------------------------------------------------------------------

    async def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: Literal["all", "core", "none"] = "all",
        tty: bool = False,
        size: tuple[int, int] | None = None,
        stdin: bool = False,
        sandbox: Sandbox | wire.FileSystemSandboxContext | None = None,
        limits: wire.ProcessLimits | None = None,
        on_retention_full: Literal["evict", "pause"] | None = None,
        input_wait_ms: int | None = None,
        process_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Process:
        """Starts ``argv`` and returns its :class:`Process` (see :func:`start_params` for the
        arguments)."""
        params = start_params(
            argv,
            cwd=cwd if cwd is not None else self._default_cwd(),
            env=env,
            inherit_env=inherit_env,
            tty=tty,
            size=size,
            stdin=stdin,
            sandbox=sandbox,
            limits=limits,
            on_retention_full=on_retention_full,
            input_wait_ms=input_wait_ms,
            process_id=process_id,
            extra=extra,
        )
        return await self.start_with(params)

    async def start_with(self, params: wire.StartParams) -> Process:
        """Starts a process from complete ``process/start`` params. Sent ``idempotent`` (unless
        the params say otherwise), the start is repeated after a reconnect like any call safe
        to repeat: a start whose reply was lost yields the process it started, never a second."""
        process_id = params["processId"]
        if process_id in self._routes:
            raise ValueError(f"process {process_id} was already started by this client")
        process = Process(self, process_id, list(params["argv"]))
        # Registered before the start, so that no early notification is lost.
        route = self._routes[process_id] = _Route(process)
        epoch = self._epochs
        try:
            answer = await self.call_raw(
                "process/start", params, bool(params.get("idempotent", False))
            )
        except BaseException:
            self._routes.pop(process_id, None)
            raise
        process.sandbox_type = answer.result["sandboxType"]
        route.started = True
        if self._epochs != epoch:
            # The connection dropped while the start was in flight, and the recovery left it
            # out: events pushed to the old connection are read now.
            self._spawn(self._catch_up(process_id))
        return process

    async def run(self, argv: Sequence[str], **kwargs: Any) -> CompletedProcess:
        """Runs ``argv`` to its end and collects its output, like :func:`subprocess.run`: see
        :func:`exec_server.process.run_process` for ``input``, ``check`` and ``timeout``."""
        return await run_process(self, argv, **kwargs)

    async def processes(self) -> list[wire.ProcessInfo]:
        """``process/list``: this session's processes."""
        result = await self.call("process/list")
        return result["processes"]  # type: ignore[no-any-return]

    def _default_cwd(self) -> str:
        cwd = self.environment_info.get("cwd") if self.environment_info else None
        return cwd or "file:///"

    # -- http --------------------------------------------------------------------------------

    async def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Sequence[tuple[str, str]] | Mapping[str, str] = (),
        body: bytes | None = None,
        timeout: float | None = None,
        follow_redirects: bool = True,
    ) -> HttpResponse:
        """Has the daemon make an HTTP request from its host; the whole body is returned."""
        return await http_request(self, method, url, headers, body, timeout, follow_redirects)

    # -- the session -------------------------------------------------------------------------

    def drop_connection(self) -> None:
        """Kills the socket without a close handshake, as a network failure would (for tests).
        The client then reconnects and resumes by itself, unless reconnecting is disabled."""
        if self._conn is not None:
            self._conn.kill()

    @property
    def recoveries(self) -> int:
        """How many recoveries (resume plus catch-up of every process) completed."""
        return self._recoveries

    async def wait_for_recovery(self, count: int) -> None:
        """Waits until :attr:`recoveries` reaches ``count``."""
        while self._recoveries < count:
            if self._failed is not None:
                raise SessionLostError(self._failed)
            await self._changed.wait()

    async def close(self) -> None:
        """Closes the connection cleanly. The session stays on the daemon until its TTL
        expires."""
        connection = self._conn
        # Whoever still waits on a process or a watch learns that nothing more will come.
        self._lose("the client was closed")
        if connection is not None:
            await connection.close()
        for task in list(self._tasks):
            task.cancel()

    # -- internals ---------------------------------------------------------------------------

    async def _open(self, epoch: int) -> Connection:
        options = self._options
        socket = await open_socket(
            self.url,
            options["token"],
            options["headers"],
            options["ca_file"],
            options["open_timeout"],
        )
        return Connection(socket, epoch, self._notification)

    async def _handshake(
        self, connection: Connection, resume_session_id: str | None
    ) -> wire.InitializeResult:
        options = self._options
        params: dict[str, Any] = {"clientName": options["client_name"]}
        if resume_session_id is not None:
            params["resumeSessionId"] = resume_session_id
        if options["binary_payloads"]:
            params["binaryPayloads"] = True
        if options["on_disconnect"] is not None:
            params["onDisconnect"] = options["on_disconnect"]
        if options["session_ttl"] is not None:
            params["sessionTtlMs"] = round(options["session_ttl"] * 1000)
        envelope = json.dumps({"id": 0, "method": "initialize", "params": params})
        try:
            answer = await connection.request(0, envelope)
        except Dropped:
            raise ConnectError("the connection dropped during initialize") from None
        await connection.notify('{"method":"initialized","params":{}}')
        return answer.result  # type: ignore[no-any-return]

    async def _resume(
        self, session_id: str, epoch: int
    ) -> tuple[Connection, wire.InitializeResult]:
        """Opens a connection and resumes ``session_id``, retrying transport errors and "still
        attached" (-32010), pausing 2 ms and doubling up to 100 ms, until the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._options["reconnect_deadline"] or 0.0)
        pause = FIRST_RECONNECT_PAUSE
        while True:
            try:
                connection = await self._open(epoch)
                try:
                    return connection, await self._handshake(connection, session_id)
                except BaseException:
                    connection.kill()
                    raise
            except (ConnectError, SessionAttached) as error:
                if loop.time() + pause > deadline:
                    raise error
            await asyncio.sleep(pause)
            pause = min(pause * 2, RECONNECT_INTERVAL)

    def _set_connection(self, connection: Connection) -> None:
        self._conn = connection
        self._spawn(self._supervise(connection))
        self._signal()

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fail(self, message: str) -> None:
        if self._failed is None:
            self._failed = message
            self._conn = None
            self._signal()

    async def _connection_after(self, after: int) -> Connection:
        """The live connection with an epoch above ``after``, once there is one."""
        while True:
            if self._failed is not None:
                raise SessionLostError(self._failed)
            connection = self._conn
            if connection is not None and connection.epoch > after and not connection.dead.is_set():
                return connection
            await self._changed.wait()

    async def _supervise(self, connection: Connection) -> None:
        """Waits for the connection to die, then resumes the session on a new one and catches
        up every unfinished process; gives up (failing every process) when it cannot."""
        await connection.dead.wait()
        if self._failed is not None:
            return
        self._conn = None
        self._signal()
        for watch in list(self._watches.values()):
            watch.connection_lost()
        if self._options["reconnect_deadline"] is None:
            return self._lose("the connection dropped")
        self._epochs += 1
        try:
            following, _ = await self._resume(self.session_id, self._epochs)
        except ExecServerError as error:
            return self._lose(f"cannot resume session {self.session_id}: {error}")
        if self._failed is not None:
            # Closed while resuming: the new connection must not keep the session attached.
            await following.close()
            return
        self._set_connection(following)
        started = [process_id for process_id, route in self._routes.items() if route.started]
        await asyncio.gather(
            *(self._catch_up(process_id) for process_id in started),
            *(watch.resume() for watch in list(self._watches.values())),
        )
        self._recoveries += 1
        self._signal()

    def _lose(self, message: str) -> None:
        self._fail(message)
        routes, self._routes = self._routes, {}
        for route in routes.values():
            route.process._deliver(Failed(message))
        for watch in list(self._watches.values()):
            watch.fail(message)

    # -- process events ----------------------------------------------------------------------

    def _notification(self, method: str, params: Any, chunk: bytes | None) -> None:
        if method == "process/output":
            data = chunk if chunk is not None else b64decode(params["chunk"])
            seq = params["seq"]
            self._update(
                params["processId"], lambda log: log.push(seq, Output(seq, params["stream"], data))
            )
        elif method == "process/exited":
            seq = params["seq"]
            event = Exited(seq, ExitStatus.from_wire(params))
            self._update(params["processId"], lambda log: log.push(seq, event))
        elif method == "process/closed":
            seq = params["seq"]
            self._update(params["processId"], lambda log: log.push(seq, Closed(seq)))
        elif method == "process/inputWait":
            route = self._routes.get(params["processId"])
            after = params["afterSeq"]
            # One behind a hole is stale once the hole is filled.
            if route is not None and route.log.last_seq == after and not route.log.has_hole():
                route.process._deliver(InputWait(after))
        elif method == "fs/changed":
            watch = self._watches.get(params["watchId"])
            if watch is not None:
                watch.changed(params)

    def _update(self, process_id: str, change: Callable[[SeqLog], list[Event]]) -> None:
        route = self._routes.get(process_id)
        if route is None:
            return
        for event in change(route.log):
            route.process._deliver(event)
        if route.log.finished:
            del self._routes[process_id]
        elif route.log.has_hole() and not route.catching_up:
            route.catching_up = True
            self._spawn(self._catch_up(process_id))

    async def _catch_up(self, process_id: str) -> None:
        """Reads what ``process_id`` missed, until no events wait behind a hole and the last
        read was not cut by the daemon's 4 MiB budget."""
        while True:
            route = self._routes.get(process_id)
            if route is None:
                return
            route.catching_up = True
            params = {"processId": process_id, "afterSeq": route.log.last_seq, "waitMs": 0}
            try:
                read = await self.call("process/read", params)
            except RpcError as error:
                # The daemon forgot it (e.g. retention passed while we were away).
                return self._fail_process(
                    process_id, f"cannot catch up on process {process_id}: {error.message}"
                )
            except ExecServerError:
                # The session is gone: the supervisor fails every process.
                return
            chunks = read["chunks"]
            # A read the daemon's 4 MiB budget cut ends at its last chunk; a complete read of a
            # closed process ends at the close, after every chunk, and one of a running
            # process may end at its last chunk too (a read more costs nothing then). An
            # exited process's output may follow its exit, so there a cut is not told apart.
            cut = (
                bool(chunks)
                and read["nextSeq"] == chunks[-1]["seq"] + 1
                and (read["closed"] or not read["exited"])
            )
            if cut:
                read = dict(read, exited=False, closed=False)
            self._update(process_id, functools.partial(SeqLog.apply_read, read=read))
            route = self._routes.get(process_id)
            if route is None:
                return
            route.catching_up = route.log.has_hole()
            if not (route.catching_up or cut):
                return

    def _fail_process(self, process_id: str, message: str) -> None:
        route = self._routes.pop(process_id, None)
        if route is not None:
            route.process._deliver(Failed(message))


def start_params(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str] | None = None,
    inherit_env: Literal["all", "core", "none"] = "all",
    tty: bool = False,
    size: tuple[int, int] | None = None,
    stdin: bool = False,
    sandbox: Sandbox | wire.FileSystemSandboxContext | None = None,
    limits: wire.ProcessLimits | None = None,
    on_retention_full: Literal["evict", "pause"] | None = None,
    input_wait_ms: int | None = None,
    process_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> wire.StartParams:
    """``process/start`` params. ``env`` is laid over the daemon's own environment as
    ``inherit_env`` says (``"all"``: all of it but ``*KEY*``, ``*SECRET*``, ``*TOKEN*`` names;
    ``"core"``: its core variables; ``"none"``: ``env`` is exactly the child's environment).
    ``stdin`` keeps stdin open for :meth:`Process.write`; ``tty`` runs on a terminal of
    ``size`` (rows, cols). ``limits`` (``timeoutMs``, ``maxMemoryBytes``, ...) bound the tree.
    ``on_retention_full`` (``"evict"`` or ``"pause"``) is sent only when given. ``extra``
    adds wire members as they are."""
    if not argv:
        raise ValueError("argv must not be empty")
    params: wire.StartParams = {
        "processId": process_id or str(uuid.uuid4()),
        "argv": list(argv),
        "cwd": to_uri(cwd),
        "env": dict(env or {}),
        "tty": tty,
        "pipeStdin": stdin,
        "idempotent": True,
    }
    if inherit_env != "none":
        params["envPolicy"] = {
            "inherit": inherit_env,
            "ignoreDefaultExcludes": False,
            "exclude": [],
            "set": {},
            "includeOnly": [],
        }
    if size is not None:
        params["size"] = {"rows": size[0], "cols": size[1]}
    if sandbox is not None:
        params["sandbox"] = sandbox.to_wire() if isinstance(sandbox, Sandbox) else sandbox
    if limits:
        params["limits"] = limits
    if on_retention_full is not None:
        params["onRetentionFull"] = on_retention_full
    if input_wait_ms is not None:
        params["inputWaitMs"] = input_wait_ms
    if extra:
        params.update(extra)  # type: ignore[typeddict-item]
    return params
