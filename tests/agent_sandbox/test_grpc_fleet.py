"""sandboxd's gRPC ProcessService across the fleet, driven by the stock grpcio client (stubs
generated from the vendored process.proto) through nginx routing by `x-sandbox-id`, with
`authorization` removed as agent-sandbox's router does: the token travels in
`x-access-token`."""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from conftest import ROOT, SANDBOXES, TOKEN

sys.path.insert(0, str(ROOT / "tests" / "sandboxd"))
from stubs import generate  # noqa: E402


@pytest.fixture(scope="module")
def stubs():
    with tempfile.TemporaryDirectory(prefix="stubs-") as out:
        yield generate(Path(out) / "stubs")


@pytest.fixture()
def service(stubs, router):
    _, rpc = stubs
    with grpc.insecure_channel(router.grpc_target) as channel:
        yield rpc.ProcessServiceStub(channel)


def metadata(sandbox: str, token: str = TOKEN):
    # A wrong bearer beside the right X-Access-Token: the router must drop Authorization.
    return (("x-sandbox-id", sandbox), ("x-access-token", token),
            ("authorization", "Bearer not-forwarded"))


def test_execute_reaches_every_sandbox_at_once(stubs, service):
    pb, _ = stubs

    def execute(index):
        request = pb.ExecuteRequest(config=pb.ProcessConfig(command=["cat", "id"]))
        done = service.Execute(request, metadata=metadata(f"sandbox-{index}"), timeout=60)
        return done.stdout, done.exit_code

    with ThreadPoolExecutor(max_workers=SANDBOXES) as pool:
        answers = list(pool.map(execute, range(SANDBOXES)))
    assert answers == [(f"sandbox-{index}".encode(), 0) for index in range(SANDBOXES)]


def test_start_streams_through_the_router(stubs, service):
    pb, _ = stubs
    config = pb.ProcessConfig(command=["sh", "-c", "cat id; sleep 0.5; echo ' later'"])
    events = list(service.Start(pb.StartRequest(config=config), metadata=metadata("sandbox-5"),
                                timeout=60))
    assert events[0].init.process_id > 0
    output = b"".join(event.stdout for event in events[1:-1])
    assert (output, events[-1].exit.exit_code) == (b"sandbox-5 later\n", 0)


def test_a_wrong_token_is_refused(stubs, service, fleet):
    pb, _ = stubs
    request = pb.ExecuteRequest(config=pb.ProcessConfig(command=["touch", "ran"]))
    with pytest.raises(grpc.RpcError) as refused:
        service.Execute(request, metadata=metadata("sandbox-6", token="wrong"), timeout=60)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not (fleet["sandbox-6"] / "ran").exists()
