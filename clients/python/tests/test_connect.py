"""Ways in: a token file, extra headers (and no redirect), a Unix socket, TLS with a CA file;
and the synchronous wrapper."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest
from daemon import Daemon

from exec_server import Client, ConnectError, Sandbox, sync

TOKEN = "py-client-test-token"


@pytest.fixture(scope="module")
def token_daemon(workdir: Path) -> Iterator[tuple[Daemon, Path]]:
    token = workdir / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    running = Daemon(
        [
            "--listen",
            "ws://127.0.0.1:0",
            "--connection-token-file",
            str(token),
            "--sandbox-id",
            "sandbox-a",
        ],
        workdir / "token-daemon",
    )
    yield running, token
    running.stop()


def test_token_file(token_daemon: tuple[Daemon, Path], tmp: Path) -> None:
    daemon, token = token_daemon

    async def main() -> None:
        async with await Client.connect(daemon.url, token_file=token) as client:
            assert (await client.run(["echo", "in"])).stdout == b"in\n"
        with pytest.raises(ConnectError, match="401"):
            await Client.connect(daemon.url, token="wrong")
        loose = tmp / "loose"
        loose.write_text(TOKEN)
        loose.chmod(0o644)
        with pytest.raises(ConnectError, match="group or others"):
            await Client.connect(daemon.url, token_file=loose)

    asyncio.run(main())


def test_extra_headers(token_daemon: tuple[Daemon, Path]) -> None:
    """``headers`` go with the upgrade: an ``X-Sandbox-ID`` naming another sandbox is refused
    (421). Names and values HTTP does not allow are refused before connecting."""
    daemon, _ = token_daemon

    async def main() -> None:
        ours = {"X-Sandbox-ID": "sandbox-a"}
        async with await Client.connect(daemon.url, token=TOKEN, headers=ours) as client:
            assert (await client.run(["echo", "in"])).stdout == b"in\n"
        with pytest.raises(ConnectError, match="HTTP 421"):
            await Client.connect(daemon.url, token=TOKEN, headers=[("X-Sandbox-ID", "sandbox-b")])
        with pytest.raises(ValueError, match="header name"):
            await Client.connect(daemon.url, token=TOKEN, headers={"X-Sandbox-ID:": "sandbox-a"})
        smuggled = {"X-Sandbox-ID": "sandbox-a\r\nX-Access-Token: guess"}
        with pytest.raises(ValueError, match="header value"):
            await Client.connect(daemon.url, headers=smuggled)

    asyncio.run(main())


def test_a_redirect_is_not_followed(token_daemon: tuple[Daemon, Path]) -> None:
    """A redirect would carry the token elsewhere: here to the same daemon under another name,
    which would take it (websockets drops Authorization across origins, not X-Access-Token)."""
    daemon, _ = token_daemon
    elsewhere = daemon.url.replace("127.0.0.1", "localhost")
    with socket.create_server(("127.0.0.1", 0)) as server:

        def redirect() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(
                    f"HTTP/1.1 302 Found\r\nLocation: {elsewhere}\r\n"
                    "Content-Length: 0\r\n\r\n".encode()
                )

        redirecting = threading.Thread(target=redirect)
        redirecting.start()
        url = f"ws://127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ConnectError, match="HTTP 302"):
            asyncio.run(Client.connect(url, token=TOKEN))
        redirecting.join()


def test_unix_socket(workdir: Path) -> None:
    socket = workdir / "daemon.sock"
    daemon = Daemon(["--listen", f"unix://{socket}"], workdir / "unix-daemon")
    try:

        async def main() -> None:
            async with await Client.connect(f"unix://{socket}") as client:
                assert (await client.run(["echo", "unix"])).stdout == b"unix\n"
                client.drop_connection()
                assert (await client.run(["echo", "again"])).stdout == b"again\n"

        asyncio.run(main())
    finally:
        daemon.stop()


def test_tls_with_a_ca_file(workdir: Path) -> None:
    directory = workdir / "tls"
    directory.mkdir()
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    daemon = Daemon(
        ["--listen", "wss://127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)],
        directory / "daemon",
    )
    try:

        async def main() -> None:
            async with await Client.connect(daemon.url, ca_file=str(cert)) as client:
                assert (await client.run(["echo", "tls"])).stdout == b"tls\n"
            with pytest.raises(ConnectError):
                await Client.connect(daemon.url)

        asyncio.run(main())
    finally:
        daemon.stop()


def test_the_sync_wrapper(daemon: Daemon, tmp: Path) -> None:
    with sync.Client.connect(daemon.url) as client:
        assert client.session_id
        result = client.run(["sh", "-c", "echo $0; exit 1", "sync"], cwd=str(tmp))
        assert (result.stdout, result.returncode) == (b"sync\n", 1)
        process = client.start(["cat"], stdin=True)
        process.write(b"abc")
        process.close_stdin()
        assert b"".join(chunk.data for chunk in process.output()) == b"abc"
        assert process.wait().exit_code == 0
        client.fs.write(str(tmp / "s.txt"), b"sync")
        assert client.fs.read(str(tmp / "s.txt")) == b"sync"
        assert [entry["fileName"] for entry in client.fs.list(str(tmp))] == ["s.txt"]
        assert client.call("environment/status") == {"status": "ready"}
        if (client.environment_info or {}).get("capabilities", {}).get("linuxSandbox"):
            denied = client.run(["sh", "-c", "echo x > /etc/py-sync"], sandbox=Sandbox.read_only())
            assert denied.returncode != 0
    assert os.path.exists(tmp / "s.txt")
