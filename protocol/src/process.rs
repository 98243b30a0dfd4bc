//! `process/*` methods and notifications.

use crate::base64_bytes::Base64Bytes;
use crate::environment::ShellInfo;
use crate::sandbox::{FileSystemSandboxContext, ManagedNetwork};
use crate::PathUri;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OutputStream {
    Stdout,
    Stderr,
    Pty,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EnvInherit {
    Core,
    All,
    None,
}

/// Builds the child environment from the daemon's own, instead of taking `env` alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvPolicy {
    pub inherit: EnvInherit,
    pub ignore_default_excludes: bool,
    pub exclude: Vec<String>,
    pub set: BTreeMap<String, String>,
    pub include_only: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartParams {
    /// Chosen by the client; unique within the session.
    pub process_id: String,
    pub argv: Vec<String>,
    pub cwd: PathUri,
    /// With no `envPolicy`, exactly the child's environment.
    pub env: BTreeMap<String, String>,
    pub tty: bool,
    #[serde(default)]
    pub pipe_stdin: bool,
    /// Overrides argv[0] as the child sees it; the program is still `argv[0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg0: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_policy: Option<EnvPolicy>,
    /// Initial terminal size for `tty: true` (default 24x80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<TerminalSize>,
    /// Permission intent to enforce; null runs unsandboxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
    /// Confine the network to `managedNetwork`'s loopback ports (the client's proxy), whatever
    /// `sandbox` says of the network; requires `managedNetwork`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enforce_managed_network: bool,
    /// The proxy's loopback ports; validated, but acted on only with `enforceManagedNetwork`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_network: Option<ManagedNetwork>,
    /// Launch codex's managed network proxy for this process and confine its network to it
    /// (`networkProxyLaunch`); replaces `managedNetwork`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_proxy: Option<crate::network::NetworkProxyLaunch>,
    /// The client's span context (W3C, e.g. `{traceparent, tracestate?}`), kept opaque: the
    /// daemon records it as the parent of its launch span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<serde_json::Value>,
    /// Resource limits for the process and everything it starts (this daemon's addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ProcessLimits>,
    /// A repeat of this start (same `processId`, same params) returns the first one's result
    /// with `existing: true` and runs nothing; different params are `-32011` (this daemon's
    /// addition, `processStartIdempotent`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    /// How long the process must be quiet, its tree blocked reading its stdin, before
    /// `process/inputWait` is sent (default 2000; 0 turns input waits off for this process)
    /// (this daemon's addition, `processInputWait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_wait_ms: Option<i64>,
    /// What happens when the output not yet received reaches the retention budget
    /// (`--output-retention-bytes`/`-chunks`): `evict` (default) drops the oldest output while
    /// no client is attached; `pause` stops reading the child's output until the client reads
    /// or proves receipt, attached or not (this daemon's addition, `retentionPause`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_retention_full: Option<OnRetentionFull>,
    /// Run `argv` (`[shell.path, "-lc", command]`) in the login shell's state captured once
    /// per scope and restored before the command, instead of a fresh login shell
    /// (`shellSnapshotV2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_snapshot: Option<ShellSnapshotRequest>,
}

/// `process/start.shellSnapshot`: which captured login-shell state a command runs in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShellSnapshotRequest {
    /// The client's scope (e.g. one per thread): starts in one scope share one capture.
    pub scope_id: String,
    /// The shell whose state is captured: `bash`, `zsh` or `sh`, and its path.
    pub shell: ShellInfo,
}

/// `process/start.onRetentionFull`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnRetentionFull {
    /// While detached, the oldest output is evicted (`firstRetainedSeq`, `truncated` say what).
    #[default]
    Evict,
    /// The child is held back (blocks on write) until its output is received: none is lost.
    Pause,
}

/// What a process's output retention holds (this daemon's addition, `retentionPause`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RetentionStatus {
    /// Output bytes retained for `process/read`.
    pub retained_bytes: u64,
    /// Of them, bytes the client has not proved it received (a `process/read` after them, or
    /// the pong to a ping sent after their notifications).
    pub unreceived_bytes: u64,
    /// The daemon stopped reading the process's output until the client receives what is
    /// retained (`onRetentionFull: "pause"`, or an attached client behind).
    pub paused: bool,
}

/// `process/start.limits`. Signed so that a negative value gets a clear error rather than a
/// decoding failure; every present value must be positive.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessLimits {
    /// The whole tree is killed this long after the start (`reason: "timeout"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
    /// Memory of the whole tree; beyond it the kernel kills in the tree (`memoryLimit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<i64>,
    /// Processes (and threads) alive at once in the whole tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<i64>,
    /// RLIMIT_NOFILE of each process in the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_files: Option<i64>,
    /// RLIMIT_CPU of each process in the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_seconds: Option<i64>,
}

/// Why a process ended (this daemon's addition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ExitReason {
    /// It exited by itself.
    Exited,
    /// A signal nobody here sent killed it (see `signal`).
    Signaled,
    /// `limits.timeoutMs` passed.
    Timeout,
    /// `limits.maxMemoryBytes` was reached.
    MemoryLimit,
    /// The client ended it (`process/terminate`, or the `kill` signal).
    Terminated,
    /// Its session expired.
    SessionExpired,
    /// The daemon shut down.
    Shutdown,
    /// Its session's connection dropped and the session was opened with
    /// `onDisconnect: "kill"`.
    Disconnected,
}

