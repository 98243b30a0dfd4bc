//! The audit log (`--audit-log PATH`): one JSON line per action a client asks for (process
//! starts, signals, terminations, fs changes, http requests, sessions) and per exit or expiry,
//! each with the time, the session, the peer and the principal. Environment values, tokens, file
//! contents and stdin data are never written: callers pass only what a record may hold.
//!
//! Records go through a bounded queue to one blocking writer thread, which writes each line with
//! a single write(2) on an O_APPEND file, so concurrent records never interleave. An action's
//! record is queued before the action runs; with `--audit-required` the action also waits until
//! its record is written and fails (is not performed) when it cannot be.

use crate::rpc::RpcError;
use exec_server_protocol::http::HttpRequestParams;
use exec_server_protocol::process::StartParams;
use serde_json::{json, Map, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Records queued for the writer; beyond this, actions wait (events are dropped, and said so).
const QUEUE: usize = 1024;

/// Who asked: the connection's peer and how it was authenticated.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    /// `IP:PORT`, or the credentials of a Unix socket peer.
    pub(crate) peer: Arc<str>,
    /// `token` (the bearer token), `peer-uid:N` (a Unix socket peer) or `anonymous`.
    pub(crate) principal: Arc<str>,
}

impl Identity {
    const ANONYMOUS: &str = "anonymous";

    /// A peer not (yet) authenticated.
    pub(crate) fn anonymous(peer: impl Into<Arc<str>>) -> Self {
        Self {
            peer: peer.into(),
            principal: Self::ANONYMOUS.into(),
        }
    }

    /// An anonymous peer that passed the bearer token check; a Unix socket peer stays known by
    /// its uid.
    pub(crate) fn with_token(mut self) -> Self {
        if &*self.principal == Self::ANONYMOUS {
            self.principal = "token".into();
        }
        self
    }

