"""The exec-server Python client (clients/python) through the router, as
tests/it/agent_sandbox_fleet.rs does with the Rust client: nginx drops Authorization, so the
token reaches the daemon only as X-Access-Token; X-Sandbox-ID routes the first upgrade and
every reconnect."""

import pytest
from exec_server import ConnectError, sync

from conftest import TOKEN


def connect(router, sandbox, token=TOKEN):
    url = router.url.replace("http://", "ws://", 1) + "/"
    return sync.Client.connect(url, token=token, headers={"X-Sandbox-ID": sandbox})


def test_a_session_outlives_a_router_restart(router):
    with connect(router, "sandbox-3") as client:
        # The default cwd is the daemon's, its sandbox's base dir (conftest).
        process = client.start(["sh", "-c", "cat id; sleep 2; echo ' after'"])
        output = process.output()
        first = next(output).data
        # Mid-process: the connection dies with nginx, and the client resumes through the new
        # one while the command sleeps.
        router.restart()
        rest = b"".join(chunk.data for chunk in output)
        status = process.wait()
        assert client.aio.recoveries == 1
    assert (first + rest, status.exit_code) == (b"sandbox-3 after\n", 0)


def test_a_wrong_token_is_refused(router):
    connect(router, "sandbox-5").close()
    with pytest.raises(ConnectError, match="HTTP 401"):
        connect(router, "sandbox-5", token="wrong")
