"""process.Process through the SDK's `sandbox.commands`, as envd answers it."""

from __future__ import annotations

import time

import pytest
from conftest import eventually
from e2b import CommandExitException, TimeoutException


def test_run_returns_output_and_exit_code(sandbox):
    result = sandbox.commands.run("echo out; echo err >&2")
    assert (result.stdout, result.stderr, result.exit_code, result.error) == ("out\n", "err\n", 0, None)


def test_a_failed_command_raises_with_envd_words(sandbox):
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.error == "exit status 3"
    assert failed.value.stdout == "partial\n"


def test_envs_and_cwd(sandbox, scratch):
    result = sandbox.commands.run("echo $GREETING; pwd", envs={"GREETING": "hi"}, cwd=str(scratch))
    assert result.stdout == f"hi\n{scratch}\n"


def test_the_environment_is_envd_login_environment(sandbox):
    result = sandbox.commands.run("echo $HOME $USER $LOGNAME; whoami")
    assert result.stdout == "/root root root\nroot\n"


def test_a_missing_cwd_is_invalid_before_anything_runs(sandbox, scratch):
    marker = scratch / "ran"
    with pytest.raises(Exception) as failed:
        sandbox.commands.run(f"touch {marker}", cwd="/no/such/dir")
    assert "does not exist" in str(failed.value)
    assert not marker.exists()


def test_streaming_callbacks_see_output_as_it_comes(sandbox):
    seen: list[tuple[str, float]] = []
    started = time.monotonic()
    sandbox.commands.run(
        "echo one; sleep 0.5; echo two >&2",
        on_stdout=lambda line: seen.append(("out:" + line, time.monotonic() - started)),
        on_stderr=lambda line: seen.append(("err:" + line, time.monotonic() - started)),
    )
    assert [text for text, _ in seen] == ["out:one\n", "err:two\n"]
    assert seen[0][1] < seen[1][1] - 0.3, "the first line came before the command ended"


def test_one_mebibyte_of_stdout(sandbox):
    result = sandbox.commands.run("head -c 1048576 /dev/zero | tr '\\0' a")
    assert len(result.stdout) == 1048576 and set(result.stdout) == {"a"}


def test_a_timeout_ends_the_wait_and_the_command(sandbox):
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 30 # timeout-victim", timeout=1)
    gone = eventually(
        lambda: not any("timeout-victim" in " ".join(p.args) for p in sandbox.commands.list())
    )
    assert gone, "the daemon killed the command at its deadline"


def test_background_stdin_kill_and_list(sandbox, scratch):
    command = f"cat > {scratch}/in"
    handle = sandbox.commands.run(command, background=True, stdin=True)
    listed = {p.pid: p for p in sandbox.commands.list()}
    assert handle.pid in listed
    assert (listed[handle.pid].cmd, listed[handle.pid].args) == ("/bin/bash", ["-l", "-c", command])
    sandbox.commands.send_stdin(handle.pid, "hello\n")
    assert eventually(lambda: (scratch / "in").exists() and (scratch / "in").read_text() == "hello\n")
    assert sandbox.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as killed:
        handle.wait()
    assert killed.value.exit_code == -1
    assert killed.value.error == "signal: killed"
    assert sandbox.commands.kill(handle.pid) is False, "a second kill finds nothing"
    assert handle.pid not in {p.pid for p in sandbox.commands.list()}


def test_close_stdin_ends_a_reader(sandbox):
    handle = sandbox.commands.run("wc -c", background=True, stdin=True)
    sandbox.commands.stream_input(handle.pid, ["abc", b"de"])
    handle.send_stdin("f")
    handle.close_stdin()
    assert handle.wait().stdout.strip() == "6"


def test_connect_by_pid_streams_what_follows(sandbox):
    handle = sandbox.commands.run(
        "read line; echo got $line; sleep 0.2; echo done", background=True, stdin=True
    )
    again = sandbox.commands.connect(handle.pid)
    handle.disconnect()
    sandbox.commands.send_stdin(handle.pid, "x\n")
    result = again.wait()
    assert result.stdout == "got x\ndone\n"
    assert result.exit_code == 0


def test_connect_to_an_unknown_pid_is_not_found(sandbox):
    with pytest.raises(Exception) as failed:
        sandbox.commands.connect(999999).wait()
    assert "not found" in str(failed.value)


def test_a_pty_runs_resizes_and_takes_input(sandbox):
    from e2b import PtySize

    out = bytearray()
    handle = sandbox.pty.create(PtySize(rows=30, cols=100))
    sandbox.pty.resize(handle.pid, PtySize(rows=40, cols=120))
    sandbox.pty.send_stdin(handle.pid, b"stty size; exit\n")
    handle.wait(on_pty=out.extend)
    assert b"40 120" in out


def test_connect_to_a_command_that_just_ended_answers_its_end(sandbox):
    handle = sandbox.commands.run("echo gone; exit 4", background=True)
    with pytest.raises(CommandExitException):
        handle.wait()
    with pytest.raises(CommandExitException) as again:
        sandbox.commands.connect(handle.pid).wait()
    assert (again.value.exit_code, again.value.error) == (4, "exit status 4")
    assert again.value.stdout == "", "Connect replays nothing"
