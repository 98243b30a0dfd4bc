"""``fs/*`` calls, as ``client.fs``. Paths are absolute paths (or ``file:`` URIs) on the daemon's
host; results are the wire types (:mod:`exec_server.wire`), whose paths are ``file:`` URIs
(:func:`exec_server.paths.from_uri` turns them back). Every call takes ``sandbox=`` to run
confined (docs/protocol.md, Filesystem)."""

from __future__ import annotations

import asyncio
import uuid
from base64 import b64decode, b64encode
from collections import deque
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, AsyncIterator, Union

from . import wire
from .errors import DisconnectedError, NotFound, RpcError, SessionLostError
from .paths import to_uri
from .sandbox import Sandbox

if TYPE_CHECKING:
    from .client import Client

#: The largest ``fs/readBlock`` and ``fs/writeBlock``.
BLOCK_SIZE = 1024 * 1024
#: Blocks kept in flight by streamed reads and writes.
IN_FLIGHT = 4
#: How often a streamed read or write starts over after its connection (so its handle) was lost.
ATTEMPTS = 3

SandboxArg = Union[Sandbox, wire.FileSystemSandboxContext, None]


def _params(sandbox: SandboxArg, **members: Any) -> dict[str, Any]:
    params = {key: value for key, value in members.items() if value is not None}
    if sandbox is not None:
        params["sandbox"] = sandbox.to_wire() if isinstance(sandbox, Sandbox) else sandbox
    return params


def _handle_id() -> str:
    # The daemon caps ids at 32 bytes: a UUID without dashes fits exactly.
    return uuid.uuid4().hex


async def _abandon(in_flight: deque[asyncio.Future[Any]]) -> None:
    """Cancels the calls still in flight and collects their outcomes, whatever they are."""
    for future in in_flight:
        future.cancel()
    await asyncio.gather(*in_flight, return_exceptions=True)


