"""The wire types: every message of the protocol as a ``TypedDict`` with its camelCase (and, in
the permission profile, snake_case) members exactly as the daemon sends and decodes them.

They mirror the Rust types in ``protocol/`` and are checked against the JSON Schema the
``exec-server-protocol`` crate generates from them (tests/test_schema.py runs
``cargo run -p exec-server-protocol --example schema``): a member added, removed, renamed,
retyped or made optional on either side fails that test. ``Optional[X]`` is a member that may
be null; ``NotRequired`` one that may be absent (the Rust side's ``Option`` members decode
absent as null, so they are both, though the daemon sends them). Byte payloads are base64
strings (``Base64``).
"""

from typing import Any, Dict, List, Optional, Union

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


# -- session ------------------------------------------------------------------------------------


class InitializeParams(TypedDict):
    clientName: str
    resumeSessionId: NotRequired[Optional[str]]
    binaryPayloads: NotRequired[bool]
    onDisconnect: NotRequired[Optional[Literal["keep", "kill"]]]
    sessionTtlMs: NotRequired[Optional[int]]


class ShellInfo(TypedDict):
    name: str
    path: str


class EnvironmentCapabilities(TypedDict):
    networkProxyLaunch: NotRequired[bool]
    capabilityDiscoverySandbox: NotRequired[bool]
    environmentConfigRead: NotRequired[bool]
    httpHeaderEnvVars: NotRequired[bool]
    sandboxedFileStreaming: NotRequired[bool]
    shellSnapshotV2: NotRequired[bool]
    processResize: NotRequired[bool]
    processCloseStdin: NotRequired[bool]
    processSignals: NotRequired[bool]
    outputRetentionIndicator: NotRequired[bool]
    fileWriteStreaming: NotRequired[bool]
    fsAtomicWrite: NotRequired[bool]
    fsRename: NotRequired[bool]
    fsReadDirectoryErrors: NotRequired[bool]
    fsWatch: NotRequired[bool]
    linuxSandbox: NotRequired[bool]
    processLimits: NotRequired[bool]
    processTreeLimits: NotRequired[bool]
    processStartIdempotent: NotRequired[bool]
    processList: NotRequired[bool]
    sessionDisconnectPolicy: NotRequired[bool]
    processInputWait: NotRequired[bool]
    # Pending #28, as retainedBytes, unreceivedBytes and paused below.
    retentionPause: NotRequired[bool]


class EnvironmentLimits(TypedDict):
    maxProcesses: int
    maxProcessesPerSession: int


class EnvdInfo(TypedDict):
    listeners: List[str]
    accessToken: bool
    sandbox: NotRequired[Any]


class EnvironmentInfo(TypedDict):
    shell: ShellInfo
    executorVersion: NotRequired[str]
    cwd: NotRequired[Optional[PathUri]]
    userHomeDir: NotRequired[Optional[PathUri]]
    platformOs: NotRequired[Optional[str]]
    temporaryDirectories: NotRequired[Optional[List[PathUri]]]
    tempDir: NotRequired[Optional[PathUri]]
    capabilities: NotRequired[EnvironmentCapabilities]
    limits: NotRequired[Optional[EnvironmentLimits]]
    envd: NotRequired[Optional[EnvdInfo]]


class InitializeResult(TypedDict):
    sessionId: str
    environmentInfo: NotRequired[Optional[EnvironmentInfo]]
    binaryPayloads: NotRequired[bool]


class EnvironmentStatus(TypedDict):
    status: Literal["ready"]


# -- processes ----------------------------------------------------------------------------------

OutputStream = Literal["stdout", "stderr", "pty"]
SandboxType = Literal["none", "macosSeatbelt", "linuxSeccomp", "windowsRestrictedToken"]
ExitReason = Literal[
    "exited",
    "signaled",
    "timeout",
    "memoryLimit",
    "terminated",
    "sessionExpired",
    "shutdown",
    "disconnected",
]


class EnvPolicy(TypedDict):
    inherit: Literal["core", "all", "none"]
    ignoreDefaultExcludes: bool
    exclude: List[str]
    set: Dict[str, str]
    includeOnly: List[str]


class TerminalSize(TypedDict):
    rows: int
    cols: int


class ProcessLimits(TypedDict, total=False):
    timeoutMs: Optional[int]
    maxMemoryBytes: Optional[int]
    maxProcesses: Optional[int]
    maxOpenFiles: Optional[int]
    maxCpuSeconds: Optional[int]


