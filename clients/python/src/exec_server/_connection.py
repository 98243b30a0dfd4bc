"""One WebSocket connection: a reader task that routes replies to their callers and
notifications to a callback, and a way to kill it abruptly (client/src/connection.rs)."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from typing import Any, Callable, Mapping, Optional, Sequence

import websockets
from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.datastructures import Headers

from .errors import ConnectError, ProtocolError, rpc_error

#: ``(method, params, payload)``: payload is the raw bytes a binary message carried for the
#: params' ``chunk`` member (docs/protocol.md, Binary payloads), else None.
NotificationHandler = Callable[[str, Any, Optional[bytes]], None]


class Answer:
    """A result as the daemon sent it; ``chunk`` is the binary payload standing for the
    result's ``chunk`` member, when it came as one."""

    __slots__ = ("result", "chunk")

    def __init__(self, result: Any, chunk: bytes | None) -> None:
        self.result = result
        self.chunk = chunk


class Dropped(Exception):
    """The connection ended before the reply; ``sent`` tells whether the request may have
    reached the daemon."""

    def __init__(self, sent: bool) -> None:
        super().__init__("the connection dropped")
        self.sent = sent


#: HTTP's field names and values (RFC 9110, 5.1 and 5.5): anything else would break the
#: upgrade request, or smuggle another header into it.
_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def header_pairs(headers: Mapping[str, str] | Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` as ``(name, value)`` pairs, each checked."""
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    for name, value in pairs:
        if not _NAME.fullmatch(name):
            raise ValueError(f"`{name}` is not a valid header name")
        if not _VALUE.fullmatch(value):
            raise ValueError(f"the value of `{name}` is not a valid header value")
    return pairs


def handshake_headers(token: str | None, headers: Sequence[tuple[str, str]]) -> Headers:
    """The upgrade's headers: the token as ``Authorization: Bearer`` and as ``X-Access-Token``
    (the one agent-sandbox's router, which drops ``Authorization``, passes on), then
    ``headers``, each replacing one of the same name (client/src/connection.rs)."""
    sent = Headers()
    if token:
        sent["Authorization"] = f"Bearer {token}"
        sent["X-Access-Token"] = token
    for name, value in headers:
        if name in sent:
            del sent[name]
        sent[name] = value
    return sent


class _Connect(connect):
    """``connect`` following no redirect, as the Rust client: the daemon sends none, and
    websockets would carry the token to wherever one points (X-Access-Token even across
    origins; Authorization too before websockets 17)."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


async def open_socket(
    url: str,
    token: str | None,
    headers: Sequence[tuple[str, str]],
    ca_file: str | None,
    open_timeout: float,
) -> ClientConnection:
    """Opens the WebSocket: TCP for ``ws://``, TLS for ``wss://`` (the system's roots plus
    ``ca_file``), a Unix socket for ``unix:///PATH``; ``headers`` go with the upgrade."""
    options: dict[str, Any] = {
        # The daemon bounds what it sends; replies such as fs/readFile may be large.
        "max_size": None,
        "compression": None,
        "open_timeout": open_timeout,
        # The daemon pings; a busy event loop must not make the client drop a live socket.
        "ping_interval": None,
        "max_queue": None,
        "user_agent_header": "exec-server-python",
    }
    try:
        options["additional_headers"] = handshake_headers(token, headers)
        if url.startswith("unix://"):
            return await unix_connect(url[len("unix://") :], "ws://localhost/", **options)
        if url.startswith("wss://"):
            context = ssl.create_default_context(cafile=ca_file)
            return await _Connect(url, ssl=context, proxy=None, **options)
        if url.startswith("ws://"):
            return await _Connect(url, proxy=None, **options)
    except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as err:
        raise ConnectError(f"cannot connect to {url}: {err}") from err
    raise ConnectError(f"invalid URL `{url}`: expected ws://, wss:// or unix:///PATH")


class Connection:
    def __init__(self, socket: ClientConnection, epoch: int, notify: NotificationHandler) -> None:
        #: Counts connections of one client, so a retry can wait for a newer one.
        self.epoch = epoch
        self._socket = socket
        self._notify = notify
        self._pending: dict[int, asyncio.Future[Answer]] = {}
        self.dead = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for message in self._socket:
                if isinstance(message, bytes):
                    header, nul, payload = message.partition(b"\0")
                    self._route(header, payload if nul else None)
                else:
                    self._route(message, None)
        except websockets.exceptions.ConnectionClosed:
            pass
        finally:
            self.kill()

    def _route(self, text: str | bytes, chunk: bytes | None) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        if not isinstance(message, dict):
            # A batch reply: this client sends no batches.
            return
        method = message.get("method")
        if method is not None:
            self._notify(method, message.get("params"), chunk)
            return
        waiter = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if waiter is None or waiter.done():
            return
        if "result" in message:
            waiter.set_result(Answer(message["result"], chunk))
        elif "error" in message:
            waiter.set_exception(rpc_error(message["error"]))
        else:
            waiter.set_exception(ProtocolError(f"reply has neither result nor error: {text!r}"))

    async def request(self, request_id: int, text: str) -> Answer:
        """Sends a request whose envelope is ``text`` and waits for its reply."""
        if self.dead.is_set():
            raise Dropped(sent=False)
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        try:
            await self._socket.send(text)
        except websockets.exceptions.ConnectionClosed:
            self._pending.pop(request_id, None)
            self.kill()
            raise Dropped(sent=False) from None
        return await waiter

    async def notify(self, text: str) -> None:
        try:
            await self._socket.send(text)
        except websockets.exceptions.ConnectionClosed:
            self.kill()

    def kill(self) -> None:
        """Drops the socket at once, without a close handshake, and fails every waiting
        request."""
        if self.dead.is_set():
            return
        self.dead.set()
        transport = self._socket.transport
        if transport is not None:
            transport.abort()
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(Dropped(sent=True))
        if self._reader is not asyncio.current_task():
            self._reader.cancel()

    async def close(self) -> None:
        """Closes cleanly, and kills what has not ended a second later."""
        try:
            await asyncio.wait_for(self._socket.close(), 1.0)
        except (asyncio.TimeoutError, websockets.exceptions.WebSocketException, OSError):
            pass
        self.kill()
