"""The Python client against a bare ``websockets`` loop making the same calls, on the release
daemon: the exec round trip (``process/start`` of ``true`` until ``process/closed``) and
streaming (a process writing 256 MiB, received to the last byte). The two are measured in
pairs whose order alternates, so that a shared machine's drift falls on both; the ratios are
medians of the pairs' ratios, the times medians.

    python3 clients/python/bench.py [--quick]

The last line is JSON; the targets are a ratio (client / bare) of at most 1.3 for both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable

sys.path.insert(0, str(Path(__file__).parent / "src"))
sys.path.insert(0, str(Path(__file__).parent / "tests"))

from daemon import Daemon  # noqa: E402
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from exec_server import Client  # noqa: E402

STREAM_BYTES = 256 * 1024 * 1024
TARGET = 1.3


def start_params(argv: list[str]) -> dict[str, Any]:
    """What both sides send: the client's start with no environment inherited."""
    return {
        "processId": str(uuid.uuid4()),
        "argv": argv,
        "cwd": "file:///",
        "env": {},
        "tty": False,
        "pipeStdin": False,
        "idempotent": True,
    }


class Bare:
    """JSON-RPC by hand: a reader task that resolves replies and counts a process's events."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.next_id = 1
        self.replies: dict[int, asyncio.Future[Any]] = {}
        self.closed: dict[str, asyncio.Future[int]] = {}
        self.received: dict[str, int] = {}
        self.reader = asyncio.ensure_future(self.read())

    @staticmethod
    async def open(url: str) -> Bare:
        # The client's own socket settings, so that only the code above the socket differs.
        socket = await connect(
            url, max_size=None, max_queue=None, compression=None, ping_interval=None, proxy=None
        )
        bare = Bare(socket)
        await bare.call("initialize", {"clientName": "bare", "binaryPayloads": True})
        await socket.send('{"method":"initialized","params":{}}')
        return bare

    async def read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.read_messages()

    async def read_messages(self) -> None:
        async for message in self.socket:
            if isinstance(message, bytes):
                header, _, payload = message.partition(b"\0")
                params = json.loads(header)["params"]
                process_id = params["processId"]
                self.received[process_id] = self.received.get(process_id, 0) + len(payload)
                continue
            decoded = json.loads(message)
            method = decoded.get("method")
            if method == "process/closed":
                self.closed[decoded["params"]["processId"]].set_result(
                    self.received.pop(decoded["params"]["processId"], 0)
                )
            elif method is None:
                self.replies.pop(decoded["id"]).set_result(decoded.get("result"))

    async def call(self, method: str, params: Any) -> Any:
        request_id = self.next_id
        self.next_id += 1
        reply = asyncio.get_running_loop().create_future()
        self.replies[request_id] = reply
        await self.socket.send(json.dumps({"id": request_id, "method": method, "params": params}))
        return await reply

    async def run(self, argv: list[str]) -> int:
        """Starts ``argv`` and waits for its close; returns the output's size."""
        params = start_params(argv)
        closed = self.closed[params["processId"]] = asyncio.get_running_loop().create_future()
        await self.call("process/start", params)
        size = await closed
        del self.closed[params["processId"]]
        return size


async def client_run(client: Client, argv: list[str]) -> int:
    process = await client.start_with(start_params(argv))  # type: ignore[arg-type]
    size = 0
    async for chunk in process.output():
        size += len(chunk.data)
    return size


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await action()
    return time.perf_counter() - started


async def measure(url: str, rounds: int, execs: int) -> dict[str, Any]:
    bare = await Bare.open(url)
    client = await Client.connect(url)
    stream = ["head", "-c", str(STREAM_BYTES), "/dev/zero"]

    async def bare_execs() -> None:
        for _ in range(execs):
            await bare.run(["true"])

    async def client_execs() -> None:
        for _ in range(execs):
            await client_run(client, ["true"])

    async def bare_stream() -> None:
        assert await bare.run(stream) == STREAM_BYTES

    async def client_stream() -> None:
        assert await client_run(client, stream) == STREAM_BYTES

    # Warm both paths (the daemon's spare launchers, the interpreter's caches).
    await bare.run(["true"])
    await client_run(client, ["true"])
    times: dict[str, list[float]] = {
        name: [] for name in ("bare_exec", "client_exec", "bare_stream", "client_stream")
    }
    ratios: dict[str, list[float]] = {"exec": [], "stream": []}
    for round_ in range(rounds):
        # Each pair runs back to back, the first of the two alternating from round to round, and
        # the ratio is taken per pair: a burst of load elsewhere then hits one pair, not one side.
        for kind, bare_side, client_side, per in (
            ("exec", bare_execs, client_execs, execs),
            ("stream", bare_stream, client_stream, 1),
        ):
            if round_ % 2 == 0:
                bare_time = await timed(bare_side)
                client_time = await timed(client_side)
            else:
                client_time = await timed(client_side)
                bare_time = await timed(bare_side)
            times[f"bare_{kind}"].append(bare_time / per)
            times[f"client_{kind}"].append(client_time / per)
            ratios[kind].append(client_time / bare_time)
    await client.close()
    await bare.socket.close()
    median = {name: statistics.median(values) for name, values in times.items()}
    mib = STREAM_BYTES / (1024 * 1024)
    return {
        "exec_round_trip_ms": {
            "bare": median["bare_exec"] * 1000,
            "client": median["client_exec"] * 1000,
        },
        "exec_ratio": statistics.median(ratios["exec"]),
        "stream_mib_per_s": {
            "bare": mib / median["bare_stream"],
            "client": mib / median["client_stream"],
        },
        "stream_ratio": statistics.median(ratios["stream"]),
        "rounds": rounds,
        "execs_per_round": execs,
        "target": TARGET,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (< 30 s)")
    args = parser.parse_args()
    rounds, execs = (3, 50) if args.quick else (11, 200)
    with tempfile.TemporaryDirectory(prefix="exec-server-py-bench-") as workdir:
        daemon = Daemon(["--listen", "ws://127.0.0.1:0"], Path(workdir))
        try:
            result = asyncio.run(measure(daemon.url, rounds, execs))
        finally:
            daemon.stop()
    exec_ms, stream = result["exec_round_trip_ms"], result["stream_mib_per_s"]
    print(
        f"exec round trip: client {exec_ms['client']:.3f} ms, "
        f"bare websockets {exec_ms['bare']:.3f} ms, ratio {result['exec_ratio']:.3f}"
    )
    print(
        f"streaming: client {stream['client']:.0f} MiB/s, "
        f"bare websockets {stream['bare']:.0f} MiB/s, ratio {result['stream_ratio']:.3f}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
