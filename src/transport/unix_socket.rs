//! The file of a `unix://` listener, and who may connect through it.
//!
//! The daemon creates the socket's directory (0700) when it is missing and never changes the
//! permissions of one that exists. A socket file already at the path is a live daemon when it
//! answers a connect (the daemon refuses to start), a leftover when it refuses (it is
//! replaced); anything else at the path is left alone and the daemon refuses to start. The
//! socket is removed when the daemon stops serving, if it is still the daemon's own. A
//! successor in an upgrade takes over the socket and its file as they are (`super::handover`).
//! A peer is admitted by its credentials: the daemon's own uid or an `--allow-uid`, and never a
//! process inside a sandbox (which runs as the daemon's uid, and may see the path).

use crate::config::Config;
use anyhow::Context as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

pub(super) struct UnixSocket {
    pub listener: tokio::net::UnixListener,
    path: PathBuf,
    /// The socket file's device and inode, so that only the daemon's own is removed.
    identity: (u64, u64),
    allowed_uids: Vec<u32>,
}

impl UnixSocket {
    pub(super) fn bind(path: &Path, config: &Config) -> anyhow::Result<Self> {
        let shown = path.display();
        let dir = path
            .parent()
            .with_context(|| format!("--listen unix://{shown} has no directory"))?;
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create the socket directory {}", dir.display()))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(found) if found.file_type().is_socket() => {
                match std::os::unix::net::UnixStream::connect(path) {
                    Ok(_) => anyhow::bail!(
                        "another daemon is serving on {shown} (it answers a connect); not starting"
                    ),
                    Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                        std::fs::remove_file(path)
                            .with_context(|| format!("cannot remove the stale socket {shown}"))?;
                        tracing::info!("replaced the stale socket {shown} (nothing served it)");
                    }
                    Err(err) => anyhow::bail!("cannot tell whether {shown} is served: {err}"),
                }
            }
            Ok(_) => anyhow::bail!("{shown} exists and is not a socket; not touching it"),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => anyhow::bail!("cannot inspect {shown}: {err}"),
        }
        let listener = std::os::unix::net::UnixListener::bind(path)
            .with_context(|| format!("cannot bind {shown}"))?;
        Self::serve_at(listener, path, config)
    }

    /// The listener a predecessor handed over, bound at `path` (checked by the caller), whose
    /// file must still be there.
    pub(super) fn adopt(
        listener: std::os::unix::net::UnixListener,
        path: &Path,
        config: &Config,
    ) -> anyhow::Result<Self> {
        let found = std::fs::symlink_metadata(path).with_context(|| {
            format!(
                "the socket file {} of the inherited listener",
                path.display()
            )
        })?;
        anyhow::ensure!(
            found.file_type().is_socket(),
            "{} is no longer a socket; not serving an unreachable listener",
            path.display()
        );
        Self::serve_at(listener, path, config)
    }

    fn serve_at(
        listener: std::os::unix::net::UnixListener,
        path: &Path,
        config: &Config,
    ) -> anyhow::Result<Self> {
        // Only the owner can connect unless other uids are allowed; their credentials are
        // checked on every connection either way.
        let mode = if config.allow_uids.is_empty() {
            0o600
        } else {
            0o666
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        let bound = std::fs::metadata(path)?;
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener: tokio::net::UnixListener::from_std(listener)?,
            path: path.to_owned(),
            identity: (bound.dev(), bound.ino()),
            allowed_uids: config.allow_uids.clone(),
        })
    }

    pub(super) fn url(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Who the peer of `stream` is, and its uid, or why it may not connect.
    pub(super) fn admit(
        &self,
        stream: &tokio::net::UnixStream,
    ) -> Result<(crate::audit::Identity, u32), Refused> {
        let credentials = stream.peer_cred().map_err(Refused::Credentials)?;
        let uid = credentials.uid();
        // SAFETY: geteuid takes no arguments and cannot fail.
        let own = unsafe { libc::geteuid() };
        if uid != own && !self.allowed_uids.contains(&uid) {
            return Err(Refused::Uid { uid, own });
        }
        let pid = credentials.pid().ok_or(Refused::UnknownProcess)?;
        if crate::sandbox::peers::runs_in_sandbox(pid) {
            return Err(Refused::Sandboxed { pid });
        }
        let who = crate::audit::Identity {
            peer: format!("unix peer pid {pid} uid {uid}").into(),
            principal: format!("peer-uid:{uid}").into(),
        };
        Ok((who, uid))
    }
}

/// Why a peer may not connect.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("its credentials cannot be read: {0}")]
    Credentials(std::io::Error),
    #[error("uid {uid} is neither the daemon's ({own}) nor an --allow-uid")]
    Uid { uid: u32, own: u32 },
    #[error("the peer's process is not known")]
    UnknownProcess,
    #[error("pid {pid} runs inside a sandbox, or was gone before it could be checked")]
    Sandboxed { pid: i32 },
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|found| (found.dev(), found.ino()) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