class FileSystem:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def read(
        self,
        path: str,
        *,
        max_bytes: int | None = None,
        follow_symlinks: bool | None = None,
        sandbox: SandboxArg = None,
    ) -> bytes:
        """The whole file in one message (up to the daemon's ``--max-read-file-bytes``); see
        :meth:`read_stream` for large files."""
        params = _params(
            sandbox, path=to_uri(path), maxBytes=max_bytes, followSymlinks=follow_symlinks
        )
        result = await self._client.call("fs/readFile", params)
        return b64decode(result["dataBase64"])

    async def read_stream(
        self, path: str, *, block_size: int = BLOCK_SIZE, sandbox: SandboxArg = None
    ) -> AsyncIterator[bytes]:
        """The file's bytes in blocks, with ``fs/open`` and pipelined ``fs/readBlock`` (no size
        limit). A handle lost with its connection is reopened at the offset reached."""
        offset, attempts = 0, 0
        while True:
            handle = await self._open(path, "read", sandbox)
            try:
                async for block in self._blocks(handle, offset, block_size):
                    offset += len(block)
                    yield block
                return
            except (DisconnectedError, NotFound) as error:
                attempts += 1
                if attempts >= ATTEMPTS:
                    raise error
            finally:
                await self._close(handle)

    async def _blocks(self, handle: str, offset: int, size: int) -> AsyncIterator[bytes]:
        in_flight: deque[asyncio.Future[Any]] = deque()
        following = offset
        try:
            while True:
                while len(in_flight) < IN_FLIGHT:
                    params = {"handleId": handle, "offset": following, "len": size}
                    in_flight.append(
                        asyncio.ensure_future(self._client.call("fs/readBlock", params))
                    )
                    following += size
                result = await in_flight.popleft()
                chunk = result["chunk"]
                data = chunk if isinstance(chunk, bytes) else b64decode(chunk)
                if data:
                    yield data
                if result["eof"]:
                    return
        finally:
            await _abandon(in_flight)

    async def write(
        self,
        path: str,
        data: bytes,
        *,
        atomic: bool = False,
        follow_symlinks: bool | None = None,
        sandbox: SandboxArg = None,
    ) -> None:
        """The whole file in one message; ``atomic`` replaces it by a rename. See
        :meth:`write_stream` for large files."""
        params = _params(
            sandbox,
            path=to_uri(path),
            dataBase64=b64encode(data).decode("ascii"),
            followSymlinks=follow_symlinks,
            atomic=atomic or None,
        )
        await self._client.call("fs/writeFile", params)

    async def write_stream(
        self, path: str, source: bytes | IO[bytes], *, sandbox: SandboxArg = None
    ) -> int:
        """Writes ``source`` (bytes, or a seekable binary file read from its current
        position) to ``path`` in pipelined blocks, staged beside the target and renamed into
        place only once complete (``fs/open {mode: replace}``). A dropped connection loses the
        staged file with its handle, so the upload then starts over. Returns the size."""
        start = 0 if isinstance(source, bytes) else source.tell()
        attempts = 0
        while True:
            if not isinstance(source, bytes):
                source.seek(start)
            try:
                return await self._upload(path, source, sandbox)
            except (DisconnectedError, NotFound) as error:
                attempts += 1
                if attempts >= ATTEMPTS:
                    raise error

    async def _upload(self, path: str, source: bytes | IO[bytes], sandbox: SandboxArg) -> int:
        handle = await self._open(path, "replaceOnClose", sandbox)
        in_flight: deque[asyncio.Future[Any]] = deque()
        offset = 0
        try:
            while True:
                block = (
                    source[offset : offset + BLOCK_SIZE]
                    if isinstance(source, bytes)
                    else source.read(BLOCK_SIZE)
                )
                if block:
                    params = {
                        "handleId": handle,
                        "offset": offset,
                        "chunk": b64encode(block).decode("ascii"),
                    }
                    in_flight.append(
                        asyncio.ensure_future(self._client.call("fs/writeBlock", params))
                    )
                    offset += len(block)
                while in_flight and (len(in_flight) >= IN_FLIGHT or not block):
                    await in_flight.popleft()
                if not block:
                    break
        except BaseException:
            await _abandon(in_flight)
            await self._close(handle, discard=True)
            raise
        await self._client.call("fs/close", {"handleId": handle})
        return offset

    async def _open(self, path: str, mode: str, sandbox: SandboxArg) -> str:
        params = _params(
            sandbox, handleId=_handle_id(), path=to_uri(path), mode=None if mode == "read" else mode
        )
        result = await self._client.call("fs/open", params)
        return result["handleId"]  # type: ignore[no-any-return]

    async def _close(self, handle: str, discard: bool = False) -> None:
        params: dict[str, Any] = {"handleId": handle}
        if discard:
            params["discard"] = True
        try:
            await self._client.call("fs/close", params)
        except (DisconnectedError, SessionLostError):
            # The handle went with the connection.
            pass

    async def stat(
        self, path: str, *, follow_symlinks: bool | None = None, sandbox: SandboxArg = None
    ) -> wire.Metadata:
        params = _params(sandbox, path=to_uri(path), followSymlinks=follow_symlinks)
        return await self._client.call("fs/getMetadata", params)  # type: ignore[no-any-return]

    async def exists(self, path: str, *, sandbox: SandboxArg = None) -> bool:
        try:
            await self.stat(path, sandbox=sandbox)
        except NotFound:
            return False
        return True

    async def list(self, path: str, *, sandbox: SandboxArg = None) -> list[wire.DirectoryEntry]:
        """The directory's entries (unsorted)."""
        result = await self._client.call("fs/readDirectory", _params(sandbox, path=to_uri(path)))
        return result["entries"]  # type: ignore[no-any-return]

    async def walk(
        self,
        path: str,
        *,
        max_depth: int = 64,
        max_directories: int = 10_000,
        max_entries: int = 50_000,
        follow_symlinks: bool = False,
        prune_hidden: bool = False,
        sandbox: SandboxArg = None,
    ) -> wire.WalkResult:
        """A bounded breadth-first listing: ``entries`` (``path`` URI, ``kind``), ``errors``,
        and ``truncated`` when a budget stopped it."""
        options: wire.WalkOptions = {
            "maxDepth": max_depth,
            "maxDirectories": max_directories,
            "maxEntries": max_entries,
            "followDirectorySymlinks": follow_symlinks,
        }
        if prune_hidden:
            options["pruneHiddenDirectories"] = True
        params = _params(sandbox, path=to_uri(path), options=options)
        return await self._client.call("fs/walk", params)  # type: ignore[no-any-return]

    async def mkdir(self, path: str, *, recursive: bool = True, sandbox: SandboxArg = None) -> None:
        await self._client.call(
            "fs/createDirectory", _params(sandbox, path=to_uri(path), recursive=recursive)
        )

    async def remove(
        self, path: str, *, recursive: bool = True, force: bool = True, sandbox: SandboxArg = None
    ) -> None:
        """Removes a file, a symlink, or a directory tree; a missing path is fine with
        ``force``."""
        params = _params(sandbox, path=to_uri(path), recursive=recursive, force=force)
        await self._client.call("fs/remove", params)

    async def copy(
        self, source: str, destination: str, *, recursive: bool = False, sandbox: SandboxArg = None
    ) -> None:
        params = _params(
            sandbox,
            sourcePath=to_uri(source),
            destinationPath=to_uri(destination),
            recursive=recursive,
        )
        await self._client.call("fs/copy", params)

    async def rename(
        self, source: str, destination: str, *, overwrite: bool = False, sandbox: SandboxArg = None
    ) -> None:
        params = _params(
            sandbox,
            sourcePath=to_uri(source),
            destinationPath=to_uri(destination),
            overwrite=overwrite or None,
        )
        await self._client.call("fs/rename", params)

    async def canonicalize(self, path: str, *, sandbox: SandboxArg = None) -> str:
        result = await self._client.call("fs/canonicalize", _params(sandbox, path=to_uri(path)))
        return result["path"]  # type: ignore[no-any-return]

    async def watch(self, path: str, *, recursive: bool = False) -> Watch:
        """Watches ``path`` (``fs/watch``); iterate the returned :class:`Watch` for
        :class:`Changes`, and close it (or use it as an async context manager) to unwatch."""
        watch = Watch(self._client, uuid.uuid4().hex, to_uri(path), recursive)
        await watch.rewatch()
        return watch


