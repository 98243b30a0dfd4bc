"""The wire types of the ``fs/*`` methods. Part of :mod:`exec_server.wire`, which re-exports
them."""

from typing import List, Optional

from typing_extensions import Literal, NotRequired, TypedDict

from ._wire_base import Base64, FileSystemSandboxContext, PathUri

# -- files --------------------------------------------------------------------------------------


class EmptyResult(TypedDict):
    pass


class ReadFileParams(TypedDict):
    path: PathUri
    followSymlinks: NotRequired[Optional[bool]]
    maxBytes: NotRequired[Optional[int]]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class ReadFileResult(TypedDict):
    dataBase64: Base64


class WriteFileParams(TypedDict):
    path: PathUri
    dataBase64: Base64
    followSymlinks: NotRequired[Optional[bool]]
    atomic: NotRequired[bool]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class CreateDirectoryParams(TypedDict):
    path: PathUri
    recursive: NotRequired[Optional[bool]]
    followSymlinks: NotRequired[Optional[bool]]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class GetMetadataParams(TypedDict):
    path: PathUri
    followSymlinks: NotRequired[Optional[bool]]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class Metadata(TypedDict):
    isDirectory: bool
    isFile: bool
    isSymlink: bool
    size: int
    createdAtMs: int
    modifiedAtMs: int


class PathParams(TypedDict):
    path: PathUri
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class CanonicalizeResult(TypedDict):
    path: PathUri


class DirectoryEntry(TypedDict):
    fileName: str
    isDirectory: bool
    isFile: bool


class DirectoryEntryError(TypedDict):
    fileName: str
    message: str


class ReadDirectoryResult(TypedDict):
    entries: List[DirectoryEntry]
    errors: NotRequired[List[DirectoryEntryError]]


class RemoveParams(TypedDict):
    path: PathUri
    recursive: NotRequired[Optional[bool]]
    force: NotRequired[Optional[bool]]
    followSymlinks: NotRequired[Optional[bool]]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class CopyParams(TypedDict):
    sourcePath: PathUri
    destinationPath: PathUri
    recursive: bool
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class RenameParams(TypedDict):
    sourcePath: PathUri
    destinationPath: PathUri
    overwrite: NotRequired[bool]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class WalkOptions(TypedDict):
    maxDepth: int
    maxDirectories: int
    maxEntries: int
    followDirectorySymlinks: bool
    pruneHiddenDirectories: NotRequired[bool]


class WalkParams(TypedDict):
    path: PathUri
    options: WalkOptions
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class WalkEntry(TypedDict):
    path: PathUri
    kind: Literal["directory", "file"]


class WalkError(TypedDict):
    path: PathUri
    message: str


class WalkResult(TypedDict):
    entries: List[WalkEntry]
    errors: List[WalkError]
    truncated: bool


class OpenParams(TypedDict):
    handleId: NotRequired[Optional[str]]
    path: PathUri
    mode: NotRequired[Optional[Literal["read", "write", "append", "replace", "replaceOnClose"]]]
    followSymlinks: NotRequired[Optional[bool]]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class HandleResult(TypedDict):
    handleId: str


class ReadBlockParams(TypedDict):
    handleId: str
    offset: int
    len: int


class ReadBlockResult(TypedDict):
    chunk: Base64
    eof: bool


class WriteBlockParams(TypedDict):
    handleId: str
    offset: NotRequired[Optional[int]]
    chunk: Base64


class WriteBlockResult(TypedDict):
    nextOffset: int


class CloseParams(TypedDict):
    handleId: str
    discard: NotRequired[bool]


class WatchParams(TypedDict):
    watchId: NotRequired[Optional[str]]
    path: PathUri
    recursive: NotRequired[bool]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class WatchResult(TypedDict):
    watchId: str


class UnwatchParams(TypedDict):
    watchId: str


class Change(TypedDict):
    kind: Literal["create", "modify", "remove", "rename", "other"]
    path: PathUri


class ChangedNotification(TypedDict):
    watchId: str
    changes: List[Change]
    eventsDropped: bool


class WatchMissingParams(TypedDict):
    watchId: int
    missing: List[PathUri]
    present: NotRequired[Optional[PathUri]]


class WatchMissingResult(TypedDict):
    watching: bool


class MissingChangedNotification(TypedDict):
    watchId: int
