"""Exceptions: one class per JSON-RPC error code the daemon uses, plus the client's own.

Every error the daemon answers with is an :class:`RpcError` (``code``, ``message``, ``data``);
:func:`rpc_error` picks the subclass for its code, so callers can catch e.g. :class:`NotFound`.
"""

from __future__ import annotations

from typing import Any


class ExecServerError(Exception):
    """Base of every exception this package raises."""


class ConnectError(ExecServerError):
    """The daemon could not be reached, or refused the WebSocket upgrade."""


class DisconnectedError(ExecServerError):
    """The connection dropped while a call that is not safe to repeat was in flight: it may or
    may not have taken effect."""

    def __init__(self, method: str) -> None:
        super().__init__(f"the connection dropped before `{method}` was answered")
        self.method = method


class SessionLostError(ExecServerError):
    """The session could not be resumed; nothing more can be done with this client."""


class ProtocolError(ExecServerError):
    """The daemon sent something this client cannot understand."""


class OutputLostError(ExecServerError):
    """Output events ``from_seq..=to_seq`` were evicted on the daemon before this client could
    receive them (the session was detached longer than its retention lasted). Later output still
    follows: iterating again goes on after the gap."""

    def __init__(self, process_id: str, from_seq: int, to_seq: int) -> None:
        super().__init__(f"process {process_id}: events {from_seq}..={to_seq} were lost")
        self.process_id = process_id
        self.from_seq = from_seq
        self.to_seq = to_seq


class RpcError(ExecServerError):
    """The daemon answered with a JSON-RPC error."""

    code: int

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data

    @property
    def retryable(self) -> bool:
        """Whether ``data.retryable`` says the same call may succeed later."""
        return isinstance(self.data, dict) and self.data.get("retryable") is True


class ParseError(RpcError):
    code = -32700


class InvalidRequest(RpcError):
    """Protocol state, unknown process on read, duplicate ids, fs invalid input or permission,
    limits."""

    code = -32600


class MethodNotFound(RpcError):
    code = -32601


class InvalidParams(RpcError):
    """Decode errors, empty argv, sandbox intent that cannot be enforced, bad http/request."""

    code = -32602


class InternalError(RpcError):
    """Spawn failure, I/O failure, http/request transport failure or deadline."""

    code = -32603


class NotFound(RpcError):
    """A file system path (or file handle) that does not exist."""

    code = -32004


class SessionAttached(RpcError):
    """The session is attached to another connection (retryable)."""

    code = -32010


class StartConflict(RpcError):
    """An idempotent ``process/start`` repeated a ``processId`` with other params;
    ``data["fields"]`` names them."""

    code = -32011


class AuditFailed(RpcError):
    """The daemon requires audit records and could not write this action's, so it did not
    perform it."""

    code = -32012


_BY_CODE: dict[int, type[RpcError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        NotFound,
        SessionAttached,
        StartConflict,
        AuditFailed,
    )
}


def rpc_error(error: Any) -> RpcError:
    """The exception for a JSON-RPC error object."""
    if not isinstance(error, dict):
        return RpcError(-32603, f"malformed error object: {error!r}")
    code = error.get("code")
    message = str(error.get("message", ""))
    if not isinstance(code, int):
        return RpcError(-32603, message, error.get("data"))
    cls = _BY_CODE.get(code, RpcError)
    return cls(code, message, error.get("data"))


class ProcessFailed(ExecServerError):
    """``run(check=True)`` saw a non-zero exit, as :class:`subprocess.CalledProcessError`."""

    def __init__(self, result: Any) -> None:
        super().__init__(
            f"command {result.args!r} exited with {result.returncode} ({result.exit.reason})"
        )
        self.result = result
        self.cmd: list[str] = result.args
        self.returncode: int = result.returncode
        self.stdout: bytes = result.stdout
        self.stderr: bytes = result.stderr


class ProcessTimeout(ExecServerError):
    """``run(timeout=…)`` passed and the whole process tree was killed, as
    :class:`subprocess.TimeoutExpired`."""

    def __init__(self, args: list[str], timeout: float, stdout: bytes, stderr: bytes) -> None:
        super().__init__(f"command {args!r} timed out after {timeout} seconds")
        self.cmd = args
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr
