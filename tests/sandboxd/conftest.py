"""Fixtures: the real daemon with its sandboxd gRPC port, and the `process.v1` stubs the stock
gRPC toolchain generates from proto/sandboxd (grpcio-tools, pinned in requirements.txt)."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Iterator

import grpc
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))
from daemon import Daemon as PlainDaemon  # noqa: E402
from stubs import generate  # noqa: E402

TOKEN = "sandboxd-grpcio-token-0123456789"


class Daemon(PlainDaemon):
    """A running ``exec-server`` with ``--sandboxd-grpc-listen``; ``grpc_address`` is where."""

    def __init__(self, workdir: Path) -> None:
        token = workdir / "token"
        workdir.mkdir(parents=True, exist_ok=True)
        token.write_text(TOKEN)
        token.chmod(0o600)
        args = ["--listen", "ws://127.0.0.1:0", "--sandboxd-grpc-listen", "127.0.0.1:0"]
        args += ["--connection-token-file", str(token), "--sandboxd-root", str(workdir)]
        super().__init__(args, workdir, state_dir="none")
        log = (workdir / "daemon.log").read_text(errors="replace")
        found = re.search(r"sandboxd gRPC listening on http://(\S+)", re.sub(r"\x1b\[[0-9;]*m", "", log))
        if not found:
            self.stop()
            raise RuntimeError(f"the daemon did not start its gRPC listener:\n{log}")
        self.grpc_address = found.group(1)


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    parent = REPO / "target" / "sandboxd-tests"
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="run-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def stubs(workdir: Path) -> tuple[ModuleType, ModuleType]:
    """``process_pb2`` and ``process_pb2_grpc``, generated now from the vendored .proto."""
    return generate(workdir / "stubs")


@pytest.fixture(scope="session")
def daemon(workdir: Path) -> Iterator[Daemon]:
    running = Daemon(workdir / "daemon")
    yield running
    running.stop()


@pytest.fixture()
def channel(daemon: Daemon) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(daemon.grpc_address) as opened:
        yield opened


AUTH = (("authorization", f"Bearer {TOKEN}"),)
