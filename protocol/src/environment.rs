//! `environment/info` and `environment/status`: what the executor host looks like and whether
//! it is ready.

use crate::PathUri;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The shell commands should use on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShellInfo {
    /// e.g. `bash`, `zsh`, `sh`.
    pub name: String,
    /// A native path or a bare command name (not a PathUri).
    pub path: String,
}

/// Optional features, one bit each. Clients gate newer methods and fields on these, so a bit is
/// true only when the daemon really implements the feature. Every bit defaults to false, so a
/// peer that does not know a bit reads as not having it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct EnvironmentCapabilities {
    /// `process/start` can launch a child behind a managed network proxy.
    pub network_proxy_launch: bool,
    /// The launched proxy can hold domains for the user's review.
    pub network_proxy_review_domains: bool,
    /// The launched proxy can carry transparent TCP.
    pub network_proxy_transparent_tcp: bool,
    /// Commands see placeholders for provider credentials, which the proxy puts on the wire.
    pub credential_masking: bool,
    /// Credential masking for custom model providers too.
    pub credential_masking_custom_providers: bool,
    /// Sandbox capabilities can be discovered before launching.
    pub capability_discovery_sandbox: bool,
    /// `fs/watchMissing` and `fs/missingChanged`: one watch for paths that do not exist yet.
    pub fs_watch_missing: bool,
    /// The second form of capability discovery.
    pub capability_discovery_v2: bool,
    /// Executor environment configuration can be read remotely.
    pub environment_config_read: bool,
    /// `http/request` headers accept `valueEnvVar` (value read from the executor's environment).
    pub http_header_env_vars: bool,
    /// File streaming honours a sandbox context (here: `fs/open` with a restricting `sandbox`
    /// opens the file inside the sandbox, in every mode).
    pub sandboxed_file_streaming: bool,
    /// Version 2 of shell snapshots.
    pub shell_snapshot_v2: bool,
    /// Windows sandboxing through MXC.
    pub windows_mxc: bool,
    /// A root-level write grant keeps `/dev` as it was.
    pub linux_root_write_preserves_devices: bool,
    /// An approved root-level write grant keeps the profile's other restrictions.
    pub linux_approved_root_write_preserves_restrictions: bool,
    /// `process/resize` changes a tty child's terminal size (this daemon's addition).
    pub process_resize: bool,
    /// `process/closeStdin` closes a piped child's stdin (this daemon's addition).
    pub process_close_stdin: bool,
    /// `process/signal` accepts `terminate`, `kill`, `hangup` and `quit` besides `interrupt`
    /// (this daemon's addition).
    pub process_signals: bool,
    /// `process/read` reports `firstRetainedSeq` and `truncated` (this daemon's addition).
    pub output_retention_indicator: bool,
    /// `process/start.onRetentionFull` (`"pause"` holds the child back rather than drop
    /// output), `retainedBytes`, `unreceivedBytes` and `paused` on `process/list` and
    /// `process/read` (this daemon's addition).
    pub retention_pause: bool,
    /// `fs/open` modes `write`, `append` and `replace`, `fs/writeBlock`, and the commit on
    /// `fs/close` (`discard` to abort) (this daemon's addition).
    pub file_write_streaming: bool,
    /// `fs/writeFile {atomic: true}` (this daemon's addition).
    pub fs_atomic_write: bool,
    /// `fs/rename` (this daemon's addition).
    pub fs_rename: bool,
    /// `fs/readDirectory` reports entries it could not stat in `errors` (this daemon's
    /// addition).
    pub fs_read_directory_errors: bool,
    /// `fs/watch`, `fs/unwatch` and `fs/changed` (this daemon's addition).
    pub fs_watch: bool,
    /// `sandbox` intent on `process/start` and on `fs/*` calls, and `enforceManagedNetwork` on
    /// `process/start`, are enforced by the Linux kernel (namespaces, Landlock, seccomp); false
    /// when this kernel cannot, and such intent is then refused (this daemon's addition).
    pub linux_sandbox: bool,
    /// `process/start.limits` `timeoutMs`, `maxOpenFiles` and `maxCpuSeconds`, and `reason`,
    /// `signal`, `usage` and `liveDescendants` on `process/exited` and `process/read` (this
    /// daemon's addition).
    pub process_limits: bool,
    /// `process/start.limits` `maxMemoryBytes` and `maxProcesses` (per-tree, by cgroup); false
    /// where the daemon has no cgroup controller to enforce them, and they are then refused
    /// (this daemon's addition).
    pub process_tree_limits: bool,
    /// `process/start {idempotent: true}`, `existing` on its result and the `-32011` conflict
    /// (this daemon's addition).
    pub process_start_idempotent: bool,
    /// `process/list` (this daemon's addition).
    pub process_list: bool,
    /// `initialize` `onDisconnect` and `sessionTtlMs` (this daemon's addition).
    pub session_disconnect_policy: bool,
    /// `process/inputWait`, `waitingForInput` on `process/read` and `inputWaitMs` on
    /// `process/start` (this daemon's addition).
    pub process_input_wait: bool,
}

fn legacy_executor_version() -> String {
    "0.0.0".to_owned()
}

