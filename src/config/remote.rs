//! Remote mode's flags (codex's own, plus `--remote-token-file`) and what they resolve to: the
//! daemon registers with an environment registry, dials the WebSocket it is given and serves
//! JSON-RPC over it (`transport::remote`).

use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// Remote mode: register with the environment registry at this base URL (https; http only
    /// to loopback), dial the WebSocket URL it returns and serve JSON-RPC over that outbound
    /// socket, the registry's side acting as the client. Alone, the daemon listens nowhere;
    /// with an explicit --listen it serves both.
    #[arg(
        long,
        env = "EXEC_SERVER_REMOTE",
        value_name = "URL",
        requires = "environment_id"
    )]
    pub remote: Option<String>,

    /// The environment to register as (one segment of the registry's path).
    #[arg(
        long,
        env = "EXEC_SERVER_ENVIRONMENT_ID",
        value_name = "ID",
        requires = "remote"
    )]
    pub environment_id: Option<String>,

    /// A name for this executor; as in codex, only logged (no registry request carries it).
    #[arg(long, env = "EXEC_SERVER_NAME", default_value = "exec-server")]
    pub name: String,

    /// How the socket is secured: `direct` (plain JSON-RPC over the dialed WebSocket, TLS for
    /// any non-loopback host) is supported; codex's default `noise` (an encrypted relay) is not.
    #[arg(
        long,
        env = "EXEC_SERVER_REMOTE_TRANSPORT",
        value_enum,
        default_value = "noise"
    )]
    pub remote_transport: RemoteTransport,

    /// Sign the registration and the WebSocket handshake with AWS SigV4, credentials and region
    /// from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    /// AWS_REGION) or the shared config and credentials files (AWS_PROFILE, --aws-profile).
    #[arg(long, env = "EXEC_SERVER_AWS_SIGV4", requires = "remote")]
    pub aws_sigv4: bool,

    /// The profile of the AWS config and credentials files (default: AWS_PROFILE, `default`).
    #[arg(long, value_name = "PROFILE", requires = "aws_sigv4")]
    pub aws_profile: Option<String>,

    /// The region signed for (default: AWS_REGION, then the profile's).
    #[arg(long, value_name = "REGION", requires = "aws_sigv4")]
    pub aws_region: Option<String>,

    /// The service signed for.
    #[arg(long, value_name = "SERVICE", default_value = "execute-api")]
    pub aws_service: String,

    /// Beyond codex, for registries without AWS: send `Authorization: Bearer <token>` on the
    /// registration and the WebSocket handshake instead of SigV4, the token read once from this
    /// file (chmod 600; trailing line breaks ignored).
    #[arg(
        long,
        env = "EXEC_SERVER_REMOTE_TOKEN_FILE",
        value_name = "FILE",
        requires = "remote",
        conflicts_with = "aws_sigv4"
    )]
    pub remote_token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RemoteTransport {
    Noise,
    Direct,
}

/// Remote mode, resolved from [`RemoteArgs`].
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The registry's base URL, without a trailing `/`.
    pub(crate) registry: url::Url,
    pub(crate) environment_id: String,
    pub(crate) name: String,
    pub(crate) auth: RemoteAuth,
}

/// How the registration and the handshake are authenticated.
#[derive(Clone)]
pub(crate) enum RemoteAuth {
    SigV4 {
        profile: Option<String>,
        region: Option<String>,
        service: String,
    },
    Bearer(String),
}

impl std::fmt::Debug for RemoteAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SigV4 { .. } => f.write_str("SigV4"),
            // Never the token itself: configs are logged.
            Self::Bearer(_) => f.write_str("Bearer"),
        }
    }
}

impl RemoteArgs {
    /// Remote mode's settings, if `--remote` is given.
    pub fn config(&self) -> anyhow::Result<Option<RemoteConfig>> {
        let Some(remote) = &self.remote else {
            return Ok(None);
        };
        anyhow::ensure!(
            self.remote_transport == RemoteTransport::Direct,
            "--remote-transport noise (codex's default, an encrypted relay) is not supported; \
             use --remote-transport direct with --aws-sigv4 or --remote-token-file"
        );
        let auth = match (&self.remote_token_file, self.aws_sigv4) {
            (Some(path), _) => {
                let token = super::read_token_file(path, "--remote-token-file")?;
                anyhow::ensure!(
                    !token.is_empty()
                        && axum::http::HeaderValue::from_str(&format!("Bearer {token}")).is_ok(),
                    "the remote token must be a non-empty, valid HTTP header value"
                );
                RemoteAuth::Bearer(token)
            }
            (None, true) => RemoteAuth::SigV4 {
                profile: self.aws_profile.clone(),
                region: self.aws_region.clone(),
                service: self.aws_service.clone(),
            },
            (None, false) => anyhow::bail!(
                "--remote-transport direct requires --aws-sigv4 or --remote-token-file"
            ),
        };
        let registry = url::Url::parse(remote.trim_end_matches('/'))
            .map_err(|err| anyhow::anyhow!("invalid --remote URL `{remote}`: {err}"))?;
        require_secure(&registry, "https")?;
        Ok(Some(RemoteConfig {
            registry,
            environment_id: self.environment_id.clone().unwrap_or_default(),
            name: self.name.clone(),
            auth,
        }))
    }
}

/// Refuses `url` unless its scheme is `secure` (`https`, `wss`), or its insecure twin towards
/// loopback: codex's policy, with codex's words.
pub(crate) fn require_secure(url: &url::Url, secure: &str) -> anyhow::Result<()> {
    let insecure = &secure[..secure.len() - 1];
    let loopback = match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        scheme if scheme == secure => Ok(()),
        scheme if scheme == insecure && loopback => Ok(()),
        _ => anyhow::bail!("remote transport requires {secure} for non-loopback endpoints"),
    }
}

#[cfg(test)]
mod tests {
    use super::require_secure;

    #[test]
    fn plain_schemes_are_for_loopback_only() {
        let check = |url: &str, secure| require_secure(&url::Url::parse(url).unwrap(), secure);
        for url in [
            "https://registry.example.com",
            "http://127.0.0.1:8080",
            "http://127.3.4.5",
            "http://localhost:1",
            "http://[::1]:1",
        ] {
            assert!(check(url, "https").is_ok(), "{url}");
        }
        for url in ["wss://rendezvous.example.com/x?a=b", "ws://127.0.0.1:9/x"] {
            assert!(check(url, "wss").is_ok(), "{url}");
        }
        for (url, secure) in [
            ("http://10.0.0.1", "https"),
            ("http://localhost.example.com", "https"),
            ("ws://192.168.1.1/x", "wss"),
            // A registry's URL is never dialed as a WebSocket, even on loopback (as codex).
            ("http://127.0.0.1:9/x", "wss"),
            ("https://127.0.0.1:9/x", "wss"),
        ] {
            let err = check(url, secure).unwrap_err().to_string();
            assert_eq!(
                err,
                format!("remote transport requires {secure} for non-loopback endpoints"),
                "{url}"
            );
        }
    }
}
