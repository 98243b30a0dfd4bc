"""Files and HTTP against the real daemon (on this host, so the test checks its effects
directly)."""

from __future__ import annotations

import asyncio
import http.server
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from daemon import Daemon

from exec_server import Client, InternalError, InvalidRequest, NotFound, from_uri


def run(daemon: Daemon, body: Any) -> None:
    async def main() -> None:
        async with await Client.connect(daemon.url) as client:
            await body(client)

    asyncio.run(main())


def test_read_write_and_metadata(daemon: Daemon, tmp: Path) -> None:
    async def body(client: Client) -> None:
        path = str(tmp / "a file.txt")
        await client.fs.write(path, b"hello")
        assert (tmp / "a file.txt").read_bytes() == b"hello"
        assert await client.fs.read(path) == b"hello"
        await client.fs.write(path, b"atomic", atomic=True)
        assert await client.fs.read(f"file://{tmp}/a%20file.txt") == b"atomic"
        meta = await client.fs.stat(path)
        assert (meta["isFile"], meta["isDirectory"], meta["size"]) == (True, False, 6)
        assert await client.fs.exists(path) and not await client.fs.exists(str(tmp / "nope"))
        with pytest.raises(NotFound) as missing:
            await client.fs.read(str(tmp / "missing"))
        assert missing.value.data["errno"] == 2
        with pytest.raises(InvalidRequest):
            await client.fs.read(path, max_bytes=3)

    run(daemon, body)


def test_directories(daemon: Daemon, tmp: Path) -> None:
    async def body(client: Client) -> None:
        await client.fs.mkdir(str(tmp / "w" / "sub"))
        await client.fs.write(str(tmp / "w" / "sub" / "f"), b"1")
        await client.fs.write(str(tmp / "w" / "a"), b"2")
        names = sorted(entry["fileName"] for entry in await client.fs.list(str(tmp / "w")))
        assert names == ["a", "sub"]
        walked = await client.fs.walk(str(tmp / "w"))
        assert [(from_uri(e["path"]), e["kind"]) for e in walked["entries"]] == [
            (str(tmp / "w" / "a"), "file"),
            (str(tmp / "w" / "sub"), "directory"),
            (str(tmp / "w" / "sub" / "f"), "file"),
        ]
        assert not walked["truncated"]
        await client.fs.copy(str(tmp / "w"), str(tmp / "copy"), recursive=True)
        assert (tmp / "copy" / "sub" / "f").read_bytes() == b"1"
        await client.fs.rename(str(tmp / "copy" / "a"), str(tmp / "copy" / "b"))
        with pytest.raises(InvalidRequest):
            await client.fs.rename(str(tmp / "copy" / "b"), str(tmp / "copy" / "sub" / "f"))
        await client.fs.rename(
            str(tmp / "copy" / "b"), str(tmp / "copy" / "sub" / "f"), overwrite=True
        )
        assert (tmp / "copy" / "sub" / "f").read_bytes() == b"2"
        assert from_uri(await client.fs.canonicalize(str(tmp / "copy" / ".." / "w"))) == str(
            tmp / "w"
        )
        with pytest.raises(InternalError):
            await client.fs.remove(str(tmp / "w"), recursive=False)
        await client.fs.remove(str(tmp / "w"))
        assert not (tmp / "w").exists()

    run(daemon, body)


def test_streamed_files_survive_a_drop(daemon: Daemon, tmp: Path) -> None:
    data = os.urandom(5 * 1024 * 1024 + 123)

    async def body(client: Client) -> None:
        path = str(tmp / "big.bin")
        assert await client.fs.write_stream(path, data) == len(data)
        assert (tmp / "big.bin").read_bytes() == data
        received = bytearray()
        async for block in client.fs.read_stream(path):
            received += block
            if len(received) == 1024 * 1024:
                client.drop_connection()
        assert bytes(received) == data
        with open(tmp / "big.bin", "rb") as source:
            upload = client.fs.write_stream(str(tmp / "copy.bin"), source)
            task = asyncio.ensure_future(upload)
            await asyncio.sleep(0.01)
            client.drop_connection()
            assert await task == len(data)
        assert (tmp / "copy.bin").read_bytes() == data

    run(daemon, body)


def test_watch_reports_changes_and_a_reconnect(daemon: Daemon, tmp: Path) -> None:
    async def body(client: Client) -> None:
        async with await client.fs.watch(str(tmp)) as watch:
            (tmp / "new.txt").write_text("x")
            changes = await asyncio.wait_for(watch.__anext__(), 5)
            assert ("create", (tmp / "new.txt").as_uri()) in changes.changes
            client.drop_connection()
            dropped = await asyncio.wait_for(watch.__anext__(), 10)
            assert dropped.events_dropped
            (tmp / "after.txt").write_text("y")
            while True:
                changes = await asyncio.wait_for(watch.__anext__(), 5)
                if any(path.endswith("/after.txt") for _, path in changes.changes):
                    break

    run(daemon, body)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.send_response(201)
        self.send_header("x-echo", self.headers.get("x-echo", ""))
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_request(daemon: Daemon, http_server: str) -> None:
    async def body(client: Client) -> None:
        response = await client.http_request(
            "POST", f"{http_server}/echo", headers={"x-echo": "one"}, body=b"hi", timeout=5
        )
        assert (response.status, response.body, response.header("X-Echo")) == (201, b"hi", "one")

    run(daemon, body)
