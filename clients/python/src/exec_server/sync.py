"""A thin synchronous wrapper: the asyncio client runs on an event loop in a background thread,
and each call here waits for its result. For scripts and harnesses that are not asyncio::

    from exec_server.sync import Client

    with Client.connect("ws://127.0.0.1:8080") as client:
        print(client.run(["echo", "hi"]).stdout)
"""

from __future__ import annotations

import asyncio
import threading
from typing import IO, Any, AsyncIterator, Awaitable, Iterator, Literal, Sequence, TypeVar

from . import client as aio
from . import fs as aio_fs
from . import process as aio_process
from . import wire
from .events import Event, ExitStatus, Output
from .fs import Changes
from .http import HttpResponse
from .process import CompletedProcess

T = TypeVar("T")


class _Loop:
    """An event loop on a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="exec-server-client", daemon=True
        )
        self._thread.start()

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.run(iterator.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.run(_aclose(iterator))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


class Client:
    """:class:`exec_server.Client`, synchronously."""

    def __init__(self, loop: _Loop, client: aio.Client) -> None:
        self._loop = loop
        self.aio = client
        self.fs = FileSystem(loop, client.fs)

    @classmethod
    def connect(cls, url: str, **options: Any) -> Client:
        """See :meth:`exec_server.Client.connect` for the options, e.g. ``token="..."``,
        ``headers={"X-Sandbox-ID": "sandbox-3"}``."""
        loop = _Loop()
        try:
            client = loop.run(aio.Client.connect(url, **options))
        except BaseException:
            loop.stop()
            raise
        return cls(loop, client)

    @property
    def session_id(self) -> str:
        return self.aio.session_id

    @property
    def environment_info(self) -> wire.EnvironmentInfo | None:
        return self.aio.environment_info

    def call(self, method: str, params: Any = None) -> Any:
        return self._loop.run(self.aio.call(method, params))

    def run(self, argv: Sequence[str], **options: Any) -> CompletedProcess:
        """See :func:`exec_server.process.run_process`."""
        return self._loop.run(self.aio.run(argv, **options))

    def start(self, argv: Sequence[str], **options: Any) -> Process:
        """See :meth:`exec_server.Client.start`."""
        return Process(self._loop, self._loop.run(self.aio.start(argv, **options)))

    def processes(self) -> list[wire.ProcessInfo]:
        return self._loop.run(self.aio.processes())

    def http_request(self, method: str, url: str, **options: Any) -> HttpResponse:
        return self._loop.run(self.aio.http_request(method, url, **options))

    def drop_connection(self) -> None:
        """For tests: see :meth:`exec_server.Client.drop_connection`."""
        self._loop.loop.call_soon_threadsafe(self.aio.drop_connection)

    def close(self) -> None:
        try:
            self._loop.run(self.aio.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Process:
    """:class:`exec_server.Process`, synchronously."""

    def __init__(self, loop: _Loop, process: aio_process.Process) -> None:
        self._loop = loop
        self.aio = process

    @property
    def id(self) -> str:
        return self.aio.id

    @property
    def sandbox_type(self) -> str:
        return self.aio.sandbox_type

    def events(self) -> Iterator[Event]:
        return self._loop.iterate(self.aio.events())

    def output(self) -> Iterator[Output]:
        return self._loop.iterate(self.aio.output())

    def wait(self) -> ExitStatus:
        return self._loop.run(self.aio.wait())

    def write(self, data: bytes) -> str:
        return self._loop.run(self.aio.write(data))

    def close_stdin(self) -> None:
        self._loop.run(self.aio.close_stdin())

    def signal(self, signal: Literal["interrupt", "terminate", "kill", "hangup", "quit"]) -> None:
        self._loop.run(self.aio.signal(signal))

    def terminate(self) -> bool:
        return self._loop.run(self.aio.terminate())

    def resize(self, rows: int, cols: int) -> None:
        self._loop.run(self.aio.resize(rows, cols))


class FileSystem:
    """:class:`exec_server.FileSystem`, synchronously."""

    def __init__(self, loop: _Loop, fs: aio_fs.FileSystem) -> None:
        self._loop = loop
        self.aio = fs

    def read(self, path: str, **options: Any) -> bytes:
        return self._loop.run(self.aio.read(path, **options))

    def read_stream(self, path: str, **options: Any) -> Iterator[bytes]:
        return self._loop.iterate(self.aio.read_stream(path, **options))

    def write(self, path: str, data: bytes, **options: Any) -> None:
        self._loop.run(self.aio.write(path, data, **options))

    def write_stream(self, path: str, source: bytes | IO[bytes], **options: Any) -> int:
        return self._loop.run(self.aio.write_stream(path, source, **options))

    def stat(self, path: str, **options: Any) -> wire.Metadata:
        return self._loop.run(self.aio.stat(path, **options))

    def exists(self, path: str, **options: Any) -> bool:
        return self._loop.run(self.aio.exists(path, **options))

    def list(self, path: str, **options: Any) -> list[wire.DirectoryEntry]:
        return self._loop.run(self.aio.list(path, **options))

    def walk(self, path: str, **options: Any) -> wire.WalkResult:
        return self._loop.run(self.aio.walk(path, **options))

    def mkdir(self, path: str, **options: Any) -> None:
        self._loop.run(self.aio.mkdir(path, **options))

    def remove(self, path: str, **options: Any) -> None:
        self._loop.run(self.aio.remove(path, **options))

    def copy(self, source: str, destination: str, **options: Any) -> None:
        self._loop.run(self.aio.copy(source, destination, **options))

    def rename(self, source: str, destination: str, **options: Any) -> None:
        self._loop.run(self.aio.rename(source, destination, **options))

    def canonicalize(self, path: str, **options: Any) -> str:
        return self._loop.run(self.aio.canonicalize(path, **options))

    def watch(self, path: str, **options: Any) -> Watch:
        return Watch(self._loop, self._loop.run(self.aio.watch(path, **options)))


class Watch:
    """:class:`exec_server.Watch`, synchronously: iterate for :class:`Changes`."""

    def __init__(self, loop: _Loop, watch: aio_fs.Watch) -> None:
        self._loop = loop
        self.aio = watch

    def __iter__(self) -> Iterator[Changes]:
        return self._loop.iterate(self.aio)

    def close(self) -> None:
        self._loop.run(self.aio.close())

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