    /// Events nobody asked for at that moment (a session's expiry) name the daemon.
    pub(crate) fn daemon() -> Self {
        Self {
            peer: "".into(),
            principal: "daemon".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AuditError {
    #[error("cannot open the audit log {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the audit log writer: {0}")]
    Thread(std::io::Error),
    #[error("the audit record could not be written ({0}); with --audit-required the action was not performed")]
    Write(std::io::Error),
    #[error(
        "the audit log writer has stopped; with --audit-required the action was not performed"
    )]
    Stopped,
}

impl From<AuditError> for RpcError {
    fn from(err: AuditError) -> Self {
        RpcError::new(
            exec_server_protocol::rpc::code::AUDIT_FAILED,
            err.to_string(),
        )
    }
}

enum Job {
    Record {
        line: Vec<u8>,
        /// Told the write's outcome (required mode); without it a failure is logged.
        written: Option<oneshot::Sender<std::io::Result<()>>>,
    },
    /// Told once every record queued before it is written.
    Flush(oneshot::Sender<()>),
    /// Open the path again (SIGHUP: a log rotated away by renaming).
    Reopen,
}

/// The audit log, or none (every call is then free).
#[derive(Clone, Default)]
pub(crate) struct Audit {
    queue: Option<mpsc::Sender<Job>>,
    required: bool,
}

impl Audit {
    /// Opens (creates 0600, appends to) `path` and starts its writer, which opens the path
    /// again on SIGHUP (for a rotation that renames the log; one that truncates it needs
    /// nothing).
    pub(crate) fn open(path: &Path, required: bool) -> Result<Self, AuditError> {
        let mut file = append_to(path)?;
        let (queue, mut jobs) = mpsc::channel::<Job>(QUEUE);
        let path = path.to_owned();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                while let Some(job) = jobs.blocking_recv() {
                    match job {
                        Job::Record { line, written } => {
                            match (written, write_line(&file, &line)) {
                                (Some(written), outcome) => {
                                    let _ = written.send(outcome);
                                }
                                (None, Err(err)) => {
                                    tracing::warn!("cannot write an audit record: {err}");
                                }
                                (None, Ok(())) => {}
                            }
                        }
                        Job::Flush(done) => {
                            let _ = done.send(());
                        }
                        Job::Reopen => match append_to(&path) {
                            Ok(reopened) => file = reopened,
                            Err(err) => tracing::warn!("{err}; still writing the old file"),
                        },
                    }
                }
            })
            .map_err(AuditError::Thread)?;
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        let reopens = queue.clone();
        tokio::spawn(async move {
            let Ok(mut hangups) = hangups else { return };
            while hangups.recv().await.is_some() {
                if reopens.send(Job::Reopen).await.is_err() {
                    return;
                }
            }
        });
        Ok(Self {
            queue: Some(queue),
            required,
        })
    }

    pub(crate) fn is_on(&self) -> bool {
        self.queue.is_some()
    }

    /// Records `action` before it is performed: with --audit-required, returns once the record
    /// is written, or fails and the action must not be performed. `details` (an object) is
    /// built only when there is a log.
    pub(crate) async fn before(
        &self,
        who: &Identity,
        session: &str,
        action: &str,
        details: impl FnOnce() -> Value,
    ) -> Result<(), AuditError> {
        let Some(queue) = &self.queue else {
            return Ok(());
        };
        let line = record(who, session, action, details());
        if !self.required {
            let _ = queue
                .send(Job::Record {
                    line,
                    written: None,
                })
                .await;
            return Ok(());
        }
        let (written, outcome) = oneshot::channel();
        let job = Job::Record {
            line,
            written: Some(written),
        };
        queue.send(job).await.map_err(|_| AuditError::Stopped)?;
        outcome
            .await
            .map_err(|_| AuditError::Stopped)?
            .map_err(AuditError::Write)
    }

    /// Waits (at most `limit`) until every record queued so far is written: at shutdown, after
    /// the last exits were recorded.
    pub(crate) async fn flush(&self, limit: std::time::Duration) {
        let Some(queue) = &self.queue else {
            return;
        };
        let (done, flushed) = oneshot::channel();
        let flushed = async {
            queue.send(Job::Flush(done)).await.ok()?;
            flushed.await.ok()
        };
        if tokio::time::timeout(limit, flushed).await.is_err() {
            tracing::warn!("the audit log was not written out in time; records may be missing");
        }
    }

    /// Records something that already happened (an exit, an expiry); never waits.
    pub(crate) fn event(
        &self,
        who: &Identity,
        session: &str,
        action: &str,
        details: impl FnOnce() -> Value,
    ) {
        let Some(queue) = &self.queue else {
            return;
        };
        let job = Job::Record {
            line: record(who, session, action, details()),
            written: None,
        };
        if queue.try_send(job).is_err() {
            tracing::warn!(action, "the audit log queue is full; a record was dropped");
        }
    }
}

/// What a `process/start` record holds: no environment, no stdin.
pub(crate) fn process_start(params: &StartParams) -> Value {
    use exec_server_protocol::sandbox::{FileSystemPermissions, PermissionProfile};
    let sandbox = params.sandbox.as_ref().map(|sandbox| {
        let (profile, network, file_system) = match &sandbox.permissions {
            PermissionProfile::Disabled => ("disabled", None, None),
            PermissionProfile::External { network } => ("external", Some(*network), None),
            PermissionProfile::Managed {
                file_system,
                network,
            } => (
                "managed",
                Some(*network),
                Some(match file_system {
                    FileSystemPermissions::Unrestricted => "unrestricted",
                    FileSystemPermissions::Restricted { .. } => "restricted",
                }),
            ),
        };
        json!({
            "profile": profile,
            "network": network,
            "fileSystem": file_system,
            "enforced": sandbox.restricts(),
            "backend": sandbox
                .restricts()
                .then(|| crate::sandbox::facilities::Enforcement::current().backend()),
        })
    });
    json!({
        "processId": params.process_id,
        "argv": params.argv,
        "cwd": params.cwd,
        "tty": params.tty,
        "sandbox": sandbox,
        "enforceManagedNetwork": params.enforce_managed_network,
        "limits": params.limits,
    })
}