/// The `environment/info` result, also carried by `initialize` as `environmentInfo`. Only
/// `shell` is required, so the legacy `{shell}` answer still decodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentInfo {
    pub shell: ShellInfo,
    /// The daemon's crate version.
    #[serde(default = "legacy_executor_version")]
    pub executor_version: String,
    /// Identifies the build serving this environment: `sha256:<hex>`, stable across restarts,
    /// install paths and users; absent from peers that cannot tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The daemon's own working directory; null when it has none.
    #[serde(default)]
    pub cwd: Option<PathUri>,
    /// What `~` expands to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_home_dir: Option<PathUri>,
    /// `std::env::consts::OS`, e.g. `linux`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_os: Option<String>,
    /// Directories of the executor's helper executables, put first on `PATH` for commands;
    /// absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepend_path_dirs: Option<Vec<PathUri>>,
    /// From `TMPDIR` (a relative value resolved against `cwd`), de-duplicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary_directories: Option<Vec<PathUri>>,
    /// The platform's temporary directory (`TMPDIR`, else `/tmp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_dir: Option<PathUri>,
    #[serde(default)]
    pub capabilities: EnvironmentCapabilities,
    /// The daemon's caps that a client may run into (this daemon's addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<EnvironmentLimits>,
    /// The E2B envd listeners (`--envd-listen`), when there are any (this daemon's addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd: Option<EnvdInfo>,
    /// What this host offers the sandbox (this daemon's addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxFacilities>,
}

/// What the host's kernel offers the sandbox, detected at start (this daemon's addition; also
/// in `/readyz`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxFacilities {
    /// The backend sandboxed starts use; null when no restricting intent can be enforced here.
    pub backend: Option<crate::process::SandboxBackend>,
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: i32,
    /// The ABI the sandbox uses (lower when capped).
    pub landlock_abi_used: i32,
    pub user_namespaces: bool,
    pub pid_namespaces: bool,
    pub seccomp: bool,
    /// A cgroup v2 directory the daemon may create groups in.
    pub cgroup_delegation: bool,
}

/// What the daemon serves to E2B's SDKs (this daemon's addition).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvdInfo {
    /// Each listener's address as given: `IP:PORT` or `unix:///PATH`.
    pub listeners: Vec<String>,
    /// Whether every envd request must carry `X-Access-Token`.
    pub access_token: bool,
    /// The permission profile (`--envd-sandbox`) applied to every command the listeners start,
    /// as given; absent: they run unsandboxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_json::Value>,
}

/// Caps of the daemon, as configured (this daemon's addition).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentLimits {
    /// Live processes (started, their tree not yet gone) of all sessions together; a
    /// `process/start` beyond it is refused.
    pub max_processes: u64,
    /// Live processes of one session; a `process/start` beyond it is refused.
    pub max_processes_per_session: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EnvironmentReadiness {
    Ready,
}

/// The `environment/status` result: a liveness probe of an initialized connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentStatus {
    pub status: EnvironmentReadiness,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn environment_info_accepts_legacy_response_without_cwd() {
        let info: EnvironmentInfo =
            serde_json::from_value(json!({"shell": {"name": "bash", "path": "/bin/bash"}}))
                .unwrap();
        assert_eq!(info.executor_version, "0.0.0");
        assert_eq!(info.cwd, None);
        assert_eq!(info.capabilities, EnvironmentCapabilities::default());
    }

    #[test]
    fn environment_capabilities_accept_legacy_response_without_environment_config_read() {
        let capabilities: EnvironmentCapabilities =
            serde_json::from_value(json!({"networkProxyLaunch": true, "futureBit": true})).unwrap();
        assert!(capabilities.network_proxy_launch);
        assert!(!capabilities.environment_config_read);
    }

    #[test]
    fn environment_info_preserves_executor_metadata() {
        // Two macros: one would pass `json!`'s recursion limit.
        let capabilities = json!({
            "networkProxyLaunch": false,
            "capabilityDiscoverySandbox": false,
            "environmentConfigRead": false,
            "httpHeaderEnvVars": true,
            "sandboxedFileStreaming": false,
            "shellSnapshotV2": false,
            "networkProxyReviewDomains": false,
            "networkProxyTransparentTcp": false,
            "credentialMasking": false,
            "credentialMaskingCustomProviders": false,
            "fsWatchMissing": false,
            "capabilityDiscoveryV2": false,
            "windowsMxc": false,
            "linuxRootWritePreservesDevices": false,
            "linuxApprovedRootWritePreservesRestrictions": false,
            "processResize": true,
            "processCloseStdin": true,
            "processSignals": true,
            "outputRetentionIndicator": true,
            "retentionPause": true,
            "fileWriteStreaming": true,
            "fsAtomicWrite": true,
            "fsRename": true,
            "fsReadDirectoryErrors": true,
            "fsWatch": true,
            "linuxSandbox": true,
            "processLimits": true,
            "processTreeLimits": false,
            "processStartIdempotent": true,
            "processList": true,
            "sessionDisconnectPolicy": true,
            "processInputWait": true
        });
        let wire = json!({
            "shell": {"name": "zsh", "path": "/bin/zsh"},
            "executorVersion": "1.2.3",
            "providerId": "sha256:00ff",
            "prependPathDirs": ["file:///opt/tools/bin"],
            "cwd": "file:///work",
            "userHomeDir": "file:///home/remote",
            "platformOs": "linux",
            "temporaryDirectories": ["file:///tmp/a", "file:///var/tmp"],
            "tempDir": "file:///tmp/a",
            "capabilities": capabilities,
            "limits": {"maxProcesses": 1875, "maxProcessesPerSession": 468}
        });
        let info: EnvironmentInfo = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&info).unwrap(), wire);
    }
}
