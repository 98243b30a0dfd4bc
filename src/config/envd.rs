//! Where and how the envd protocol is served (`--envd-*`), as the flags resolve.

use std::path::PathBuf;

/// Where and how the envd protocol is served (`--envd-*`).
#[derive(Debug, Clone, Default)]
pub struct EnvdSettings {
    pub listen: Vec<EnvdListen>,
    pub access_token: Option<String>,
    /// The profile file's path and its contents (a `FileSystemSandboxContext` as JSON).
    pub sandbox: Option<(PathBuf, serde_json::Value)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvdListen {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for EnvdListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(addr) => write!(f, "{addr}"),
            Self::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

impl EnvdListen {
    pub(super) fn parse(text: &str) -> anyhow::Result<Self> {
        if let Some(path) = text.strip_prefix("unix://") {
            anyhow::ensure!(
                path.starts_with('/') && path.len() > 1,
                "invalid --envd-listen `{text}`; expected `unix:///ABSOLUTE/PATH`"
            );
            return Ok(Self::Unix(path.into()));
        }
        let addr = text.strip_prefix("http://").unwrap_or(text);
        addr.parse().map(Self::Tcp).map_err(|_| {
            anyhow::anyhow!("invalid --envd-listen `{text}`; expected `IP:PORT` or `unix:///PATH`")
        })
    }
}