class StartParams(TypedDict):
    processId: str
    argv: List[str]
    cwd: PathUri
    env: Dict[str, str]
    tty: bool
    pipeStdin: NotRequired[bool]
    arg0: NotRequired[Optional[str]]
    envPolicy: NotRequired[Optional[EnvPolicy]]
    size: NotRequired[Optional[TerminalSize]]
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]
    enforceManagedNetwork: NotRequired[bool]
    managedNetwork: NotRequired[Optional[ManagedNetwork]]
    trace: NotRequired[Any]
    limits: NotRequired[Optional[ProcessLimits]]
    idempotent: NotRequired[bool]
    inputWaitMs: NotRequired[Optional[int]]
    # Pending #28 (what a full output retention does): sent only when the caller gives it.
    # tests/test_schema.py lets the schema lack it until then, and checks it once it is there.
    onRetentionFull: NotRequired[Optional[Literal["evict", "pause"]]]


class StartResult(TypedDict):
    processId: str
    sandboxType: SandboxType
    existing: NotRequired[bool]


class ProcessUsage(TypedDict):
    userCpuMs: int
    systemCpuMs: int
    maxRssKib: int
    wallMs: int


class ProcessInfo(TypedDict):
    processId: str
    argv: List[str]
    cwd: PathUri
    pid: int
    tty: bool
    sandboxType: SandboxType
    state: Literal["running", "exited", "closed"]
    exitCode: NotRequired[Optional[int]]
    startedAt: str
    exitedAt: NotRequired[Optional[str]]
    nextSeq: int
    firstRetainedSeq: int
    liveDescendants: NotRequired[Optional[int]]
    limits: NotRequired[Optional[ProcessLimits]]
    usage: NotRequired[Optional[ProcessUsage]]
    retainedBytes: NotRequired[int]
    unreceivedBytes: NotRequired[int]
    paused: NotRequired[bool]


class ListResult(TypedDict):
    processes: List[ProcessInfo]


class ReadParams(TypedDict):
    processId: str
    afterSeq: NotRequired[Optional[int]]
    maxBytes: NotRequired[Optional[int]]
    waitMs: NotRequired[Optional[int]]


class OutputChunk(TypedDict):
    seq: int
    stream: OutputStream
    chunk: Base64


class ReadResult(TypedDict):
    chunks: List[OutputChunk]
    nextSeq: int
    exited: bool
    exitCode: NotRequired[Optional[int]]
    closed: bool
    failure: NotRequired[Optional[str]]
    sandboxDenied: NotRequired[bool]
    firstRetainedSeq: NotRequired[int]
    truncated: NotRequired[bool]
    reason: NotRequired[Optional[ExitReason]]
    signal: NotRequired[Optional[int]]
    usage: NotRequired[Optional[ProcessUsage]]
    cleanupUnconfirmed: NotRequired[bool]
    liveDescendants: NotRequired[Optional[int]]
    waitingForInput: NotRequired[bool]
    retainedBytes: NotRequired[int]
    unreceivedBytes: NotRequired[int]
    paused: NotRequired[bool]


class WriteParams(TypedDict):
    processId: str
    chunk: Base64
    writeId: str


class WriteResult(TypedDict):
    status: Literal["accepted", "unknownProcess", "stdinClosed", "starting"]


class SignalParams(TypedDict):
    processId: str
    signal: Literal["interrupt", "terminate", "kill", "hangup", "quit"]


class ProcessIdParams(TypedDict):
    processId: str


class TerminateResult(TypedDict):
    running: bool


class ResizeParams(TypedDict):
    processId: str
    rows: int
    cols: int


class OutputNotification(TypedDict):
    processId: str
    seq: int
    stream: OutputStream
    chunk: Base64


class ExitedNotification(TypedDict):
    processId: str
    seq: int
    exitCode: int
    sandboxDenied: NotRequired[bool]
    reason: NotRequired[Optional[ExitReason]]
    signal: NotRequired[Optional[int]]
    usage: NotRequired[Optional[ProcessUsage]]
    cleanupUnconfirmed: NotRequired[bool]


class ClosedNotification(TypedDict):
    processId: str
    seq: int


class InputWaitNotification(TypedDict):
    processId: str
    afterSeq: int


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


# -- http ---------------------------------------------------------------------------------------


class HttpRequestHeader(TypedDict):
    name: str
    value: str
    valueEnvVar: NotRequired[Optional[str]]


class HttpHeader(TypedDict):
    name: str
    value: str


class HttpRequestParams(TypedDict):
    method: str
    url: str
    headers: NotRequired[List[HttpRequestHeader]]
    bodyBase64: NotRequired[Optional[Base64]]
    timeoutMs: NotRequired[Optional[int]]
    redirectPolicy: NotRequired[Literal["follow", "stop"]]
    requestId: str
    streamResponse: NotRequired[bool]


class HttpRequestResult(TypedDict):
    status: int
    headers: List[HttpHeader]
    bodyBase64: Base64


