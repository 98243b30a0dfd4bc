"""A builder for permission intent: the ``sandbox`` of ``process/start`` and ``fs/*`` calls.

Each method returns a new :class:`Sandbox`; :meth:`Sandbox.to_wire` gives exactly the
``FileSystemSandboxContext`` the daemon decodes (docs/protocol.md, Sandbox; docs/sandbox.md)::

    Sandbox.workspace_write(["/srv/repo"]).network(False).to_wire()
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from .paths import to_uri
from .wire import (
    FileSystemEntry,
    FileSystemSandboxContext,
    FsAccess,
    NetworkAccess,
    PermissionProfile,
    SpecialKind,
)


def _special(kind: SpecialKind, access: FsAccess, *, skip_missing: bool = False) -> FileSystemEntry:
    entry: FileSystemEntry = {
        "path": {"type": "special", "value": {"kind": kind}},
        "access": access,
    }
    if skip_missing:
        entry["missing_path_behavior"] = "skip"
    return entry


def _path(path: str, access: FsAccess) -> FileSystemEntry:
    return {"path": {"type": "path", "path": to_uri(path)}, "access": access}


@dataclass(frozen=True)
class Sandbox:
    """Permission intent. ``entries`` None means the file system is unrestricted."""

    entries: tuple[FileSystemEntry, ...] | None = ()
    network_enabled: bool = False
    workspace_roots: tuple[str, ...] = ()
    cwd_path: str | None = None
    disabled: bool = False

    @staticmethod
    def unsandboxed() -> Sandbox:
        """``{"type": "disabled"}``: run without any sandbox."""
        return Sandbox(entries=None, network_enabled=True, disabled=True)

    @staticmethod
    def read_only() -> Sandbox:
        """Everything readable, nothing writable, no network."""
        return Sandbox(entries=(_special("root", "read"),))

    @staticmethod
    def workspace_write(roots: Sequence[str], *, temporary: bool = True) -> Sandbox:
        """Everything readable; ``roots`` (the first is the policy's cwd) writable, and with
        ``temporary`` the temporary directories too; no network. The daemon keeps ``.git``,
        ``.codex``, ``.agents`` and ``.vscode`` inside the roots read-only."""
        if not roots:
            raise ValueError("workspace_write needs at least one root")
        entries = [_special("root", "read"), _special("project_roots", "write")]
        if temporary:
            entries += [
                _special("tmpdir", "write", skip_missing=True),
                _special("slash_tmp", "write", skip_missing=True),
            ]
        return Sandbox(entries=tuple(entries), workspace_roots=tuple(roots), cwd_path=roots[0])

    def network(self, enabled: bool = True) -> Sandbox:
        """Allow (or forbid) network access."""
        return replace(self, network_enabled=enabled)

    def allow_read(self, path: str) -> Sandbox:
        return self._add(_path(path, "read"))

    def allow_write(self, path: str) -> Sandbox:
        return self._add(_path(path, "write"))

    def deny(self, path: str) -> Sandbox:
        """Neither read nor write ``path``, whatever else grants it."""
        return self._add(_path(path, "deny"))

    def cwd(self, path: str) -> Sandbox:
        """The directory relative entries and ``project_roots`` are anchored to."""
        return replace(self, cwd_path=path)

    def _add(self, entry: FileSystemEntry) -> Sandbox:
        if self.entries is None:
            raise ValueError("an unrestricted file system takes no entries")
        return replace(self, entries=self.entries + (entry,))

    def permissions(self) -> PermissionProfile:
        if self.disabled:
            return {"type": "disabled"}
        network: NetworkAccess = "enabled" if self.network_enabled else "restricted"
        if self.entries is None:
            return {"type": "managed", "network": network, "file_system": {"type": "unrestricted"}}
        return {
            "type": "managed",
            "network": network,
            "file_system": {"type": "restricted", "entries": list(self.entries)},
        }

    def to_wire(self) -> FileSystemSandboxContext:
        wire: FileSystemSandboxContext = {
            "permissions": self.permissions(),
            "windowsSandboxLevel": "disabled",
        }
        if self.cwd_path is not None or self.workspace_roots:
            context: dict[str, object] = {}
            if self.cwd_path is not None:
                context["cwd"] = to_uri(self.cwd_path)
            if self.workspace_roots:
                context["workspaceRoots"] = [to_uri(root) for root in self.workspace_roots]
            wire["policyContext"] = context  # type: ignore[typeddict-item]
        return wire
