//! Shell snapshots (`process/start.shellSnapshot`, capability `shellSnapshotV2`): a login
//! shell's state captured once per scope and restored before each command of the scope, in
//! place of a fresh login shell each time. Held in memory only, per session.
//!
//! - [`script`]: what the capture runs and how a command line restores the state;
//! - [`parse`]: the capture's output made a [`Snapshot`], its exports filtered by `envPolicy`.
//!
//! The capture itself is the caller's (it runs as a process of the daemon's, sandboxed as the
//! command is): [`Cache::restore`] is handed it as a future.

mod parse;
pub(crate) mod script;

pub(crate) use parse::Snapshot;
use script::Shell;

use crate::rpc::RpcError;
use exec_server_protocol::process::{
    EnvPolicy, OnRetentionFull, ProcessLimits, ShellSnapshotRequest, StartParams,
};
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use exec_server_protocol::PathUri;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// Snapshots a session keeps; the least recently used goes first.
const MAX_CACHED: usize = 16;
/// A scope id's length at most, in bytes.
const MAX_SCOPE_BYTES: usize = 256;
/// How long a failed capture is shared by the starts that ask before another is tried.
const RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// Captures tried per snapshot; after that its starts run without one until it is evicted.
const MAX_ATTEMPTS: usize = 3;
/// How long a capture may run; its tree is killed then.
pub(crate) const CAPTURE_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) use parse::MAX_CAPTURE_BYTES;

/// A capture's outcome: the snapshot, or when the next capture may be tried.
type Outcome = Result<Arc<Snapshot>, Instant>;

/// A session's snapshots, each shared by the starts of the same scope, working directory,
/// `envPolicy` and sandbox.
#[derive(Default)]
pub(crate) struct Cache {
    entries: Mutex<VecDeque<Entry>>,
}

struct Entry {
    key: Key,
    attempts: usize,
    outcome: Arc<OnceCell<Outcome>>,
}

#[derive(PartialEq)]
struct Key {
    request: ShellSnapshotRequest,
    cwd: PathUri,
    env_policy: Option<EnvPolicy>,
    sandbox: Option<FileSystemSandboxContext>,
}

/// A command line that runs in a snapshot: the arguments after the shell's path, and the
/// environment that replaces the start's.
#[derive(Debug)]
pub(crate) struct Restore {
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
}

/// What [`Cache::restore`] needs of a start that asks for a snapshot, once it is known to be
/// one; None for a start that runs as it is (no snapshot asked, or not a login shell's command).
pub(crate) struct Eligible<'a> {
    params: &'a StartParams,
    request: &'a ShellSnapshotRequest,
    shell: Shell,
}

impl<'a> Eligible<'a> {
    /// Checks `params.shellSnapshot`: a bad scope or an unknown shell is -32602; a command
    /// that is not `[shell.path, "-lc", command]` simply runs without a snapshot.
    pub(crate) fn check(params: &'a StartParams) -> Result<Option<Self>, RpcError> {
        let Some(request) = &params.shell_snapshot else {
            return Ok(None);
        };
        if request.scope_id.is_empty() || request.scope_id.len() > MAX_SCOPE_BYTES {
            return Err(RpcError::invalid_params(format!(
                "shell snapshot scope must be non-empty and at most {MAX_SCOPE_BYTES} bytes"
            )));
        }
        let argv = &params.argv;
        if argv.len() < 3 || argv[0] != request.shell.path || argv[1] != "-lc" {
            return Ok(None);
        }
        let shell = Shell::named(&request.shell.name).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "shell snapshots are unsupported for shell `{}`",
                request.shell.name
            ))
        })?;
        Ok(Some(Self {
            params,
            request,
            shell,
        }))
    }

    /// The capture's start, named `process_id`: the command's, sandboxed and confined alike,
    /// with the capture script as the login shell's command, no stdin, at most
    /// [`CAPTURE_TIMEOUT`], its output held back rather than lost until it is read.
    pub(crate) fn capture_params(&self, process_id: String) -> StartParams {
        let limits = self.params.limits.clone().unwrap_or_default();
        let timeout_ms = CAPTURE_TIMEOUT.as_millis() as i64;
        StartParams {
            process_id,
            argv: vec![
                self.params.argv[0].clone(),
                self.params.argv[1].clone(),
                script::capture(self.shell),
            ],
            tty: false,
            pipe_stdin: false,
            limits: Some(ProcessLimits {
                timeout_ms: Some(limits.timeout_ms.map_or(timeout_ms, |t| t.min(timeout_ms))),
                ..limits
            }),
            trace: None,
            idempotent: false,
            input_wait_ms: Some(0),
            on_retention_full: Some(OnRetentionFull::Pause),
            shell_snapshot: None,
            ..self.params.clone()
        }
    }
}

impl Cache {
    /// The command line that runs `start`'s command in its scope's snapshot, `env` being the
    /// environment it would have had; None when there is no snapshot to use (the capture
    /// failed, now or lately). Concurrent starts of one snapshot share one `capture`, which
    /// yields the capture's output.
    pub(crate) async fn restore<F>(
        &self,
        start: &Eligible<'_>,
        env: &BTreeMap<String, String>,
        capture: F,
    ) -> Option<Restore>
    where
        F: Future<Output = Result<Vec<u8>, String>>,
    {
        let outcome = self.outcome_cell(start);
        let policy = start.params.env_policy.as_ref();
        let outcome = outcome
            .get_or_init(|| async {
                let snapshot = capture.await.and_then(|output| parse::parse(&output, policy));
                snapshot.map(Arc::new).map_err(|why| {
                    tracing::warn!(scope = %start.request.scope_id, "failed to capture shell snapshot: {why}");
                    Instant::now() + RETRY_BACKOFF
                })
            })
            .await;
        let snapshot = outcome.as_ref().ok()?;
        Some(apply(start, snapshot, env))
    }

