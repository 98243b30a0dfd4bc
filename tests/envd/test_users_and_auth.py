"""Users (Basic auth on RPCs, `username=` on /files), the access token, and the listener's
refusal to serve beyond loopback without one."""

from __future__ import annotations

import os
import pwd
import subprocess

import httpx
import pytest
from conftest import Daemon, daemon_binary


def owner(path) -> str:
    return pwd.getpwuid(os.stat(path).st_uid).pw_name


def test_root_is_the_default_user(sandbox, scratch):
    assert sandbox.commands.run("whoami").stdout == "root\n"
    sandbox.files.write(str(scratch / "r.txt"), "r")
    assert owner(scratch / "r.txt") == "root"


def test_commands_run_as_another_account(sandbox, other_user):
    result = sandbox.commands.run("whoami; echo $HOME $USER; pwd; id -u", user=other_user)
    home = pwd.getpwnam(other_user).pw_dir
    uid = pwd.getpwnam(other_user).pw_uid
    assert result.stdout == f"{other_user}\n{home} {other_user}\n{home}\n{uid}\n"
    denied = sandbox.commands.run("touch /root/nope 2>&1; echo $?", user=other_user)
    assert denied.stdout.strip().endswith("1"), "the account has its own rights, not root's"


def test_files_are_written_as_that_account(sandbox, other_user, scratch):
    home = pwd.getpwnam(other_user).pw_dir
    info = sandbox.files.write("notes/today.txt", "hello", user=other_user)
    assert info.path == f"{home}/notes/today.txt", "relative paths start at the user's home"
    assert owner(f"{home}/notes") == other_user, "missing parents are the user's too"
    assert owner(f"{home}/notes/today.txt") == other_user
    assert sandbox.files.read("notes/today.txt", user=other_user) == "hello"
    sandbox.files.write(str(scratch / "theirs.txt"), "x", user=other_user)
    assert owner(scratch / "theirs.txt") == other_user
    assert sandbox.files.make_dir("made/deep", user=other_user) is True
    assert owner(f"{home}/made/deep") == other_user
    assert sandbox.files.get_info("made", user=other_user).owner == other_user


def test_an_unknown_user_is_a_clear_error(sandbox):
    with pytest.raises(Exception) as failed:
        sandbox.commands.run("true", user="no-such-user-e2b")
    assert "unknown user no-such-user-e2b" in str(failed.value)
    with pytest.raises(Exception) as failed:
        sandbox.files.write("x.txt", "x", user="no-such-user-e2b")
    assert "unknown user" in str(failed.value)


def list_processes(url: str, headers: dict) -> httpx.Response:
    return httpx.post(
        f"{url}/process.Process/List",
        content=b"{}",
        headers={"Content-Type": "application/json", **headers},
    )


def test_the_access_token_guards_every_request_but_health(workdir):
    token_file = workdir / "envd-token"
    token_file.write_text("s3cret\n")
    token_file.chmod(0o600)
    (workdir / "token-daemon").mkdir()
    guarded = Daemon(workdir / "token-daemon", "--envd-access-token-file", str(token_file))
    try:
        url = guarded.envd_url
        assert httpx.get(f"{url}/health").status_code == 204
        refused = list_processes(url, {})
        assert refused.status_code == 401
        assert refused.json()["code"] == "unauthenticated"
        assert list_processes(url, {"X-Access-Token": "wrong"}).status_code == 401
        allowed = list_processes(url, {"X-Access-Token": "s3cret"})
        assert (allowed.status_code, allowed.json()) == (200, {"processes": []})
        assert httpx.get(f"{url}/files", params={"path": "/etc/hostname"}).status_code == 401
    finally:
        guarded.stop()


def test_no_token_beyond_loopback_is_refused_unless_asked_for():
    refused = subprocess.run(
        [str(daemon_binary()), "--listen", "ws://127.0.0.1:0", "--state-dir", "none",
         "--envd-listen", "0.0.0.0:0"],
        capture_output=True, timeout=30,
    )
    assert refused.returncode != 0
    assert b"--envd-access-token-file" in refused.stderr


def test_unary_errors_and_codecs_follow_connect(daemon):
    url = daemon.envd_url
    unknown = httpx.post(
        f"{url}/process.Process/SendSignal",
        json={"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"},
    )
    assert unknown.status_code == 404
    assert unknown.json() == {"code": "not_found", "message": "process with pid 999999 not found"}
    # The binary codec is served (an empty body is the empty ListRequest; tests/it/envd_proto.rs
    # drives it with a Connect client); a codec Connect does not name is not.
    proto = httpx.post(
        f"{url}/process.Process/List", content=b"", headers={"Content-Type": "application/proto"}
    )
    assert proto.status_code == 200 and proto.headers["content-type"] == "application/proto"
    xml = httpx.post(
        f"{url}/process.Process/List", content=b"", headers={"Content-Type": "application/xml"}
    )
    assert xml.status_code == 501 and xml.json()["code"] == "unimplemented"
    assert httpx.post(f"{url}/nope.Service/X", json={}).json()["code"] == "unimplemented"


def test_h2c_with_prior_knowledge(daemon):
    with httpx.Client(http1=False, http2=True) as client:
        response = list_processes_with(client, daemon.envd_url)
    assert response.http_version == "HTTP/2"
    assert response.status_code == 200


def list_processes_with(client: httpx.Client, url: str) -> httpx.Response:
    return client.post(
        f"{url}/process.Process/List", content=b"{}", headers={"Content-Type": "application/json"}
    )


def test_a_unix_socket_listener_is_the_daemon_users_alone(workdir):
    socket_path = workdir / "envd.sock"
    (workdir / "unix-daemon").mkdir()
    daemon = Daemon(workdir / "unix-daemon", envd=f"unix://{socket_path}")
    try:
        assert daemon.envd_url == f"unix://{socket_path}"
        assert os.stat(socket_path).st_mode & 0o777 == 0o600
        transport = httpx.HTTPTransport(uds=str(socket_path))
        with httpx.Client(transport=transport, base_url="http://envd") as client:
            assert client.get("/health").status_code == 204
            listed = list_processes_with(client, "http://envd")
            assert (listed.status_code, listed.json()) == (200, {"processes": []})
    finally:
        daemon.stop()