/// How logs name a session. Its id lets any connection take the session over, so logs carry only
/// the first 8 hex digits of the id's SHA-256 (`printf %s ID | sha256sum` finds its lines).
pub(crate) fn log_digest(id: &str) -> String {
    id_digest(id)[..8].to_owned()
}

/// The SHA-256 of a session id, in hex: what names it where the id itself must not appear.
pub(crate) fn id_digest(id: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// What an `http/request` record holds: the method and the host, never the path, query,
/// headers or body.
pub(crate) fn http_request(params: &HttpRequestParams) -> Value {
    let host = url::Url::parse(&params.url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned));
    json!({ "method": params.method, "host": host })
}

/// One line: the common fields first, then `details` (an object).
fn record(who: &Identity, session: &str, action: &str, details: Value) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Record<'a> {
        time: String,
        action: &'a str,
        session: String,
        peer: &'a str,
        principal: &'a str,
        #[serde(flatten)]
        details: Map<String, Value>,
    }
    let record = Record {
        time: humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        action,
        session: log_digest(session),
        peer: &who.peer,
        principal: &who.principal,
        details: match details {
            Value::Object(details) => details,
            _ => Map::new(),
        },
    };
    let mut line = serde_json::to_vec(&record).expect("JSON values serialize");
    line.push(b'\n');
    line
}

/// Opens `path` to append to it, creating it 0600. The daemon (often root) appends what it is
/// told to, so the path is held to what the state directory is: no symbolic link (at the start
/// and at every reopen: one swapped in before a SIGHUP would make it append to any file), and a
/// file of the daemon's user that group and others cannot write (one they could would take
/// forged records). A FIFO or device (a log shipper's pipe, `/dev/null`) may also be root's.
fn append_to(path: &Path) -> Result<std::fs::File, AuditError> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let refuse = |source| AuditError::Open {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(refuse)?;
    let meta = file.metadata().map_err(refuse)?;
    let euid = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let unsafe_file = if meta.is_file() {
        (meta.uid() != euid || mode & 0o022 != 0)
            .then(|| format!("owner uid {}, mode {mode:03o}", meta.uid()))
    } else {
        (meta.uid() != euid && meta.uid() != 0).then(|| format!("owner uid {}", meta.uid()))
    };
    match unsafe_file {
        Some(found) => Err(refuse(std::io::Error::other(format!(
            "it must belong to the daemon's uid {euid} and not be writable by group or others              ({found})"
        )))),
        None => Ok(file),
    }
}

/// One write(2) of the whole line: O_APPEND places it at the end atomically, so lines of
/// concurrent writers never interleave; a short write is an error, never retried as a tail.
fn write_line(mut file: &std::fs::File, line: &[u8]) -> std::io::Result<()> {
    let written = file.write(line)?;
    if written == line.len() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("short write: {written} of {} bytes", line.len()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Identity {
        Identity {
            peer: "127.0.0.1:5000".into(),
            principal: "token".into(),
        }
    }

    #[tokio::test]
    async fn records_are_lines_with_the_common_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let audit = Audit::open(&path, true).unwrap();
        let details = || json!({"argv": ["true"]});
        audit
            .before(&who(), "s1", "process/start", details)
            .await
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let record: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(record["action"], "process/start");
        assert_eq!(record["session"], log_digest("s1"));
        assert_eq!(record["principal"], "token");
        assert_eq!(record["argv"][0], "true");
        assert!(record["time"].as_str().unwrap().ends_with('Z'));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_required_record_that_cannot_be_written_fails() {
        let audit = Audit::open(Path::new("/dev/full"), true).unwrap();
        let outcome = audit.before(&who(), "s", "fs/remove", || Value::Null).await;
        assert!(matches!(outcome, Err(AuditError::Write(_))), "{outcome:?}");
        let lenient = Audit::open(Path::new("/dev/full"), false).unwrap();
        let outcome = lenient
            .before(&who(), "s", "fs/remove", || Value::Null)
            .await;
        assert!(outcome.is_ok());
    }
}
