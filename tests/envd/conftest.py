"""Fixtures: the real daemon with an envd listener, driven by the unmodified E2B Python SDK
(pinned in requirements.txt) in debug mode, which talks to `sandbox_url` directly: no control
plane, no access token."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
# The Python client's tests find (or build) the release daemon; the same applies here.
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))
from daemon import Daemon as PlainDaemon, daemon_binary  # noqa: E402


class Daemon(PlainDaemon):
    """A running ``exec-server`` with one ``--envd-listen``; ``envd_url`` is where it serves."""

    def __init__(
        self, workdir: Path, *args: str, state_dir: str = "none", envd: str = "127.0.0.1:0"
    ) -> None:
        super().__init__(
            ["--listen", "ws://127.0.0.1:0", "--envd-listen", envd, *args], workdir, state_dir
        )
        log = (workdir / "daemon.log").read_text(errors="replace")
        found = re.search(r"envd listening on ((?:http|unix)://\S+)", log)
        if not found:
            self.stop()
            raise RuntimeError(f"the daemon did not start its envd listener:\n{log}")
        self.envd_url = re.sub(r"\x1b\[[0-9;]*m", "", found.group(1))


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    parent = REPO / "target" / "envd-tests"
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="run-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon(workdir: Path) -> Iterator[Daemon]:
    running = Daemon(workdir)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def sandbox(daemon: Daemon):
    from e2b import Sandbox

    return Sandbox.create(debug=True, sandbox_url=daemon.envd_url)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A directory the daemon (on this host) sees at the same path, open to every user."""
    tmp_path.chmod(0o777)
    return tmp_path


@pytest.fixture(scope="session")
def other_user() -> Iterator[str]:
    """An account this test makes (and removes): the daemon runs commands and writes files as
    it."""
    if os.geteuid() != 0:
        pytest.skip("making a user needs root")
    name = f"e2bt{os.getpid() % 100000}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    yield name
    subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)


def eventually(check, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)
