"""The stock grpcio client, with stubs generated from agent-sandbox's process.proto, drives
the daemon's sandboxd ProcessService: commands, streams, stdin, signals; and what it refuses."""

from __future__ import annotations

import grpc
import pytest
from conftest import AUTH


def test_execute_returns_output_and_exit_code(stubs, channel) -> None:
    pb, rpc = stubs
    service = rpc.ProcessServiceStub(channel)
    config = pb.ProcessConfig(command=["sh", "-c", "echo out; echo err >&2; exit 7"])
    done = service.Execute(pb.ExecuteRequest(config=config), metadata=AUTH, timeout=30)
    assert (done.exit_code, done.stdout, done.stderr) == (7, b"out\n", b"err\n")


def test_start_streams_output_takes_stdin_and_a_signal(stubs, channel) -> None:
    pb, rpc = stubs
    service = rpc.ProcessServiceStub(channel)
    cat = service.Start(
        pb.StartRequest(config=pb.ProcessConfig(command=["cat"])), metadata=AUTH, timeout=30
    )
    init = next(cat)
    pid = init.init.process_id
    assert pid > 0
    service.WriteStdin(pb.WriteStdinRequest(process_id=pid, input=b"ping"), metadata=AUTH)
    assert next(cat).stdout == b"ping"
    service.WriteStdin(pb.WriteStdinRequest(process_id=pid, eof={}), metadata=AUTH)
    assert next(cat).exit.exit_code == 0

    sleeper = service.Start(
        pb.StartRequest(config=pb.ProcessConfig(command=["sleep", "30"])), metadata=AUTH, timeout=30
    )
    pid = next(sleeper).init.process_id
    service.SendSignal(
        pb.SendSignalRequest(process_id=pid, signal=pb.SIGNAL_SIGKILL), metadata=AUTH
    )
    assert next(sleeper).exit.exit_code == 128 + 9


def test_refusals_are_grpc_statuses(stubs, channel) -> None:
    pb, rpc = stubs
    service = rpc.ProcessServiceStub(channel)
    request = pb.ExecuteRequest(config=pb.ProcessConfig(command=["true"]))
    with pytest.raises(grpc.RpcError) as refused:
        service.Execute(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as refused:
        service.Execute(pb.ExecuteRequest(), metadata=AUTH, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as refused:
        service.SendSignal(
            pb.SendSignalRequest(process_id=2**31 - 1, signal=pb.SIGNAL_SIGTERM), metadata=AUTH
        )
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    # Bytes that are no ExecuteRequest, sent as one.
    garbage = channel.unary_unary(
        "/process.v1.ProcessService/Execute",
        request_serializer=lambda raw: raw,
        response_deserializer=lambda raw: raw,
    )
    with pytest.raises(grpc.RpcError) as refused:
        garbage(b"\x0a\xff\x01\x01", metadata=AUTH, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    assert "decode" in refused.value.details()
