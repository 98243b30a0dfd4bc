"""envd commands are processes of a session the daemon holds: they survive an upgrade (the
daemon handing over to its successor) and the listener finds them again."""

from __future__ import annotations

import os
import signal
import socket

import httpx
from conftest import Daemon, eventually


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 204
    except httpx.HTTPError:
        return False


def test_a_command_survives_an_upgrade(workdir):
    from e2b import Sandbox

    state = workdir / "upgrade-state"
    state.mkdir(mode=0o700)
    (workdir / "upgrade-daemon").mkdir()
    addr = f"127.0.0.1:{free_port()}"
    daemon = Daemon(workdir / "upgrade-daemon", state_dir=str(state), envd=addr)
    try:
        sandbox = Sandbox.create(debug=True, sandbox_url=daemon.envd_url)
        handle = sandbox.commands.run("sleep 3; echo after the upgrade", background=True)
        os.kill(daemon.process.pid, signal.SIGUSR2)
        daemon.process.wait(20)
        assert eventually(lambda: healthy(daemon.envd_url), timeout=20)
        assert handle.pid in {p.pid for p in sandbox.commands.list()}
        result = sandbox.commands.connect(handle.pid).wait()
        assert result.stdout == "after the upgrade\n"
    finally:
        # The successor: the daemon given this test's own state directory.
        for pid in daemons_on(state):
            os.kill(pid, signal.SIGTERM)
        daemon.stop()


def daemons_on(state) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if entry.isdigit() and b"--state-dir" in argv and str(state).encode() in argv:
            found.append(int(entry))
    return found
