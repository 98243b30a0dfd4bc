"""`--envd-sandbox PROFILE.json`: every command an envd listener starts runs under the profile."""

from __future__ import annotations

import json

from conftest import Daemon


def test_commands_run_under_the_listeners_profile(workdir):
    allowed = workdir / "allowed"
    denied = workdir / "denied"
    allowed.mkdir()
    denied.mkdir()
    profile = workdir / "profile.json"
    profile.write_text(json.dumps({
        "type": "managed", "network": "restricted", "file_system": {
            "type": "restricted", "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {"path": {"type": "path", "path": allowed.as_uri()}, "access": "write"},
            ]}}))
    (workdir / "sandboxed-daemon").mkdir()
    daemon = Daemon(workdir / "sandboxed-daemon", "--envd-sandbox", str(profile))
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
