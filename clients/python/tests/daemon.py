"""The real daemon for the tests and the bench: the release binary, started on a free port (or
whatever ``--listen`` says) with a state directory of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def daemon_binary() -> Path:
    """``$EXEC_SERVER_BIN``, else the workspace's release build, built when missing."""
    explicit = os.environ.get("EXEC_SERVER_BIN")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    binary = target / "release" / "exec-server"
    if not binary.exists():
        subprocess.run(
            ["cargo", "build", "--release", "--bin", "exec-server"], cwd=REPO, check=True
        )
    return binary


class Daemon:
    """A running ``exec-server``; ``url`` is what it printed."""

    def __init__(self, args: list[str], workdir: Path, state_dir: str | None = None) -> None:
        """``state_dir``: the daemon's ``--state-dir``; by default a fresh ``workdir/state``."""
        self.workdir = workdir
        if state_dir is None:
            state = workdir / "state"
            state.mkdir(parents=True, mode=0o700)
            state_dir = str(state)
        else:
            workdir.mkdir(parents=True, exist_ok=True)
        self.log = open(workdir / "daemon.log", "wb")
        self.process = subprocess.Popen(
            [str(daemon_binary()), "--state-dir", state_dir, *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().strip()
        if not line:
            self.process.wait(5)
            log = (workdir / "daemon.log").read_text(errors="replace")
            raise RuntimeError(f"the daemon printed no URL:\n{log}")
        self.url = line

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.log.close()


def python_argv(code: str) -> list[str]:
    """argv that runs ``code`` with this interpreter (on the daemon's host, which is this)."""
    return [sys.executable, "-c", code]
