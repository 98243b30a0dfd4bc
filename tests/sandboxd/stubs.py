"""The `process.v1` stubs the stock gRPC toolchain generates from proto/sandboxd (grpcio-tools),
generated at test time; shared by tests/sandboxd and the fleet's gRPC tests in
tests/agent_sandbox."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def generate(out: Path) -> tuple[ModuleType, ModuleType]:
    """``process_pb2`` and ``process_pb2_grpc``, generated into ``out`` (made here)."""
    from grpc_tools import protoc

    out.mkdir()
    proto = REPO / "proto" / "sandboxd"
    include = Path(protoc.__file__).parent / "_proto"
    argv = ["protoc", f"-I{proto}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"]
    assert protoc.main([*argv, str(proto / "process" / "v1" / "process.proto")]) == 0
    sys.path.insert(0, str(out))
    return (
        importlib.import_module("process.v1.process_pb2"),
        importlib.import_module("process.v1.process_pb2_grpc"),
    )
