//! `environment/info` (what this host looks like, and which optional features the daemon has)
//! and `environment/status` (a liveness probe).

use exec_server_protocol::environment::*;
use exec_server_protocol::PathUri;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The daemon answers, so it is ready: there is nothing it waits for.
pub(crate) fn status() -> EnvironmentStatus {
    EnvironmentStatus {
        status: EnvironmentReadiness::Ready,
    }
}

/// The optional features this daemon really implements. Listed in full, without
/// `..Default::default()`, so adding a bit to the protocol forces a decision here.
pub(crate) fn capabilities() -> EnvironmentCapabilities {
    let sandbox = crate::sandbox::enforceable();
    EnvironmentCapabilities {
        network_proxy_launch: false,
        network_proxy_review_domains: false,
        network_proxy_transparent_tcp: false,
        credential_masking: false,
        credential_masking_custom_providers: false,
        capability_discovery_sandbox: true,
        fs_watch_missing: true,
        capability_discovery_v2: false,
        environment_config_read: false,
        http_header_env_vars: true,
        sandboxed_file_streaming: sandbox,
        shell_snapshot_v2: false,
        windows_mxc: false,
        linux_root_write_preserves_devices: false,
        linux_approved_root_write_preserves_restrictions: false,
        process_resize: true,
        process_close_stdin: true,
        process_signals: true,
        output_retention_indicator: true,
        retention_pause: true,
        file_write_streaming: true,
        fs_atomic_write: true,
        fs_rename: true,
        fs_read_directory_errors: true,
        fs_watch: true,
        linux_sandbox: sandbox,
        process_limits: true,
        process_tree_limits: crate::process::tree_limits_supported(),
        process_start_idempotent: true,
        process_list: true,
        session_disconnect_policy: true,
        process_input_wait: cfg!(target_os = "linux"),
    }
}

/// Which build serves this environment: `sha256:` and the digest of this daemon's own
/// executable. Upstream digests its build commit and target, which this crate does not embed;
/// the executable's bytes identify the build as well (a rebuild or upgrade changes it, a move or
/// another user does not). Read once, at startup ([`warm_provider_id`]); `None` when the
/// executable cannot be read.
static PROVIDER_ID: LazyLock<Option<String>> = LazyLock::new(|| {
    let bytes = std::fs::read("/proc/self/exe").ok()?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("sha256:{hex}"))
});

/// Digests the executable off the serving path, so the first `initialize` does not wait for it.
pub fn warm_provider_id() {
    std::thread::spawn(|| LazyLock::force(&PROVIDER_ID));
}

/// Computed on each call: it is cheap, and reflects the daemon's environment as it is.
pub(crate) fn info(config: &crate::config::Config) -> EnvironmentInfo {
    let cwd = std::env::current_dir().ok();
    let uri = |path: PathBuf| PathUri::from_path(&path).ok();
    EnvironmentInfo {
        shell: detect_shell(std::env::var_os("SHELL"), |path| path.is_file()),
        executor_version: env!("CARGO_PKG_VERSION").to_owned(),
        provider_id: PROVIDER_ID.clone(),
        cwd: cwd.clone().and_then(uri),
        user_home_dir: home_dir().and_then(uri),
        platform_os: Some(std::env::consts::OS.to_owned()),
        // This daemon ships no helper executables (codex lists its bundled `rg`): upstream
        // leaves the field out when it has none.
        prepend_path_dirs: None,
        // Unix has one variable, so there is nothing to de-duplicate (Windows merges TEMP and
        // TMP).
        temporary_directories: Some(
            std::env::var_os("TMPDIR")
                .filter(|value| !value.is_empty())
                .and_then(|value| resolve(PathBuf::from(value), cwd.as_deref()))
                .and_then(uri)
                .into_iter()
                .collect(),
        ),
        temp_dir: resolve(std::env::temp_dir(), cwd.as_deref()).and_then(uri),
        capabilities: capabilities(),
        limits: Some(EnvironmentLimits {
            max_processes: config.max_processes as u64,
            max_processes_per_session: config.max_processes_per_session as u64,
        }),
        envd: (!config.envd.listen.is_empty()).then(|| EnvdInfo {
            listeners: config.envd.listen.iter().map(ToString::to_string).collect(),
            access_token: config.envd.access_token.is_some(),
            sandbox: config
                .envd
                .sandbox
                .as_ref()
                .map(|(_, profile)| profile.clone()),
        }),
    }
}

/// `$SHELL` if it names an existing file, else `/bin/bash`, else `/bin/sh`.
fn detect_shell(shell_var: Option<OsString>, exists: impl Fn(&Path) -> bool) -> ShellInfo {
    let path = shell_var
        .map(PathBuf::from)
        .filter(|path| path.is_absolute() && exists(path))
        .or_else(|| Some(PathBuf::from("/bin/bash")).filter(|path| exists(path)))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    ShellInfo {
        name: path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: path.to_string_lossy().into_owned(),
    }
}

/// `$HOME`, or the passwd entry when it is unset or not absolute.
fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|user| user.dir)
        })
}

/// An absolute, lexically normalized form of `path`, relative ones taken from `cwd`.
fn resolve(path: PathBuf, cwd: Option<&Path>) -> Option<PathBuf> {
    let joined = if path.is_absolute() {
        path
    } else {
        cwd?.join(path)
    };
    Some(crate::path::normalize(&joined))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_prefers_an_existing_shell_var_then_bash_then_sh() {
        let all = |_: &Path| true;
        let shell = detect_shell(Some("/usr/bin/zsh".into()), all);
        assert_eq!(
            (shell.name.as_str(), shell.path.as_str()),
            ("zsh", "/usr/bin/zsh")
        );
        let only_bash = |path: &Path| path == Path::new("/bin/bash");
        assert_eq!(
            detect_shell(Some("/usr/bin/zsh".into()), only_bash).name,
            "bash"
        );
        assert_eq!(detect_shell(None, only_bash).path, "/bin/bash");
        assert_eq!(detect_shell(Some("zsh".into()), all).path, "/bin/bash");
        let none = |_: &Path| false;
        let shell = detect_shell(Some("/usr/bin/zsh".into()), none);
        assert_eq!(
            (shell.name.as_str(), shell.path.as_str()),
            ("sh", "/bin/sh")
        );
    }

    #[test]
    fn local_environment_info_resolves_relative_temporary_directory() {
        let cwd = Path::new("/work/project");
        assert_eq!(
            resolve("tmp/../scratch/./t".into(), Some(cwd)),
            Some(PathBuf::from("/work/project/scratch/t"))
        );
        assert_eq!(
            resolve("/var/tmp".into(), None),
            Some(PathBuf::from("/var/tmp"))
        );
        assert_eq!(resolve("tmp".into(), None), None);
    }
}
