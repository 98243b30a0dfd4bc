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

# Split for size; ``wire`` is where all of them are found.
from ._wire_base import *  # noqa: F403
from ._wire_fs import *  # noqa: F403

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
    fsWatchMissing: NotRequired[bool]
    capabilityDiscoveryV2: NotRequired[bool]
    credentialMasking: NotRequired[bool]
    credentialMaskingCustomProviders: NotRequired[bool]
    networkProxyReviewDomains: NotRequired[bool]
    networkProxyTransparentTcp: NotRequired[bool]
    linuxApprovedRootWritePreservesRestrictions: NotRequired[bool]
    linuxRootWritePreservesDevices: NotRequired[bool]
    windowsMxc: NotRequired[bool]
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


#: What confines a sandboxed process's file system: Landlock, or the mount view alone.
SandboxBackend = Literal["landlock", "mountView"]


class SandboxFacilities(TypedDict):
    """What the host's kernel offers the sandbox (this daemon's addition; also ``/readyz``)."""

    backend: NotRequired[Optional[SandboxBackend]]
    landlockAbi: int
    landlockAbiUsed: int
    userNamespaces: bool
    pidNamespaces: bool
    seccomp: bool
    cgroupDelegation: bool


class EnvironmentInfo(TypedDict):
    shell: ShellInfo
    executorVersion: NotRequired[str]
    providerId: NotRequired[Optional[str]]
    prependPathDirs: NotRequired[Optional[List[PathUri]]]
    cwd: NotRequired[Optional[PathUri]]
    userHomeDir: NotRequired[Optional[PathUri]]
    platformOs: NotRequired[Optional[str]]
    temporaryDirectories: NotRequired[Optional[List[PathUri]]]
    tempDir: NotRequired[Optional[PathUri]]
    capabilities: NotRequired[EnvironmentCapabilities]
    limits: NotRequired[Optional[EnvironmentLimits]]
    envd: NotRequired[Optional[EnvdInfo]]
    sandbox: NotRequired[Optional[SandboxFacilities]]


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


class ShellSnapshotRequest(TypedDict):
    """``process/start.shellSnapshot`` (capability ``shellSnapshotV2``)."""

    scopeId: str
    shell: ShellInfo


class NetworkProxyConfig(TypedDict):
    """The managed proxy's policy (codex's ``RemoteNetworkProxyConfig``)."""

    enabled: bool
    enableSocks5: NotRequired[bool]
    enableSocks5Udp: NotRequired[bool]
    allowUpstreamProxy: NotRequired[bool]
    dangerouslyAllowAllUnixSockets: NotRequired[bool]
    mode: NotRequired[Literal["full", "limited"]]
    domains: NotRequired[Optional[Dict[str, Literal["none", "allow", "deny"]]]]
    unixSockets: NotRequired[Optional[Dict[str, str]]]
    allowLocalBinding: NotRequired[bool]
    transparentTcp: NotRequired[bool]


class NetworkProxyLaunch(TypedDict):
    """``process/start.networkProxy`` (capability ``networkProxyLaunch``)."""

    proxy: NetworkProxyConfig
    auditMetadata: NotRequired[Any]
    environmentId: NotRequired[Optional[str]]
    executionId: NotRequired[Optional[str]]
    policyDecisionTimeoutMs: NotRequired[Optional[int]]
    policyContext: NotRequired[Any]


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
    networkProxy: NotRequired[Optional[NetworkProxyLaunch]]
    trace: NotRequired[Any]
    limits: NotRequired[Optional[ProcessLimits]]
    idempotent: NotRequired[bool]
    inputWaitMs: NotRequired[Optional[int]]
    # Pending #28 (what a full output retention does): sent only when the caller gives it.
    # tests/test_schema.py lets the schema lack it until then, and checks it once it is there.
    onRetentionFull: NotRequired[Optional[Literal["evict", "pause"]]]
    shellSnapshot: NotRequired[Optional[ShellSnapshotRequest]]


