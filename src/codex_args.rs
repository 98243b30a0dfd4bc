//! codex's `exec-server` flags, so that a script that starts `codex exec-server` starts this
//! daemon unchanged: its WebSocket authentication (`--ws-auth ...`), `--exit-on-stdin-close`,
//! and its configuration flags (`-c`, `--enable`, `--disable`, `--strict-config`), which name
//! codex's own `config.toml` and features; this daemon has neither, and says so in its log.
//! `--concurrent-requests` is an alias of `--max-requests-in-flight` (config.rs).

use crate::ws_auth::{UpgradeAuth, DEFAULT_MAX_CLOCK_SKEW_SECONDS};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WsAuthMode {
    CapabilityToken,
    SignedBearerToken,
}

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "codex exec-server compatibility")]
pub struct CodexArgs {
    /// Authentication of WebSocket upgrades, as codex's: a capability token (with
    /// --ws-token-file or --ws-token-sha256) or an HS256 JWT signed with a shared secret (with
    /// --ws-shared-secret-file). Refusals are 401 with codex's messages.
    #[arg(long, value_enum, value_name = "MODE")]
    pub ws_auth: Option<WsAuthMode>,

    /// The capability token's file (surrounding white space trimmed).
    #[arg(long, value_name = "PATH")]
    pub ws_token_file: Option<PathBuf>,

    /// The hex SHA-256 of the capability token: the token itself never reaches this host.
    #[arg(long, value_name = "HEX")]
    pub ws_token_sha256: Option<String>,

    /// The shared secret (at least 32 bytes) signed JWT bearer tokens are checked with.
    #[arg(long, value_name = "PATH")]
    pub ws_shared_secret_file: Option<PathBuf>,

    /// The `iss` a signed token must carry.
    #[arg(long, value_name = "ISSUER")]
    pub ws_issuer: Option<String>,

    /// An `aud` a signed token must carry.
    #[arg(long, value_name = "AUDIENCE")]
    pub ws_audience: Option<String>,

    /// Leeway on a signed token's `exp` and `nbf` (default 30).
    #[arg(long, value_name = "SECONDS")]
    pub ws_max_clock_skew_seconds: Option<u64>,

    /// Shut down (as on SIGTERM) when standard input closes: for a parent that owns the
    /// daemon's lifetime through a pipe.
    #[arg(long, env = "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE")]
    pub exit_on_stdin_close: bool,

    /// codex's `config.toml` override (`key=value`): accepted and ignored, this daemon reads no
    /// codex configuration.
    #[arg(short = 'c', long = "config", value_name = "key=value")]
    pub config_overrides: Vec<String>,

    /// A codex feature to enable: accepted and ignored (this daemon has no codex features).
    #[arg(long, value_name = "FEATURE")]
    pub enable: Vec<String>,

    /// A codex feature to disable: accepted and ignored.
    #[arg(long, value_name = "FEATURE")]
    pub disable: Vec<String>,

    /// codex's strictness about its `config.toml`: accepted; there is no such file here.
    #[arg(long)]
    pub strict_config: bool,
}

impl CodexArgs {
    /// The upgrade authentication `--ws-auth` asks for, checked as codex checks it (the same
    /// combinations refused, with its messages).
    pub(crate) fn upgrade_auth(&self) -> anyhow::Result<Option<UpgradeAuth>> {
        let signed_flags = self.ws_shared_secret_file.is_some()
            || self.ws_issuer.is_some()
            || self.ws_audience.is_some()
            || self.ws_max_clock_skew_seconds.is_some();
        let token_flags = self.ws_token_file.is_some() || self.ws_token_sha256.is_some();
        match self.ws_auth {
            None => {
                anyhow::ensure!(
                    !signed_flags && !token_flags,
                    "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`"
                );
                Ok(None)
            }
            Some(WsAuthMode::CapabilityToken) => {
                anyhow::ensure!(
                    !signed_flags,
                    "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`"
                );
                match (&self.ws_token_file, &self.ws_token_sha256) {
                    (Some(_), Some(_)) => anyhow::bail!(
                        "`--ws-token-file` and `--ws-token-sha256` are mutually exclusive"
                    ),
                    (Some(path), None) => Ok(Some(UpgradeAuth::token(&read_secret(path)?))),
                    (None, Some(hex)) => {
                        Ok(Some(UpgradeAuth::token_sha256(hex, "--ws-token-sha256")?))
                    }
                    (None, None) => anyhow::bail!(
                        "`--ws-token-file` or `--ws-token-sha256` is required when `--ws-auth capability-token` is set"
                    ),
                }
            }
            Some(WsAuthMode::SignedBearerToken) => {
                anyhow::ensure!(
                    !token_flags,
                    "`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`"
                );
                let path = self.ws_shared_secret_file.as_ref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set"
                    )
                })?;
                Ok(Some(UpgradeAuth::signed_bearer(
                    &read_secret(path)?,
                    path,
                    self.ws_issuer.clone(),
                    self.ws_audience.clone(),
                    self.ws_max_clock_skew_seconds
                        .unwrap_or(DEFAULT_MAX_CLOCK_SKEW_SECONDS),
                )?))
            }
        }
    }

    /// One log line per codex configuration flag given, saying what it does here: nothing,
    /// since codex's `config.toml` and features do not exist in this daemon.
    pub fn log_ignored(&self) {
        for pair in &self.config_overrides {
            tracing::info!(
                "-c {pair}: ignored, a codex config.toml override; this daemon reads no codex \
                 configuration (its settings are its own flags, see --help)"
            );
        }
        for (flag, features) in [("--enable", &self.enable), ("--disable", &self.disable)] {
            for feature in features {
                tracing::info!(
                    "{flag} {feature}: ignored, a codex feature flag; this daemon has no codex \
                     features"
                );
            }
        }
        if self.strict_config {
            tracing::info!(
                "--strict-config: nothing to check, this daemon reads no codex config.toml"
            );
        }
    }
}

/// A secret from `path`, surrounding white space trimmed, as codex reads it. Unlike
/// `--connection-token-file`, a file open to group or others is only warned about: codex takes
/// it, and scripts written for codex must start this daemon too.
fn read_secret(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|err| anyhow::anyhow!("failed to read websocket auth secret {shown}: {err}"))?;
    let secret = text.trim();
    anyhow::ensure!(
        !secret.is_empty(),
        "websocket auth secret {shown} must not be empty"
    );
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "websocket auth secret {shown} is readable by group or others; run `chmod 600 \
                 {shown}`"
            );
        }
    }
    Ok(secret.to_owned())
}
