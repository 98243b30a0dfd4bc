"""A client for exec-server: run and control processes, files and HTTP requests on the
daemon's host over JSON-RPC on a WebSocket, with sessions that survive dropped connections.

Asyncio first (:class:`Client`); :mod:`exec_server.sync` wraps it for synchronous code.
"""

from .client import Client, start_params
from .errors import (
    AuditFailed,
    ConnectError,
    DisconnectedError,
    ExecServerError,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    OutputLostError,
    ParseError,
    ProcessFailed,
    ProcessTimeout,
    ProtocolError,
    RpcError,
    SessionAttached,
    SessionLostError,
    StartConflict,
)
from .events import Closed, Event, Exited, ExitStatus, Failed, Gap, InputWait, Output
from .fs import Changes, FileSystem, Watch
from .http import HttpResponse
from .paths import from_uri, to_uri
from .process import CompletedProcess, Process
from .sandbox import Sandbox

__all__ = [
    "AuditFailed",
    "Changes",
    "Client",
    "Closed",
    "CompletedProcess",
    "ConnectError",
    "DisconnectedError",
    "Event",
    "ExecServerError",
    "ExitStatus",
    "Exited",
    "Failed",
    "FileSystem",
    "Gap",
    "HttpResponse",
    "InputWait",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "Output",
    "OutputLostError",
    "ParseError",
    "Process",
    "ProcessFailed",
    "ProcessTimeout",
    "ProtocolError",
    "RpcError",
    "Sandbox",
    "SessionAttached",
    "SessionLostError",
    "StartConflict",
    "Watch",
    "from_uri",
    "start_params",
    "to_uri",
]
