"""Output larger than the daemon's retention: a stream that follows a command receives all
of it (the command waits for a slow client, as envd's does); once nobody follows, the command
runs on and old output is dropped, as envd drops what no subscriber reads."""

from __future__ import annotations

import time

from conftest import Daemon, eventually


def test_a_followed_stream_loses_nothing_and_an_abandoned_one_holds_nothing_back(workdir, scratch):
    from e2b import Sandbox

    (workdir / "small-retention").mkdir()
    daemon = Daemon(workdir / "small-retention", "--output-retention-bytes", "1048576")
    try:
        sandbox = Sandbox.create(debug=True, sandbox_url=daemon.envd_url)
        received = [0]

        def slow(text: str) -> None:
            received[0] += len(text)
            if received[0] < 2 << 20:
                time.sleep(0.001)

        sandbox.commands.run(
            "head -c 16777216 /dev/zero | tr '\\0' a",
            on_stdout=slow,
            retain_output=False,
        )
        assert received[0] == 16 << 20

        done = scratch / "done"
        handle = sandbox.commands.run(f"head -c 16777216 /dev/zero; touch {done}", background=True)
        handle.disconnect()
        assert eventually(done.exists, timeout=30), "nobody follows: the command is not held back"
    finally:
        daemon.stop()
