//! agent-sandbox's legacy runtime API's flags (`--runtime-*`, read from the reference runtime's
//! own variables) and what they resolve to (`crate::runtime_api`).

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct RuntimeArgs {
    /// The directory agent-sandbox's legacy runtime API (`/execute`, `/upload`, ...) runs
    /// commands in and confines its file routes to (the reference runtime's variable).
    #[arg(long, env = "SANDBOX_BASE_DIR", default_value = "/app")]
    pub runtime_base_dir: PathBuf,

    /// The longest a legacy `/execute` command runs before its tree is killed, in seconds.
    #[arg(long, env = "SANDBOX_EXEC_TIMEOUT_SECONDS", default_value_t = 300.0)]
    pub runtime_exec_timeout_seconds: f64,

    /// The largest legacy `/upload` body; a larger one is refused (413).
    #[arg(long, env = "EXEC_SERVER_RUNTIME_MAX_UPLOAD_BYTES", default_value_t = 1 << 30)]
    pub runtime_max_upload_bytes: u64,

    /// A permission profile (as --envd-sandbox) applied to every legacy `/execute` command and
    /// file route (`/upload`, `/download`, `/list`, `/exists`).
    #[arg(long, env = "EXEC_SERVER_RUNTIME_SANDBOX", value_name = "PROFILE.json")]
    pub runtime_sandbox: Option<PathBuf>,
}

/// agent-sandbox's legacy runtime API.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    pub base_dir: PathBuf,
    pub exec_timeout: Duration,
    pub max_upload_bytes: u64,
    /// The profile file's path and its contents, as `EnvdSettings::sandbox`.
    pub sandbox: Option<(PathBuf, serde_json::Value)>,
}

impl RuntimeArgs {
    pub(super) fn settings(&self) -> anyhow::Result<RuntimeSettings> {
        let seconds = self.runtime_exec_timeout_seconds;
        anyhow::ensure!(
            seconds.is_finite() && seconds > 0.0 && seconds < 1e9,
            "--runtime-exec-timeout-seconds must be a positive number of seconds"
        );
        Ok(RuntimeSettings {
            base_dir: self.runtime_base_dir.clone(),
            exec_timeout: Duration::from_secs_f64(seconds),
            max_upload_bytes: self.runtime_max_upload_bytes,
            sandbox: read_profile(self.runtime_sandbox.as_ref(), "--runtime-sandbox")?,
        })
    }
}

/// A permission profile file (`flag`'s) and its JSON.
pub(super) fn read_profile(
    path: Option<&PathBuf>,
    flag: &str,
) -> anyhow::Result<Option<(PathBuf, serde_json::Value)>> {
    use anyhow::Context as _;
    let Some(path) = path else { return Ok(None) };
    let text =
        std::fs::read(path).with_context(|| format!("cannot read {flag} {}", path.display()))?;
    let profile: serde_json::Value = serde_json::from_slice(&text)
        .with_context(|| format!("{flag} {} is not JSON", path.display()))?;
    Ok(Some((path.clone(), profile)))
}

/// [`read_profile`], checked to be a sandbox profile a listener can apply (at start).
pub(super) fn read_checked_profile(
    path: Option<&PathBuf>,
    flag: &str,
) -> anyhow::Result<Option<(PathBuf, serde_json::Value)>> {
    let Some((path, profile)) = read_profile(path, flag)? else {
        return Ok(None);
    };
    crate::sandbox::profile::check(&profile).map_err(|err| {
        anyhow::anyhow!("{flag} {} is not a sandbox profile: {err}", path.display())
    })?;
    Ok(Some((path, profile)))
}