class StartResult(TypedDict):
    processId: str
    sandboxType: SandboxType
    existing: NotRequired[bool]
    sandboxBackend: NotRequired[Optional[SandboxBackend]]


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


class PolicyDecisionNotification(TypedDict):
    """``network/policyDecision``: one decision of a process's managed proxy."""

    processId: str
    timestamp: str
    scope: str
    decision: str
    source: str
    reason: str
    protocol: Literal["http", "https_connect", "socks5_tcp", "socks5_udp"]
    host: str
    port: int
    method: NotRequired[Optional[str]]
    client: NotRequired[Optional[str]]
    policyOverride: bool


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


class DiscoverV2Params(TypedDict):
    cwd: PathUri
    sandbox: NotRequired[Optional[FileSystemSandboxContext]]


class DiscoveryRoot(TypedDict):
    id: str
    path: PathUri


class SkillToolDependency(TypedDict):
    type: str
    value: str
    description: NotRequired[Optional[str]]
    transport: NotRequired[Optional[str]]
    command: NotRequired[Optional[str]]
    url: NotRequired[Optional[str]]
    oauthCallbackPort: NotRequired[Optional[int]]


class SkillDependencies(TypedDict):
    tools: List[SkillToolDependency]


class SkillPolicy(TypedDict):
    allowImplicitInvocation: NotRequired[Optional[bool]]
    products: List[str]


class ExecutorSkill(TypedDict):
    name: str
    description: str
    shortDescription: NotRequired[Optional[str]]
    path: PathUri
    discoveryRoot: NotRequired[Optional[DiscoveryRoot]]
    dependencies: NotRequired[Optional[SkillDependencies]]
    policy: NotRequired[Optional[SkillPolicy]]


class ExecutorPlugin(TypedDict):
    id: str
    displayName: str
    remotePluginId: NotRequired[Optional[str]]
    version: str
    root: PathUri
    files: DiscoveredPlugin
    skills: List[ExecutorSkill]


class DiscoverV2Result(TypedDict):
    plugins: List[ExecutorPlugin]
    skills: List[ExecutorSkill]
    warnings: List[str]


# -- environment config (codex's config layers on the daemon's host) ---------------------------


class EnvironmentConfigReadParams(TypedDict):
    cwd: PathUri
    configPaths: List[List[str]]
    requirementsPaths: List[List[str]]


class EnvironmentConfigLayer(TypedDict):
    source: str
    baseDir: PathUri
    toml: str


class EnvironmentConfigLayerStack(TypedDict):
    layers: List[EnvironmentConfigLayer]
    cloudInsertionIndex: int


class EnvironmentConfigReadResult(TypedDict):
    codexHomeDir: PathUri
    userHomeDir: NotRequired[Optional[PathUri]]
    hostname: NotRequired[Optional[str]]
    config: EnvironmentConfigLayerStack
    requirements: EnvironmentConfigLayerStack


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
    "fs/watchMissing": (WatchMissingParams, WatchMissingResult, False),
    "environment/info": (None, EnvironmentInfo, True),
    "environment/status": (None, EnvironmentStatus, True),
    "environmentConfig/read": (EnvironmentConfigReadParams, EnvironmentConfigReadResult, True),
    "http/request": (HttpRequestParams, HttpRequestResult, False),
    "capabilityRoots/discoverV1": (DiscoverParams, DiscoverResult, True),
    "capabilities/discoverV2": (DiscoverV2Params, DiscoverV2Result, True),
}

#: Each notification's params type.
NOTIFICATIONS: Dict[str, Any] = {
    "initialized": None,
    "process/output": OutputNotification,
    "process/exited": ExitedNotification,
    "process/closed": ClosedNotification,
    "process/inputWait": InputWaitNotification,
    "fs/changed": ChangedNotification,
    "fs/missingChanged": MissingChangedNotification,
    "http/request/bodyDelta": HttpBodyDelta,
    "network/policyDecision": PolicyDecisionNotification,
}

#: Whether each request method may be sent again after its connection dropped.
RETRY_SAFE: Dict[str, bool] = {name: entry[2] for name, entry in REQUESTS.items()}
