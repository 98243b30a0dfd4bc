//! All sessions of the daemon, with attach, detach, resume and time-to-live expiry.

use super::{Attachment, Policy, RequestedPolicy, Session, SessionError};
use crate::config::Config;
use crate::state_dir::Dir;
use exec_server_protocol::environment::EnvironmentInfo;
use exec_server_protocol::process::ExitReason;
use exec_server_protocol::session::DisconnectPolicy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long shutdown and expiry wait for killed trees to be confirmed gone (the supervisors'
/// own bound is shorter, so they answer within it).
const REAP_GRACE: Duration = Duration::from_secs(3);
/// How long shutdown then waits for the last events to reach the clients still attached.
const FLUSH_GRACE: Duration = Duration::from_secs(1);

pub(crate) struct Registry {
    sessions: Mutex<HashMap<String, Entry>>,
    /// Set by shutdown: no session is created or resumed after it.
    closing: std::sync::atomic::AtomicBool,
    /// Set when the daemon hands over to a successor: a connection's end leaves its session
    /// as it is.
    handing_over: std::sync::atomic::AtomicBool,
    config: Arc<Config>,
    audit: crate::audit::Audit,
    /// Where sessions and processes are kept across a restart (`--state-dir`; None: they
    /// are not); locked while this lives.
    state: Option<crate::state_dir::StateDir>,
    /// Process directories made ahead, in the state directory.
    spares: Option<Arc<crate::process::store::Spares>>,
    /// What a new session reports as its executor (`environment/info`, a feature above this
    /// layer, given by the daemon).
    describe: fn(&Config) -> EnvironmentInfo,
}

/// A kept session, `sessions/DIGEST.json` in the state directory (see [`kept_name`]).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptSession {
    id: String,
    on_disconnect: DisconnectPolicy,
    ttl_ms: u64,
}

struct Entry {
    session: Arc<Session>,
    /// When the session lost its connection; None while attached.
    detached_at: Option<Instant>,
    /// Counts detaches, so a stale expiry timer recognises that the session was resumed since.
    detach_epoch: u64,
}

impl Registry {
    /// The registry; with `state`, the state directory whose `sessions` and `processes`
    /// directories it keeps.
    pub(crate) fn new(
        config: Arc<Config>,
        audit: crate::audit::Audit,
        state: Option<crate::state_dir::StateDir>,
        describe: fn(&Config) -> EnvironmentInfo,
    ) -> Arc<Self> {
        Arc::new(Self {
            sessions: Mutex::new(HashMap::new()),
            closing: Default::default(),
            handing_over: Default::default(),
            config,
            audit,
            spares: state
                .as_ref()
                .map(|state| crate::process::store::Spares::new(state.processes().clone())),
            state,
            describe,
        })
    }

    fn sessions_dir(&self) -> Option<&Dir> {
        self.state.as_ref().map(|state| state.sessions())
    }

    fn new_session(&self, id: String, attachment: Option<Attachment>, policy: Policy) -> Session {
        Session::new(
            id,
            self.config.clone(),
            (self.describe)(&self.config),
            attachment,
            policy,
            self.spares.clone(),
        )
    }

    /// Records a new session for a successor; a session that cannot be kept works as ever.
    fn keep(&self, session: &Session) {
        let Some(dir) = self.sessions_dir() else {
            return;
        };
        let kept = KeptSession {
            id: session.id.clone(),
            on_disconnect: session.policy.on_disconnect,
            ttl_ms: session.policy.ttl.as_millis() as u64,
        };
        let text = serde_json::to_vec(&kept).expect("serializes");
        if let Err(err) = dir.write(&kept_name(&session.id), &text) {
            tracing::warn!("cannot keep a session in the state directory: {err}");
        }
    }

    fn forget(&self, id: &str) {
        if let Some(dir) = self.sessions_dir() {
            let _ = dir.remove_file(&kept_name(id));
        }
    }