class HttpBodyDelta(TypedDict):
    requestId: str
    seq: int
    deltaBase64: Base64
    done: bool
    error: NotRequired[Optional[str]]


# -- capability discovery -----------------------------------------------------------------------


class CapabilityRoot(TypedDict):
    id: str
    path: PathUri
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class DiscoverParams(TypedDict):
    roots: List[CapabilityRoot]


class TextFile(TypedDict):
    path: PathUri
    contents: str


class DiscoveredPlugin(TypedDict):
    manifest: TextFile
    mcpConfig: NotRequired[Optional[TextFile]]
    appsConfig: NotRequired[Optional[TextFile]]


class DiscoveredSkill(TypedDict):
    instructions: TextFile
    metadata: NotRequired[Optional[TextFile]]


class DiscoveredRoot(TypedDict):
    id: str
    path: PathUri
    plugin: NotRequired[Optional[DiscoveredPlugin]]
    skills: List[DiscoveredSkill]
    namespaceManifests: List[TextFile]
    warnings: List[str]
    error: NotRequired[Optional[str]]


class DiscoverResult(TypedDict):
    roots: List[DiscoveredRoot]


# -- the envelope -------------------------------------------------------------------------------

RequestId = Union[int, str]


class ErrorObject(TypedDict):
    code: int
    message: str
    data: NotRequired[Any]


class RequestMessage(TypedDict):
    jsonrpc: NotRequired[Optional[str]]
    id: RequestId
    method: str
    params: NotRequired[Any]


class NotificationMessage(TypedDict):
    jsonrpc: NotRequired[Optional[str]]
    method: str
    params: NotRequired[Any]


class ResponseMessage(TypedDict):
    jsonrpc: NotRequired[Optional[str]]
    id: RequestId
    result: Any


class ErrorMessage(TypedDict):
    jsonrpc: NotRequired[Optional[str]]
    id: NotRequired[Optional[RequestId]]
    error: ErrorObject


Message = Union[RequestMessage, NotificationMessage, ResponseMessage, ErrorMessage]

# -- the method table (protocol/src/methods.rs) --------------------------------------------------

#: Each request method's params and result types, and whether it is safe to repeat after the
#: connection dropped before the reply (``methods::Retry``). ``None`` params: the method takes
#: none.
REQUESTS: Dict[str, Any] = {
    "initialize": (InitializeParams, InitializeResult, False),
    "process/start": (StartParams, StartResult, False),
    "process/read": (ReadParams, ReadResult, True),
    "process/write": (WriteParams, WriteResult, True),
    "process/signal": (SignalParams, EmptyResult, False),
    "process/terminate": (ProcessIdParams, TerminateResult, True),
    "process/resize": (ResizeParams, EmptyResult, True),
    "process/closeStdin": (ProcessIdParams, EmptyResult, True),
    "process/list": (None, ListResult, True),
    "fs/readFile": (ReadFileParams, ReadFileResult, True),
    "fs/writeFile": (WriteFileParams, EmptyResult, True),
    "fs/createDirectory": (CreateDirectoryParams, EmptyResult, False),
    "fs/getMetadata": (GetMetadataParams, Metadata, True),
    "fs/readDirectory": (PathParams, ReadDirectoryResult, True),
    "fs/remove": (RemoveParams, EmptyResult, False),
    "fs/copy": (CopyParams, EmptyResult, False),
    "fs/rename": (RenameParams, EmptyResult, False),
    "fs/canonicalize": (PathParams, CanonicalizeResult, True),
    "fs/walk": (WalkParams, WalkResult, False),
    "fs/open": (OpenParams, HandleResult, False),
    "fs/readBlock": (ReadBlockParams, ReadBlockResult, False),
    "fs/writeBlock": (WriteBlockParams, WriteBlockResult, False),
    "fs/close": (CloseParams, EmptyResult, True),
    "fs/watch": (WatchParams, WatchResult, False),
    "fs/unwatch": (UnwatchParams, EmptyResult, False),
    "environment/info": (None, EnvironmentInfo, True),
    "environment/status": (None, EnvironmentStatus, True),
    "http/request": (HttpRequestParams, HttpRequestResult, False),
    "capabilityRoots/discoverV1": (DiscoverParams, DiscoverResult, True),
}

#: Each notification's params type.
NOTIFICATIONS: Dict[str, Any] = {
    "initialized": None,
    "process/output": OutputNotification,
    "process/exited": ExitedNotification,
    "process/closed": ClosedNotification,
    "process/inputWait": InputWaitNotification,
    "fs/changed": ChangedNotification,
    "http/request/bodyDelta": HttpBodyDelta,
}

#: Whether each request method may be sent again after its connection dropped.
RETRY_SAFE: Dict[str, bool] = {name: entry[2] for name, entry in REQUESTS.items()}
