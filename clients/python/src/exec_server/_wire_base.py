"""The wire types everything else builds on: byte and path encodings, and the sandbox
context (docs/sandbox.md). Part of :mod:`exec_server.wire`, which re-exports them."""

from typing import List, Optional, Union

from typing_extensions import Literal, NotRequired, TypedDict

#: Base64 of raw bytes.
Base64 = str
#: A ``file:`` URI on the daemon's host (``PathUri``).
PathUri = str

# -- sandbox (docs/sandbox.md): inner keys snake_case, as in the reference ----------------------

SpecialKind = Literal["root", "minimal", "project_roots", "tmpdir", "slash_tmp", "unknown"]


class SpecialPath(TypedDict):
    kind: SpecialKind
    subpath: NotRequired[Optional[str]]


class FsPathPath(TypedDict):
    type: Literal["path"]
    path: PathUri


class FsPathGlob(TypedDict):
    type: Literal["glob_pattern"]
    pattern: str


class FsPathSpecial(TypedDict):
    type: Literal["special"]
    value: SpecialPath


FsPath = Union[FsPathPath, FsPathGlob, FsPathSpecial]


FsAccess = Literal["read", "write", "deny"]


class FileSystemEntry(TypedDict):
    path: FsPath
    access: FsAccess
    missing_path_behavior: NotRequired[Optional[Literal["skip", "error"]]]


class FileSystemUnrestricted(TypedDict):
    type: Literal["unrestricted"]


class FileSystemRestricted(TypedDict):
    type: Literal["restricted"]
    entries: List[FileSystemEntry]
    glob_scan_max_depth: NotRequired[Optional[int]]


FileSystemPermissions = Union[FileSystemUnrestricted, FileSystemRestricted]
NetworkAccess = Literal["restricted", "enabled"]


class ProfileDisabled(TypedDict):
    type: Literal["disabled"]


class ProfileExternal(TypedDict):
    type: Literal["external"]
    network: NetworkAccess


class ProfileManaged(TypedDict):
    type: Literal["managed"]
    file_system: FileSystemPermissions
    network: NetworkAccess


PermissionProfile = Union[ProfileDisabled, ProfileExternal, ProfileManaged]


class PolicyContext(TypedDict):
    cwd: NotRequired[Optional[PathUri]]
    workspaceRoots: NotRequired[List[PathUri]]


class FileSystemSandboxContext(TypedDict):
    permissions: PermissionProfile
    cwd: NotRequired[Optional[PathUri]]
    workspaceRoots: NotRequired[List[PathUri]]
    policyContext: NotRequired[Optional[PolicyContext]]
    windowsSandboxLevel: NotRequired[Literal["disabled", "restricted-token", "elevated", "mxc"]]
    windowsSandboxPrivateDesktop: NotRequired[bool]
    useLegacyLandlock: NotRequired[bool]
    userHomeDir: NotRequired[Optional[PathUri]]
    temporaryDirectories: NotRequired[List[PathUri]]
    windowsSandboxProxySettingsMode: NotRequired[Optional[str]]


class ManagedNetwork(TypedDict):
    loopbackPorts: List[int]
    allowLocalBinding: bool