    /// Adopts what a predecessor daemon kept: its sessions, detached (each with its whole
    /// time-to-live from now), and their processes, with their trees and output.
    pub(crate) async fn adopt(self: &Arc<Self>) -> std::io::Result<()> {
        let Some(state) = &self.state else {
            return Ok(());
        };
        let (sessions_dir, processes_dir) = (state.sessions(), state.processes());
        let mut adopted = HashMap::new();
        for name in sessions_dir.entries()? {
            let name = name.to_string_lossy();
            // A file that is not a regular file (a FIFO would block) or not a session is skipped.
            let kept: Option<KeptSession> = sessions_dir
                .read(&name)
                .ok()
                .and_then(|text| serde_json::from_slice(&text).ok());
            let Some(kept) = kept else {
                tracing::warn!("ignoring sessions/{name}: not a kept session");
                continue;
            };
            // Format 1 named it by the id itself.
            let digest = kept_name(&kept.id);
            if name != digest {
                if let Err(err) = sessions_dir.rename(&name, &digest) {
                    tracing::warn!("cannot rename a kept session to its digest: {err}");
                }
            }
            let policy = Policy {
                on_disconnect: kept.on_disconnect,
                ttl: Duration::from_millis(kept.ttl_ms),
            };
            let session = Arc::new(self.new_session(kept.id.clone(), None, policy));
            adopted.insert(kept.id, session);
        }
        let mut processes = 0;
        for name in processes_dir.entries()? {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with(crate::process::store::SPARE_PREFIX) {
                match &self.spares {
                    Some(spares) => spares.keep_left(name),
                    None => drop(processes_dir.remove_tree(&name)),
                }
                continue;
            }
            let Ok(dir) = processes_dir.open_dir(&name) else {
                tracing::warn!("ignoring processes/{name}: not a directory");
                continue;
            };
            let meta = crate::process::store::read_meta(&dir).ok();
            let supervisor_pid = meta.as_ref().map(|meta| meta.supervisor_pid);
            let kept = crate::process::store::Kept::new(processes_dir.clone(), name, dir);
            let Some((session, meta)) =
                meta.and_then(|meta| Some((adopted.get(&meta.session)?, meta)))
            else {
                tracing::warn!("removing processes/{}: its session is gone", kept.name);
                orphan_cleanup(kept, supervisor_pid).await;
                continue;
            };
            let name = kept.name.clone();
            match session.processes.adopt(kept, meta).await {
                Ok(()) => processes += 1,
                Err(err) => tracing::warn!("cannot adopt the process in processes/{name}: {err}"),
            }
        }
        if !adopted.is_empty() {
            tracing::info!(
                sessions = adopted.len(),
                processes,
                "adopted what the previous daemon kept"
            );
        }
        for (id, session) in adopted {
            let ttl = session.policy.ttl;
            self.sessions.lock().unwrap().insert(
                id.clone(),
                Entry {
                    session,
                    detached_at: Some(Instant::now()),
                    detach_epoch: 1,
                },
            );
            self.expire_after(id, 1, ttl);
        }
        Ok(())
    }

    /// A fresh session id, for [`Self::create`] (its audit record is written before).
    pub(crate) fn new_id() -> String {
        uuid::Uuid::new_v4().to_string()
    }

    pub(crate) fn create(
        &self,
        id: String,
        attachment: Attachment,
        policy: &RequestedPolicy,
    ) -> Result<Arc<Session>, SessionError> {
        let policy = policy.for_new_session(&self.config);
        let session = Arc::new(self.new_session(id.clone(), Some(attachment), policy));
        self.keep(&session);
        let entry = Entry {
            session: session.clone(),
            detached_at: None,
            detach_epoch: 0,
        };
        let mut sessions = self.sessions.lock().unwrap();
        if self.is_closing() {
            return Err(SessionError::ShuttingDown);
        }
        sessions.insert(id, entry);
        Ok(session)
    }

