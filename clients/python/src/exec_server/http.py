"""``http/request``: the daemon makes the request from its host."""

from __future__ import annotations

import uuid
from base64 import b64decode, b64encode
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    from .client import Client


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[str, str]]
    """In order, with repeats; names in lower case."""
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of ``name``."""
        name = name.lower()
        return next((value for key, value in self.headers if key == name), None)


async def http_request(
    client: Client,
    method: str,
    url: str,
    headers: Sequence[tuple[str, str]] | Mapping[str, str],
    body: bytes | None,
    timeout: float | None,
    follow_redirects: bool,
) -> HttpResponse:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    params: dict[str, object] = {
        "method": method,
        "url": url,
        "headers": [{"name": name, "value": value} for name, value in pairs],
        "requestId": uuid.uuid4().hex,
        "redirectPolicy": "follow" if follow_redirects else "stop",
    }
    if body is not None:
        params["bodyBase64"] = b64encode(body).decode("ascii")
    if timeout is not None:
        params["timeoutMs"] = max(1, round(timeout * 1000))
    result = await client.call("http/request", params)
    return HttpResponse(
        result["status"],
        [(header["name"], header["value"]) for header in result["headers"]],
        b64decode(result["bodyBase64"]),
    )
