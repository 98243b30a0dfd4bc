"""Paths on the daemon's host travel as ``file:`` URIs (``PathUri``); users write plain paths."""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit


def to_uri(path: str) -> str:
    """An absolute path (or a ``file:`` URI, kept as it is) as the URI the daemon expects."""
    if path.startswith("file:"):
        return path
    posix = PurePosixPath(path)
    if not posix.is_absolute():
        raise ValueError(f"remote paths must be absolute or file: URIs, not {path!r}")
    return posix.as_uri()


def from_uri(uri: str) -> str:
    """The path of a ``file:`` URI the daemon sent."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise ValueError(f"not a file: URI: {uri!r}")
    return unquote(parts.path)