    /// The session `id` held by the daemon itself (an envd listener's): created when missing,
    /// taken back when a predecessor kept it. No connection attaches to it (a resume is told it
    /// is attached) and it never expires; its processes live until they exit or the daemon
    /// stops.
    pub(crate) fn hold(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        let mut sessions = self.sessions.lock().unwrap();
        if self.is_closing() {
            return Err(SessionError::ShuttingDown);
        }
        if let Some(entry) = sessions.get_mut(id) {
            entry.detached_at = None;
            return Ok(entry.session.clone());
        }
        let policy = RequestedPolicy::keep().for_new_session(&self.config);
        let session = Arc::new(self.new_session(id.to_owned(), None, policy));
        self.keep(&session);
        let entry = Entry {
            session: session.clone(),
            detached_at: None,
            detach_epoch: 0,
        };
        sessions.insert(id.to_owned(), entry);
        Ok(session)
    }

    /// Sessions and their processes by state, for a metrics scrape.
    pub(crate) fn census(&self) -> crate::metrics::Census {
        let mut census = crate::metrics::Census::default();
        let sessions: Vec<_> = {
            let sessions = self.sessions.lock().unwrap();
            for entry in sessions.values() {
                match entry.detached_at {
                    None => census.attached += 1,
                    Some(_) => census.detached += 1,
                }
            }
            sessions.values().map(|e| e.session.clone()).collect()
        };
        for session in sessions {
            for state in session.processes.lifecycles() {
                census.count_process(state);
            }
        }
        census
    }

