"""A fleet in miniature for the stock k8s-agent-sandbox SDK and the exec-server Python client
(issue #45): 50 daemons, each on its own loopback address and port 8888 as a pod would be,
behind nginx configured as agent-sandbox's router contract says (route by X-Sandbox-ID, HTTP/1.1
upstream, Authorization removed, WebSocket upgrades passed with no timeout). The daemon is
target/release/exec-server (.ci/run builds it), or $EXEC_SERVER_BIN."""

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SANDBOXES = 50
TOKEN = "s3cret"


def address(index: int) -> str:
    # 127.0.46.x: apart from the Rust fleet test's 127.0.45.x, so both can run at once.
    return f"127.0.46.{10 + index}:8888"


def grpc_address(index: int) -> str:
    """Where sandbox `index` serves sandboxd's gRPC ProcessService (9090, the SDK's default)."""
    return f"127.0.46.{10 + index}:9090"


def binary() -> str:
    path = os.environ.get("EXEC_SERVER_BIN") or str(ROOT / "target/release/exec-server")
    assert os.access(path, os.X_OK), f"{path}: build it first (cargo build --release)"
    return path


def wait_listening(host: str, port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {host}:{port}"
            time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def fleet():
    """The sandboxes' base dirs, by name; each holds `id`, its own name."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="fleet-"))
    daemons, bases = [], {}
    try:
        for index in range(SANDBOXES):
            name = f"sandbox-{index}"
            base = work / name
            base.mkdir()
            (base / "id").write_text(name)
            env = dict(os.environ, EXEC_SERVER_SANDBOX_ID=name, EXEC_SERVER_STATE_DIR="none",
                       EXEC_SERVER_LOG="error")
            # Run in the base dir: a WebSocket client's default cwd is the daemon's, so `cat id`
            # there tells which sandbox a routed connection reached.
            daemon = subprocess.Popen(
                [binary(), "--listen", f"ws://{address(index)}", "--connection-token", TOKEN,
                 "--runtime-base-dir", str(base), "--sandboxd-root", str(base),
                 "--sandboxd-grpc-listen", grpc_address(index)],
                stdout=subprocess.PIPE, env=env, cwd=base)
            daemons.append(daemon)
            assert daemon.stdout.readline().startswith(b"ws://")
            host, port = grpc_address(index).rsplit(":", 1)
            wait_listening(host, int(port))
            bases[name] = base
        yield bases
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            daemon.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


class Router:
    """nginx as the router, on `port`; `restart` keeps the port (and so `url`)."""

    def __init__(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="router-"))
        self.port, self.grpc_port = free_port(), free_port()
        routes = "".join(f"    sandbox-{i} {address(i)};\n" for i in range(SANDBOXES))
        grpc_routes = "".join(f"    sandbox-{i} {grpc_address(i)};\n" for i in range(SANDBOXES))
        root = self.dir
        (root / "nginx.conf").write_text(f"""
daemon off; master_process off; pid {root}/nginx.pid; error_log {root}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off; client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fastcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}
  map $http_x_sandbox_id $sandbox {{
{routes}    default 127.0.46.1:9;
  }}
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      proxy_pass http://$sandbox;
      proxy_http_version 1.1;
      proxy_set_header Authorization "";
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_read_timeout 1d; proxy_send_timeout 1d;
      proxy_buffering off; proxy_request_buffering off; client_max_body_size 0;
    }}
  }}
  # sandboxd's gRPC side, which agent-sandbox's HTTP/1.1 router does not carry: the same
  # contract (route by X-Sandbox-ID, Authorization removed) over HTTP/2.
  map $http_x_sandbox_id $sandbox_grpc {{
{grpc_routes}    default 127.0.46.1:9;
  }}
  server {{
    listen 127.0.0.1:{self.grpc_port} http2;
    location / {{
      grpc_pass grpc://$sandbox_grpc;
      grpc_set_header Authorization "";
      grpc_read_timeout 1d; grpc_send_timeout 1d; client_max_body_size 0;
    }}
  }}
}}
""")
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self._spawn()

    def _spawn(self) -> None:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        root = self.dir
        self.process = subprocess.Popen(
            [nginx, "-p", str(root), "-e", f"{root}/error.log", "-c", str(root / "nginx.conf")],
            stdin=subprocess.DEVNULL)
        wait_listening("127.0.0.1", self.port)
        wait_listening("127.0.0.1", self.grpc_port)

    def restart(self) -> None:
        """Stops nginx, every proxied connection with it, and starts it again."""
        self.process.kill()
        self.process.wait()
        self._spawn()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def router(fleet):
    router = Router()
    yield router
    router.stop()
