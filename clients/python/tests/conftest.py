"""Fixtures: the real release daemon, started per test module on a free port (or a Unix
socket, or TLS), with its own state directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from daemon import REPO, Daemon


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """The daemons' directories: under target/, not /tmp, which sandboxed tests make writable
    (the daemon refuses a grant that would expose its state directory)."""
    parent = REPO / "target" / "python-client-tests"
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="daemons-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(workdir: Path) -> Iterator[Daemon]:
    running = Daemon(["--listen", "ws://127.0.0.1:0"], workdir / "ws")
    yield running
    running.stop()


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    """A scratch directory, which the daemon (on this host) sees at the same path."""
    return tmp_path
