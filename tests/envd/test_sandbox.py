"""`--envd-sandbox PROFILE.json`: every command and file operation of an envd listener runs under
the profile."""

from __future__ import annotations

import json

import pytest
from conftest import Daemon


def sandboxed_daemon(workdir, allowed, denied, readable="root"):
    """A daemon whose envd listener's profile reads `readable` and writes only under `allowed`
    (`workdir` is shared by the module's tests: each gives directories of its own)."""
    allowed.mkdir(parents=True)
    denied.mkdir(parents=True)
    readable = (
        {"type": "special", "value": {"kind": "root"}} if readable == "root"
        else {"type": "path", "path": readable.as_uri()}
    )
    profile = allowed.parent / "profile.json"
    profile.write_text(json.dumps({
        "type": "managed", "network": "restricted", "file_system": {
            "type": "restricted", "entries": [
                {"path": readable, "access": "read"},
                {"path": {"type": "path", "path": allowed.as_uri()}, "access": "write"},
            ]}}))
    (allowed.parent / "sandboxed-daemon").mkdir()
    return Daemon(allowed.parent / "sandboxed-daemon", "--envd-sandbox", str(profile))


def test_commands_run_under_the_listeners_profile(workdir):
    allowed = workdir / "allowed"
    denied = workdir / "denied"
    daemon = sandboxed_daemon(workdir, allowed, denied)
    try:
        from e2b import Sandbox

        sandbox = Sandbox.create(debug=True, sandbox_url=daemon.envd_url)
        result = sandbox.commands.run(
            f"touch {allowed}/yes; touch {denied}/no 2>/dev/null; echo $?", cwd=str(allowed)
        )
        assert result.stdout == "1\n"
        assert (allowed / "yes").exists() and not (denied / "no").exists()
    finally:
        daemon.stop()


def test_file_operations_run_under_the_listeners_profile(workdir):
    allowed = workdir / "writes" / "allowed"
    denied = workdir / "writes" / "denied"
    daemon = sandboxed_daemon(workdir, allowed, denied)
    (denied / "kept.txt").write_text("untouched")
    try:
        from e2b import Sandbox

        files = Sandbox.create(debug=True, sandbox_url=daemon.envd_url).files
        # Inside the writable root everything works.
        files.write(f"{allowed}/sub/a.txt", "inside")
        assert files.read(f"{allowed}/sub/a.txt") == "inside"
        assert files.make_dir(f"{allowed}/made")
        files.rename(f"{allowed}/sub/a.txt", f"{allowed}/made/b.txt")
        assert [e.name for e in files.list(str(allowed), depth=2)] == ["made", "b.txt", "sub"]
        assert files.get_info(f"{allowed}/made/b.txt").size == len("inside")
        files.remove(f"{allowed}/made")
        assert not (allowed / "made").exists()
        # Readable but not writable: reads work, every change is refused and did not happen.
        assert files.read(f"{denied}/kept.txt") == "untouched"
        assert [e.name for e in files.list(str(denied))] == ["kept.txt"]
        refused = [
            lambda: files.write(f"{denied}/new.txt", "no"),
            lambda: files.write(f"{denied}/kept.txt", "overwritten"),
            lambda: files.write_files([{"path": f"{denied}/multi.txt", "data": "no"}]),
            lambda: files.make_dir(f"{denied}/dir"),
            lambda: files.rename(f"{denied}/kept.txt", f"{allowed}/stolen.txt"),
            lambda: files.rename(f"{allowed}/sub", f"{denied}/sub"),
            lambda: files.remove(f"{denied}/kept.txt"),
        ]
        for operation in refused:
            with pytest.raises(Exception) as caught:
                operation()
            assert "permission" in str(caught.value).lower() or "403" in str(caught.value)
        assert sorted(p.name for p in denied.iterdir()) == ["kept.txt"]
        assert (denied / "kept.txt").read_text() == "untouched"
        assert not (allowed / "stolen.txt").exists() and (allowed / "sub").is_dir()
    finally:
        daemon.stop()


def test_reads_outside_the_readable_roots_are_refused(workdir):
    allowed = workdir / "reads" / "allowed"
    denied = workdir / "reads" / "denied"
    daemon = sandboxed_daemon(workdir, allowed, denied, readable=allowed)
    (denied / "secret.txt").write_text("secret")
    try:
        from e2b import Sandbox

        files = Sandbox.create(debug=True, sandbox_url=daemon.envd_url).files
        files.write(f"{allowed}/mine.txt", "mine")
        assert files.read(f"{allowed}/mine.txt") == "mine"
        refused = [
            lambda: files.read(f"{denied}/secret.txt"),
            lambda: files.list(str(denied)),
            lambda: files.remove(f"{denied}/secret.txt"),
        ]
        for operation in refused:
            with pytest.raises(Exception) as caught:
                operation()
            assert "permission" in str(caught.value).lower() or "403" in str(caught.value)
        # A watch cannot be confined: refused under a restricting profile, wherever it points.
        for path in (allowed, denied):
            with pytest.raises(Exception) as caught:
                files.watch_dir(str(path))
            assert "cannot be confined" in str(caught.value)
        assert (denied / "secret.txt").read_text() == "secret"
    finally:
        daemon.stop()
