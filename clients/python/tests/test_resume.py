"""Dropped connections: the client resumes its session and delivers every byte of output and
every stdin write exactly once (the Rust client's recovery rules, client/src/lib.rs)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from daemon import Daemon, python_argv

from exec_server import Client, OutputLostError, SessionLostError

LINES = 200_000
#: Prints LINES numbered lines in bursts, so that output is still coming when the test drops
#: the connection.
COUNTER = python_argv(
    "import sys, time\n"
    f"for i in range({LINES}):\n"
    "    sys.stdout.write('%07d\\n' % i)\n"
    "    if i % 20000 == 0: sys.stdout.flush(); time.sleep(0.05)\n"
)
EXPECTED = b"".join(b"%07d\n" % i for i in range(LINES))


def test_output_survives_dropped_connections(daemon: Daemon) -> None:
    async def main() -> None:
        async with await Client.connect(daemon.url) as client:
            process = await client.start(COUNTER)
            received = bytearray()
            drops = 0
            async for chunk in process.output():
                received += chunk.data
                # Drop whenever another 128 KiB arrived, up to 8 times.
                if drops < 8 and len(received) > (drops + 1) * 131072:
                    drops += 1
                    client.drop_connection()
            assert drops == 8
            assert client.recoveries >= 1
            assert bytes(received) == EXPECTED
            assert (await process.wait()).exit_code == 0

    asyncio.run(main())


def test_stdin_writes_land_once_across_drops(daemon: Daemon) -> None:
    async def main() -> None:
        async with await Client.connect(daemon.url) as client:
            cat = await client.start(["cat"], stdin=True)
            sent = bytearray()
            for i in range(300):
                data = b"%05d," % i
                if i % 25 == 7:
                    # The write goes out on a connection that is about to die: its reply is lost
                    # or it never arrives; either way it is retried with the same writeId.
                    client.drop_connection()
                assert await cat.write(data) == "accepted"
                sent += data
            await cat.close_stdin()
            received = b"".join([chunk.data async for chunk in cat.output()])
            assert received == bytes(sent)
            assert client.recoveries >= 1

    asyncio.run(main())


class PausableProxy:
    """A TCP proxy to the daemon whose connections can be cut and whose new connections can be
    held back, as a network outage would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.open = asyncio.Event()
        self.open.set()
        self.pipes: list[asyncio.StreamWriter] = []

    async def serve(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]  # type: ignore[no-any-return]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.open.wait()
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.target_port
        )
        self.pipes += [writer, upstream_writer]

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    def cut(self) -> None:
        self.open.clear()
        for writer in self.pipes:
            writer.transport.abort()
        self.pipes.clear()


@contextlib.asynccontextmanager
async def proxy_to(daemon: Daemon) -> AsyncIterator[PausableProxy]:
    proxy = PausableProxy(int(daemon.url.rsplit(":", 1)[1]))
    await proxy.serve()
    try:
        yield proxy
    finally:
        proxy.server.close()


def test_an_outage_longer_than_the_output_catches_up_past_the_read_budget(daemon: Daemon) -> None:
    """While the session is detached the process writes 6 MiB and ends; a process/read returns
    at most 4 MiB, so the catch-up must read on instead of taking the read's end for the close."""

    async def main() -> None:
        async with proxy_to(daemon) as proxy:
            port = proxy.server.sockets[0].getsockname()[1]
            async with await Client.connect(f"ws://127.0.0.1:{port}") as client:
                writer = await client.start(
                    python_argv(
                        "import sys, time\nsys.stdin.read()\ntime.sleep(0.3)\n"
                        "for i in range(6): sys.stdout.write(chr(97 + i) * 1048576)\n"
                    ),
                    stdin=True,
                )
                await writer.close_stdin()
                proxy.cut()
                await asyncio.sleep(1.0)
                proxy.open.set()
                data = b"".join([chunk.data async for chunk in writer.output()])
                assert data == b"".join(bytes([97 + i]) * 1048576 for i in range(6))
                assert (await writer.wait()).exit_code == 0
                await asyncio.wait_for(client.wait_for_recovery(1), 10)

    asyncio.run(main())


def test_without_reconnecting_a_drop_loses_the_session_as_a_close_does(daemon: Daemon) -> None:
    async def main() -> None:
        async with await Client.connect(daemon.url, reconnect_deadline=None) as client:
            process = await client.start(["sleep", "30"])
            client.drop_connection()
            with pytest.raises(SessionLostError):
                await process.wait()
            with pytest.raises(SessionLostError):
                await client.call("environment/status")

        client = await Client.connect(daemon.url)
        process = await client.start(["sleep", "30"])
        await client.close()
        with pytest.raises(SessionLostError, match="closed"):
            await process.wait()

    asyncio.run(main())


@pytest.fixture(scope="module")
def forgetful_daemon(workdir: Path) -> Iterator[Daemon]:
    """A daemon that retains only 1 MiB of each process's output."""
    running = Daemon(
        ["--listen", "ws://127.0.0.1:0", "--output-retention-bytes", "1048576"],
        workdir / "forgetful",
    )
    yield running
    running.stop()


def test_output_evicted_during_an_outage_is_an_explicit_gap(forgetful_daemon: Daemon) -> None:
    """While detached the process writes 4 MiB and the daemon keeps 1 MiB: the client reports
    what was lost (OutputLostError, with its seqs), then delivers the rest, and run() refuses to
    return output with a hole in it."""

    async def main() -> None:
        async with proxy_to(forgetful_daemon) as proxy:
            port = proxy.server.sockets[0].getsockname()[1]
            async with await Client.connect(f"ws://127.0.0.1:{port}") as client:
                writer = await client.start(
                    python_argv(
                        "import sys, time\nsys.stdin.read()\ntime.sleep(0.3)\n"
                        "for i in range(64): sys.stdout.write(chr(65 + i % 26) * 65536); "
                        "sys.stdout.flush()\n"
                        "time.sleep(0.5)\nprint('end')\n"
                    ),
                    stdin=True,
                )
                await writer.close_stdin()
                proxy.cut()
                await asyncio.sleep(1.5)
                proxy.open.set()
                received = bytearray()
                lost: list[OutputLostError] = []
                while True:
                    try:
                        async for chunk in writer.output():
                            received += chunk.data
                        break
                    except OutputLostError as error:
                        lost.append(error)
                assert len(lost) == 1 and lost[0].from_seq == 1
                assert received.endswith(b"end\n")
                # What the daemon still held: the newest output, at most its 1 MiB.
                assert 0 < len(received) - 4 <= 1048576
                assert (await writer.wait()).exit_code == 0

                with pytest.raises(OutputLostError):
                    task = asyncio.ensure_future(
                        client.run(
                            python_argv(
                                "import time\ntime.sleep(0.3)\n"
                                "print('x' * 4194304, flush=True)\ntime.sleep(0.5)"
                            )
                        )
                    )
                    await asyncio.sleep(0.1)
                    proxy.cut()
                    await asyncio.sleep(1.5)
                    proxy.open.set()
                    await task

    asyncio.run(main())