    /// Whether the daemon is shutting down (from SIGTERM until it exits).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn resume(
        &self,
        id: &str,
        attachment: Attachment,
        policy: &RequestedPolicy,
    ) -> Result<Arc<Session>, SessionError> {
        let unknown = || SessionError::Unknown(id.to_owned());
        let mut sessions = self.sessions.lock().unwrap();
        if self.is_closing() {
            return Err(SessionError::ShuttingDown);
        }
        let entry = sessions.get_mut(id).ok_or_else(unknown)?;
        match entry.detached_at {
            None => Err(SessionError::AlreadyAttached(id.to_owned())),
            Some(since) if since.elapsed() >= entry.session.policy.ttl => {
                let entry = sessions.remove(id).expect("looked up above");
                drop(sessions);
                tokio::spawn(self.end(entry.session, ExitReason::SessionExpired));
                Err(unknown())
            }
            Some(_) => {
                policy.check_resume(&entry.session)?;
                entry.detached_at = None;
                // Notifications move to the new connection before the initialize reply is sent.
                entry.session.set_attachment(Some(attachment));
                Ok(entry.session.clone())
            }
        }
    }

    /// Called when a connection ends. Only its own attachment is cleared: after a takeover the
    /// session belongs to the new connection. A session with `onDisconnect: "kill"` ends here.
    pub(crate) fn detach(self: &Arc<Self>, session: &Session, connection_id: u64) {
        if self.handing_over.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let epoch = {
            let mut sessions = self.sessions.lock().unwrap();
            let Some(entry) = sessions.get_mut(&session.id) else {
                return;
            };
            if entry.session.attached_connection() != Some(connection_id) {
                return;
            }
            entry.session.set_attachment(None);
            tracing::info!(
                session = %crate::audit::log_digest(&session.id),
                connection = connection_id,
                on_disconnect = ?session.policy.on_disconnect,
                ttl = ?session.policy.ttl,
                "session detached"
            );
            if entry.session.policy.on_disconnect == DisconnectPolicy::Kill {
                let entry = sessions.remove(&session.id).expect("looked up above");
                drop(sessions);
                tokio::spawn(self.end(entry.session, ExitReason::Disconnected));
                return;
            }
            entry.detached_at = Some(Instant::now());
            entry.detach_epoch += 1;
            entry.detach_epoch
        };
        self.expire_after(session.id.clone(), epoch, session.policy.ttl);
    }

    /// Ends session `id` after `ttl` unless it was resumed since its detach `epoch`.
    fn expire_after(self: &Arc<Self>, id: String, epoch: u64, ttl: Duration) {
        let registry = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if let Some(registry) = registry.upgrade() {
                registry.expire(&id, epoch).await;
            }
        });
    }

    async fn expire(&self, id: &str, epoch: u64) {
        let expired = {
            let mut sessions = self.sessions.lock().unwrap();
            match sessions.get(id) {
                Some(entry) if entry.detached_at.is_some() && entry.detach_epoch == epoch => {
                    sessions.remove(id)
                }
                _ => None,
            }
        };
        if let Some(entry) = expired {
            self.end(entry.session, ExitReason::SessionExpired).await;
        }
    }

    /// From now on the connections' ends are the daemon's hand-over to a successor, not the
    /// clients' going away: their sessions stay as they are, no disconnect policy runs and no
    /// time-to-live starts, so that the successor adopts them as they were.
    pub(crate) fn hand_over(&self) {
        self.handing_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Refuses new sessions, kills every tree of every session (their tables refuse new
    /// starts from then on) and waits (bounded) until the trees are confirmed gone.
    pub(crate) async fn shutdown(&self) {
        let sessions: Vec<_> = {
            let mut sessions = self.sessions.lock().unwrap();
            self.closing
                .store(true, std::sync::atomic::Ordering::SeqCst);
            sessions.drain().map(|(_, e)| e.session).collect()
        };
        for session in &sessions {
            self.forget(&session.id);
        }
        let mut killed = Vec::new();
        let mut attached = Vec::new();
        for session in &sessions {
            let processes = session.processes.kill_all(ExitReason::Shutdown);
            if let Some(attachment) = &*session.attachment().borrow() {
                attached.push((processes.clone(), attachment.outbound.clone()));
            }
            killed.extend(processes);
        }
        reap(killed).await;
        // A client still connected sees its processes end (`reason: "shutdown"`) before its
        // connection does.
        let delivered = async {
            while !attached.iter().all(|(processes, outbound)| {
                processes.iter().all(|p| p.delivered_all()) && outbound.is_flushed()
            }) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        if tokio::time::timeout(FLUSH_GRACE, delivered).await.is_err() {
            tracing::warn!("some clients did not take the last events of their processes");
        }
    }
}

impl Registry {
    /// Ends a session already removed from the registry (expired, or disconnected with
    /// `onDisconnect: "kill"`): kills every tree at once (`reason`), cancels starts in progress,
    /// then waits (bounded) until the trees are gone and frees what the session held.
    fn end(
        &self,
        session: Arc<Session>,
        reason: ExitReason,
    ) -> impl std::future::Future<Output = ()> {
        let audit = &self.audit;
        self.forget(&session.id);
        tracing::info!(
            session = %crate::audit::log_digest(&session.id),
            ?reason,
            "session ended; killing its processes"
        );
        let details = || serde_json::json!({ "reason": reason });
        audit.event(
            &crate::audit::Identity::daemon(),
            &session.id,
            "session/expire",
            details,
        );
        let killed = session.processes.kill_all(reason);
        async move {
            reap(killed).await;
            drop(session);
            crate::memory::release_soon();
        }
    }
}

/// A kept process whose session is gone: its tree is killed (its supervisor, `supervisor_pid`
/// when its meta could be read, taken over for that) and its directory removed.
async fn orphan_cleanup(kept: crate::process::store::Kept, supervisor_pid: Option<i32>) {
    let Ok(dir) = kept.dir() else {
        return;
    };
    let adoption = crate::launcher::tree::adopt(&dir, &kept.name, supervisor_pid).await;
    adoption.orders.kill();
    let mut reports = adoption.reports;
    let _ = tokio::time::timeout(REAP_GRACE, async {
        while let Some(report) = reports.next().await {
            if matches!(report, crate::ipc::message::Report::Gone { .. }) {
                break;
            }
        }
    })
    .await;
    let _ = kept.parent.remove_tree(&kept.name);
}

/// The name of a kept session's file: its id's SHA-256 in hex, since the id is a credential
/// and names show up where contents do not (listings, logs, errors).
fn kept_name(id: &str) -> String {
    format!("{}.json", crate::audit::id_digest(id))
}

/// Waits (bounded) until the killed trees are gone; says so when some could not be confirmed.
async fn reap(processes: Vec<Arc<crate::process::ManagedProcess>>) {
    let all = futures::future::join_all(processes.iter().map(|p| p.wait_finished()));
    if tokio::time::timeout(REAP_GRACE, all).await.is_err() {
        let left = processes.iter().filter(|p| !p.is_finished()).count();
        tracing::warn!("cannot confirm that the trees of {left} killed processes are gone");
    }
}