/// Resources used by the whole tree of a process (this daemon's addition).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessUsage {
    pub user_cpu_ms: u64,
    pub system_cpu_ms: u64,
    /// The largest resident set of any one process of the tree (of the tree together when a
    /// memory cgroup measured it).
    pub max_rss_kib: u64,
    /// From the start to the exit.
    pub wall_ms: u64,
}

/// How a process ended, on `process/exited` and `process/read` (this daemon's additions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExitDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ExitReason>,
    /// The signal that killed the process, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ProcessUsage>,
    /// The daemon killed the tree but could not confirm within its bound that all of it is
    /// gone (it keeps trying).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cleanup_unconfirmed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SandboxType {
    None,
    MacosSeatbelt,
    LinuxSeccomp,
    WindowsRestrictedToken,
}

/// Which mechanism confines a sandboxed process's file system (this daemon's addition):
/// Landlock, or the mount view alone where Landlock is missing or too old (docs/sandbox.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SandboxBackend {
    Landlock,
    MountView,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResult {
    pub process_id: String,
    pub sandbox_type: SandboxType,
    /// The backend that enforced a sandboxed start; absent when unsandboxed (this daemon's
    /// addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_backend: Option<SandboxBackend>,
    /// An `idempotent` start found the process already started by an identical start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub existing: bool,
}

/// Where a process is in its life, as `process/list` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProcessState {
    Running,
    /// It exited; some of its output may still be coming.
    Exited,
    /// It exited and its output ended.
    Closed,
}

/// One process of the session, on `process/list` (this daemon's addition).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub process_id: String,
    pub argv: Vec<String>,
    pub cwd: PathUri,
    /// The program's pid on the daemon's host.
    pub pid: i32,
    pub tty: bool,
    pub sandbox_type: SandboxType,
    pub state: ProcessState,
    pub exit_code: Option<i32>,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// RFC 3339, UTC; null while running.
    pub exited_at: Option<String>,
    /// What `process/read` would report.
    pub next_seq: u64,
    pub first_retained_seq: u64,
    /// As on `process/read`; absent once the tree is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_descendants: Option<u32>,
    /// The limits it was started with (`process/start.limits`), when it was given any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ProcessLimits>,
    /// What its tree used, once it exited (as in `process/exited`'s details).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ProcessUsage>,
    #[serde(flatten)]
    pub retention: RetentionStatus,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResult {
    /// The calling session's processes, by `processId`.
    pub processes: Vec<ProcessInfo>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadParams {
    pub process_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputChunk {
    pub seq: u64,
    pub stream: OutputStream,
    pub chunk: Base64Bytes,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadResult {
    pub chunks: Vec<OutputChunk>,
    pub next_seq: u64,
    pub exited: bool,
    pub exit_code: Option<i32>,
    pub closed: bool,
    pub failure: Option<String>,
    #[serde(default)]
    pub sandbox_denied: bool,
    /// Seq of the oldest output chunk still retained (`nextSeq` when none is). Output with a
    /// lower seq was evicted; it is never dropped silently.
    #[serde(default)]
    pub first_retained_seq: u64,
    /// True when output chunks after `afterSeq` were evicted before this read, before the
    /// client received them (see `unreceivedBytes`).
    #[serde(default)]
    pub truncated: bool,
    #[serde(flatten)]
    pub details: ExitDetails,
    /// Processes of the tree still running besides the process itself (this daemon's
    /// addition); absent once the tree is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_descendants: Option<u32>,
    /// The process's tree is blocked reading its stdin, and nothing came since (no output, no
    /// input): it waits for input (this daemon's addition, `processInputWait`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_input: bool,
    /// Retention after this read (which counts as receipt of everything up to `afterSeq`).
    #[serde(flatten)]
    pub retention: RetentionStatus,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    pub process_id: String,
    pub chunk: Base64Bytes,
    /// Deduplicates retries: a `writeId` already accepted for this process is not written again.
    pub write_id: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WriteStatus {
    Accepted,
    UnknownProcess,
    StdinClosed,
    Starting,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteResult {
    pub status: WriteStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProcessSignal {
    /// SIGINT
    Interrupt,
    /// SIGTERM
    Terminate,
    /// SIGKILL
    Kill,
    /// SIGHUP
    Hangup,
    /// SIGQUIT
    Quit,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignalParams {
    pub process_id: String,
    pub signal: ProcessSignal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdParams {
    pub process_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminateResult {
    pub running: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalSize {
    pub rows: u16,
    pub cols: u16,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResizeParams {
    pub process_id: String,
    pub rows: u16,
    pub cols: u16,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputNotification {
    pub process_id: String,
    pub seq: u64,
    pub stream: OutputStream,
    pub chunk: Base64Bytes,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExitedNotification {
    pub process_id: String,
    pub seq: u64,
    pub exit_code: i32,
    #[serde(default)]
    pub sandbox_denied: bool,
    #[serde(flatten)]
    pub details: ExitDetails,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClosedNotification {
    pub process_id: String,
    pub seq: u64,
}

/// `process/inputWait`: the process's tree has been blocked reading its stdin, with no output,
/// for its quiet period. Sent once per wait; it takes no seq of its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputWaitNotification {
    pub process_id: String,
    /// The last seq of the process's events before the wait (0 when there was none).
    pub after_seq: u64,
}
