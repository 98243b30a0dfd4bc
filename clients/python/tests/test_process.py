"""Processes against the real daemon: run, stream, stdin, signals, terminal, sandbox, errors."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from daemon import Daemon, python_argv

from exec_server import (
    Client,
    Exited,
    InvalidParams,
    InvalidRequest,
    ProcessFailed,
    ProcessTimeout,
    Sandbox,
)

T = TypeVar("T")


def session(daemon: Daemon, body: Callable[[Client], Awaitable[T]], **options: Any) -> T:
    async def main() -> T:
        async with await Client.connect(daemon.url, **options) as client:
            return await body(client)

    return asyncio.run(main())


def test_run_collects_output_and_the_exit(daemon: Daemon) -> None:
    async def body(client: Client) -> None:
        result = await client.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (result.stdout, result.stderr, result.returncode) == (b"out\n", b"err\n", 3)
        assert result.exit.reason == "exited"
        assert result.exit.usage is not None and result.exit.usage["wallMs"] >= 0
        with pytest.raises(ProcessFailed) as failed:
            await client.run(["sh", "-c", "echo no; exit 2"], check=True)
        assert (failed.value.returncode, failed.value.stdout) == (2, b"no\n")
        fed = await client.run(["wc", "-c"], input=b"x" * 100_000)
        assert fed.stdout.strip() == b"100000"
        env = await client.run(["sh", "-c", "echo $A-$HOME"], env={"A": "1"}, inherit_env="none")
        assert env.stdout == b"1-\n"

    session(daemon, body)


def test_run_timeout_ends_the_whole_tree(daemon: Daemon, tmp: Path) -> None:
    pid_file = tmp / "pid"

    async def body(client: Client) -> None:
        started = time.monotonic()
        with pytest.raises(ProcessTimeout) as timeout:
            await client.run(
                ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo started; wait"], timeout=0.5
            )
        assert time.monotonic() - started < 5
        assert timeout.value.stdout == b"started\n"

    session(daemon, body)
    background = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(background, 0)


def test_start_streams_output_and_waits(daemon: Daemon) -> None:
    async def body(client: Client) -> None:
        process = await client.start(
            python_argv("import sys\nfor i in range(5): print(i, flush=True)\nsys.exit(4)")
        )
        chunks = [chunk async for chunk in process.output()]
        assert b"".join(c.data for c in chunks) == b"0\n1\n2\n3\n4\n"
        assert all(c.stream == "stdout" for c in chunks)
        status = await process.wait()
        assert (status.exit_code, status.reason, status.signal) == (4, "exited", None)
        assert process.sandbox_type == "none"

    session(daemon, body)


def test_stdin_signals_and_terminate(daemon: Daemon) -> None:
    async def body(client: Client) -> None:
        cat = await client.start(["cat"], stdin=True)
        assert await cat.write(b"hello ") == "accepted"
        assert await cat.write(b"world") == "accepted"
        await cat.close_stdin()
        assert b"".join([c.data async for c in cat.output()]) == b"hello world"
        assert (await cat.write(b"late")) in ("stdinClosed", "unknownProcess")

        sleeper = await client.start(["sleep", "30"])
        await sleeper.signal("terminate")
        status = await sleeper.wait()
        assert (status.exit_code, status.reason, status.signal) == (143, "signaled", 15)

        tree = await client.start(["sh", "-c", "sleep 30 & sleep 30"])
        assert await tree.terminate() is True
        status = await tree.wait()
        assert (status.exit_code, status.reason) == (137, "terminated")
        events = [event async for event in tree.events()]
        assert isinstance(events[0], Exited)

    session(daemon, body)


def test_a_terminal_resizes(daemon: Daemon) -> None:
    async def body(client: Client) -> None:
        tty = await client.start(["sh", "-c", "read x; stty size"], tty=True, size=(24, 80))
        await tty.resize(50, 132)
        await tty.write(b"\n")
        chunks = [c async for c in tty.output()]
        assert b"50 132" in b"".join(c.data for c in chunks)
        assert {c.stream for c in chunks} == {"pty"}

    session(daemon, body)


def test_sandboxed_command_in_a_workspace(daemon: Daemon, tmp: Path) -> None:
    async def body(client: Client) -> None:
        if not (await client.environment()).get("capabilities", {}).get("linuxSandbox"):
            pytest.skip("the daemon cannot sandbox here (needs root and Landlock)")
        result = await client.run(
            ["sh", "-c", "echo ok > ok.txt; echo no > /etc/exec-server-py-test"],
            cwd=str(tmp),
            # Not /tmp: the daemon refuses a write grant over its own binary, which a
            # checkout under /tmp (as CI's may be) puts there.
            sandbox=Sandbox.workspace_write([str(tmp)], temporary=False),
        )
        assert result.sandbox_type == "linuxSeccomp"
        assert result.returncode != 0 and result.exit.sandbox_denied
        assert (tmp / "ok.txt").read_text() == "ok\n"
        assert not Path("/etc/exec-server-py-test").exists()
        read_only = await client.run(
            ["sh", "-c", "echo x > f"], cwd=str(tmp), sandbox=Sandbox.read_only()
        )
        assert read_only.returncode != 0 and not (tmp / "f").exists()

    session(daemon, body)


def test_errors_are_typed(daemon: Daemon) -> None:
    async def body(client: Client) -> None:
        with pytest.raises(InvalidRequest) as unknown:
            await client.call("process/read", {"processId": "nope"})
        assert (unknown.value.code, unknown.value.message) == (-32600, "unknown process id nope")
        with pytest.raises(InvalidParams) as bad:
            await client.start(["true"], limits={"maxOpenFiles": -1})
        assert "limits.maxOpenFiles" in bad.value.message
        with pytest.raises(ValueError):
            await client.start([])
        # Until the daemon knows onRetentionFull (#28) it ignores the member; after, it obeys it.
        evicting = await client.run(["true"], on_retention_full="evict")
        assert evicting.returncode == 0

    session(daemon, body)