@dataclass(frozen=True)
class Changes:
    """One ``fs/changed``: ``(kind, path URI)`` pairs, ``kind`` one of ``create``, ``modify``,
    ``remove``, ``rename``, ``other``. ``events_dropped``: some changes were lost (also after a
    reconnect, when the watch was set up again): rescan what you cache."""

    changes: list[tuple[str, str]]
    events_dropped: bool


class Watch:
    """An ``fs/watch``. Watches belong to the connection: after a reconnect the client watches
    again and reports :class:`Changes` with ``events_dropped``, since changes meanwhile are
    unknown."""

    def __init__(self, client: Client, watch_id: str, path: str, recursive: bool) -> None:
        self._client = client
        self.id = watch_id
        self._params = {"watchId": watch_id, "path": path, "recursive": recursive}
        self._queue: asyncio.Queue[Changes | BaseException | None] = asyncio.Queue()
        self._lost = False
        self._closed = False

    async def rewatch(self) -> None:
        self._client._watches[self.id] = self
        await self._client.call("fs/watch", self._params)
        if self._lost:
            self._lost = False
            self._queue.put_nowait(Changes([], True))

    async def resume(self) -> None:
        """Watches again after a reconnect. A watch the daemon now refuses (its path is gone)
        ends with that error; one whose call dropped again waits for the next recovery."""
        try:
            await self.rewatch()
        except RpcError as error:
            self._client._watches.pop(self.id, None)
            self._queue.put_nowait(error)
        except (DisconnectedError, SessionLostError):
            pass

    def connection_lost(self) -> None:
        self._lost = True

    def changed(self, params: dict[str, Any]) -> None:
        changes = [(change["kind"], change["path"]) for change in params["changes"]]
        self._queue.put_nowait(Changes(changes, bool(params.get("eventsDropped"))))

    def fail(self, message: str) -> None:
        self._queue.put_nowait(SessionLostError(message))

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Changes:
        if self._closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def close(self) -> None:
        """``fs/unwatch``; iteration ends."""
        if self._closed:
            return
        self._closed = True
        self._client._watches.pop(self.id, None)
        self._queue.put_nowait(None)
        try:
            await self._client.call("fs/unwatch", {"watchId": self.id})
        except (DisconnectedError, SessionLostError):
            pass

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