    /// The cell of `start`'s snapshot: a new one for a first start, or after a failure whose
    /// backoff is over while attempts remain.
    fn outcome_cell(&self, start: &Eligible<'_>) -> Arc<OnceCell<Outcome>> {
        let key = Key {
            request: start.request.clone(),
            cwd: start.params.cwd.clone(),
            env_policy: start.params.env_policy.clone(),
            sandbox: start.params.sandbox.clone(),
        };
        let mut entries = self.entries.lock().unwrap();
        let found = entries.iter().position(|entry| entry.key == key);
        let mut entry = match found.and_then(|at| entries.remove(at)) {
            Some(entry) => entry,
            None => Entry {
                key,
                attempts: 1,
                outcome: Arc::default(),
            },
        };
        let retry = matches!(entry.outcome.get(), Some(Err(at)) if Instant::now() >= *at);
        if retry && entry.attempts < MAX_ATTEMPTS {
            entry.attempts += 1;
            entry.outcome = Arc::default();
        }
        let outcome = entry.outcome.clone();
        entries.push_back(entry);
        if entries.len() > MAX_CACHED {
            entries.pop_front();
        }
        outcome
    }
}

/// `snapshot` applied to `start`: the snapshot's exports over `env`, the start's own `env`
/// over those, and the state carried to the restore.
fn apply(start: &Eligible<'_>, snapshot: &Snapshot, env: &BTreeMap<String, String>) -> Restore {
    let mut merged = env.clone();
    merged.extend(snapshot.environment.clone());
    merged.extend(start.params.env.clone());
    merged.retain(|name, _| parse::inheritable(name));
    let (args, carriers) = script::restore(start.shell, &snapshot.state, &start.params.argv[2]);
    merged.extend(carriers);
    let mut all = args.to_vec();
    all.extend(start.params.argv[3..].iter().cloned());
    Restore {
        args: all,
        env: merged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn params(scope: &str) -> StartParams {
        serde_json::from_value(serde_json::json!({
            "processId": "p", "argv": ["/bin/bash", "-lc", "true"], "cwd": "file:///",
            "env": {"OWN": "request"}, "tty": false,
            "shellSnapshot": {"scopeId": scope, "shell": {"name": "bash", "path": "/bin/bash"}},
        }))
        .unwrap()
    }

    /// Runs a restore whose capture counts itself in `captures` and yields `output`.
    async fn restore(
        cache: &Cache,
        params: &StartParams,
        captures: &AtomicUsize,
        output: Result<&[u8], &str>,
    ) -> Option<Restore> {
        let start = Eligible::check(params).unwrap().unwrap();
        let env = BTreeMap::from([
            ("OWN".into(), "request".into()),
            ("BASE".into(), "b".into()),
        ]);
        let capture = async {
            captures.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            output.map(<[u8]>::to_vec).map_err(str::to_owned)
        };
        cache.restore(&start, &env, capture).await
    }

    #[tokio::test]
    async fn failures_are_shared_then_retried_a_second_apart_three_times_in_all() {
        let (cache, captures, params) = (Cache::default(), AtomicUsize::new(0), params("s"));
        let failing = Err("exited with 7");
        let (a, b) = tokio::join!(
            restore(&cache, &params, &captures, failing),
            restore(&cache, &params, &captures, failing),
        );
        assert!(a.is_none() && b.is_none());
        assert!(restore(&cache, &params, &captures, failing).await.is_none());
        assert_eq!(captures.load(Ordering::SeqCst), 1, "one capture, shared");
        for expected in [2, 3, 3] {
            tokio::time::sleep(RETRY_BACKOFF + Duration::from_millis(50)).await;
            restore(&cache, &params, &captures, failing).await;
            assert_eq!(captures.load(Ordering::SeqCst), expected);
        }
    }

    #[tokio::test]
    async fn a_snapshot_is_captured_once_and_restored_with_the_start_s_own_env_on_top() {
        let (cache, captures, scope) = (Cache::default(), AtomicUsize::new(0), params("s"));
        let output: &[u8] = b"# Snapshot file\nf() { :; }\n\0OWN=profile\0FROM_PROFILE=1\0";
        for _ in 0..2 {
            let restore = restore(&cache, &scope, &captures, Ok(output))
                .await
                .unwrap();
            assert_eq!(restore.args[0], "-pc");
            assert!(restore.args[1].ends_with("\ntrue"), "{}", restore.args[1]);
            assert_eq!(restore.env["OWN"], "request");
            assert_eq!(restore.env["FROM_PROFILE"], "1");
            assert_eq!(restore.env["BASE"], "b");
            assert_eq!(
                restore.env["__CODEX_SHELL_SNAPSHOT_STATE_0"],
                "# Snapshot file\nf() { :; }\n"
            );
        }
        assert_eq!(captures.load(Ordering::SeqCst), 1);
        restore(&cache, &params("other"), &captures, Ok(output)).await;
        assert_eq!(
            captures.load(Ordering::SeqCst),
            2,
            "another scope, another capture"
        );
    }
}
