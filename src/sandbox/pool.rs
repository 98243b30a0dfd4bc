//! Supervisors started ahead of need: sandbox helpers and plain supervisors
//! (`crate::process::supervisor`).
//!
//! Re-executing the daemon's binary and creating a network namespace cost more than everything
//! else in a launch together, and neither depends on the launch, so each launch takes a
//! helper that is already waiting (see [`super::helper`]) and a replacement is started in the
//! background. Helpers are kept per kind (plain, or sandboxed per network mode
//! ([`NetworkMode`]), since a restricting one has already made its own namespace); none exists
//! until the first launch of that kind, so a daemon whose clients never ask for a managed
//! network never starts such a helper. A launch that finds none waiting starts one itself.
//! Every sandbox helper serves exactly one launch; plain supervisors are handed back
//! ([`return_plain`]) and serve the next.

use super::helper::HELPER_ARG;
use super::plan::{Failure, NetworkMode, Stage};
use crate::channel::{self, ADMITTED, FORK, READY};
use crate::process::supervisor::SUPERVISOR_ARG;
use std::io::{self, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

/// Idle helpers kept per network mode: enough for a few launches at once, and for back-to-back
/// launches while replacements (at idle priority) are slow to start; with two, one launch in
/// ten found none ready in a tight loop here and paid a full start.
const IDLE: usize = 3;

/// Plain supervisors are reused ([`return_plain`]), so back-to-back launches never need a new
/// one: replacements are forked only when fewer than this many wait, and up to this many
/// returned ones are kept.
const PLAIN_LOW: usize = 2;
const PLAIN_KEPT: usize = 8;

/// A started helper that has not received a plan yet.
pub struct Helper {
    pub child: tokio::process::Child,
    control: UnixStream,
    /// A sandbox helper's program process, forked ahead and waiting for its launch on its own
    /// socket (`crate::process::supervisor::fork_ahead`).
    program: Option<(i32, UnixStream)>,
    /// What it is to run with once handed out.
    scheduling: Scheduling,
}

#[derive(Default)]
struct Pool {
    /// The runtime the helpers' `Child`ren are registered with (a test process has several).
    runtime: Option<tokio::runtime::Id>,
    /// Per network mode (index: [`NetworkMode::index`]), ready helpers and helpers being
    /// started.
    idle: [Vec<Helper>; NetworkMode::ALL.len()],
    starting: [usize; NetworkMode::ALL.len()],
    /// The fork server of plain supervisors, once started.
    forks: Option<Helper>,
    /// The control sockets of forked plain supervisors waiting for a launch, and how many are
    /// being forked.
    plain: Vec<UnixStream>,
    plain_starting: usize,
}

/// What a helper is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The fork server of plain supervisors (one per daemon, serving every plain launch).
    Plain,
    Sandboxed(NetworkMode),
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// Why no helper could be had.
#[derive(Debug)]
pub enum StartError {
    Io(io::Error),
    /// The helper could not prepare what it needs before the plan (e.g. a network namespace
    /// without the privilege to make one).
    Refused(Failure),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(err) => err.fmt(f),
            Self::Refused(failure) => write!(f, "{}: {}", failure.stage, failure.message),
        }
    }
}

impl From<io::Error> for StartError {
    fn from(err: io::Error) -> Self {
        Self::Io(err)
    }
}

/// The pool of the current runtime (a test process has several).
fn pool(guard: &mut Option<Pool>) -> &mut Pool {
    let runtime = tokio::runtime::Handle::current().id();
    let pool = guard.get_or_insert_with(Pool::default);
    if pool.runtime != Some(runtime) {
        *pool = Pool {
            runtime: Some(runtime),
            ..Pool::default()
        };
    }
    pool
}

/// The control socket of a plain supervisor waiting for its launch: a waiting one, or a new
/// one. Supervisors are forked by the fork server, not executed: a plain launch costs neither
/// an exec of the daemon's binary nor, when one is waiting, a fork on its path.
pub async fn take_plain() -> Result<UnixStream, StartError> {
    let waiting = pool(&mut POOL.lock().unwrap()).plain.pop();
    match waiting {
        Some(control) => Ok(control),
        None => fork_supervisor().await,
    }
}

/// Forks replacements for the plain supervisors taken, in the background, when few are left
/// waiting. Called once a launch has its verdict: on two cores, a fork (and the new
/// supervisor's setup) beside the launch delayed the launch itself.
pub fn refill_plain() {
    let runtime = tokio::runtime::Handle::current().id();
    let missing = {
        let mut guard = POOL.lock().unwrap();
        let pool = pool(&mut guard);
        let waiting = pool.plain.len() + pool.plain_starting;
        let missing = if waiting < PLAIN_LOW {
            IDLE - waiting
        } else {
            0
        };
        pool.plain_starting += missing;
        missing
    };
    for _ in 0..missing {
        tokio::spawn(async move {
            let forked = fork_supervisor().await;
            let mut guard = POOL.lock().unwrap();
            let Some(pool) = guard.as_mut().filter(|pool| pool.runtime == Some(runtime)) else {
                return;
            };
            pool.plain_starting -= 1;
            match forked {
                Ok(control) => pool.plain.push(control),
                Err(err) => tracing::warn!("cannot fork a supervisor: {err}"),
            }
        });
    }
}

/// Takes back a plain supervisor that is ready for another launch; beyond what is kept, it is
/// let go (it exits at the EOF).
pub fn return_plain(control: UnixStream) {
    let mut guard = POOL.lock().unwrap();
    let pool = pool(&mut guard);
    if pool.plain.len() < PLAIN_KEPT {
        pool.plain.push(control);
    }
}

/// Has the fork server (started on first use) fork a new plain supervisor; returns its
/// control socket.
async fn fork_supervisor() -> Result<UnixStream, StartError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    // A fork server killed from outside is replaced once.
    let mut replaced = false;
    loop {
        {
            let mut guard = POOL.lock().unwrap();
            let forks = &mut pool(&mut guard).forks;
            if let Some(server) = forks {
                if channel::send_fds(server.control.as_fd(), &[FORK], &[theirs.as_raw_fd()]).is_ok()
                {
                    drop(guard);
                    let ours = std::os::unix::net::UnixStream::from(ours);
                    ours.set_nonblocking(true)?;
                    return Ok(UnixStream::from_std(ours)?);
                }
                if replaced {
                    break;
                }
                replaced = true;
                // Taken under the same lock as the failed send: never a replacement that a
                // concurrent start has just put in its place.
                if let Some(mut dead) = forks.take() {
                    let _ = dead.child.start_kill();
                }
            }
        }
        // One fork server at a time: a second one started by a concurrent first use would
        // exit as a spare, and the supervisor it forked would be re-parented to init.
        let _starting = FORK_SERVER_START.lock().await;
        if pool(&mut POOL.lock().unwrap()).forks.is_none() {
            let forks = start(Kind::Plain, false).await?;
            pool(&mut POOL.lock().unwrap()).forks = Some(forks);
        }
    }
    Err(io::Error::other("the supervisor fork server is not answering").into())
}

/// Held while the fork server is started.
static FORK_SERVER_START: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A ready sandbox helper for this network mode: a waiting one, or a new one.
pub async fn take(network: NetworkMode) -> Result<Helper, StartError> {
    let index = network.index();
    let kind = Kind::Sandboxed(network);
    let runtime = tokio::runtime::Handle::current().id();
    let waiting = {
        let mut guard = POOL.lock().unwrap();
        let pool = pool(&mut guard);
        // One that died while waiting (killed from outside) is dropped, and reaped by tokio.
        std::iter::from_fn(|| pool.idle[index].pop())
            .find_map(|mut helper| matches!(helper.child.try_wait(), Ok(None)).then_some(helper))
    };
    refill(kind, runtime);
    if let Some(helper) = waiting {
        let program = helper.program.as_ref().map(|(pid, _)| *pid);
        match helper.scheduling.restore(helper.child.id(), program) {
            Ok(()) => return Ok(helper),
            Err(err) => tracing::warn!("cannot reschedule a waiting sandbox helper: {err}"),
        }
    }
    start(kind, false).await
}

/// Starts replacements in the background until the mode has its idle helpers.
fn refill(kind: Kind, runtime: tokio::runtime::Id) {
    let Kind::Sandboxed(network) = kind else {
        return;
    };
    let index = network.index();
    let missing = {
        let mut guard = POOL.lock().unwrap();
        let Some(pool) = guard.as_mut() else { return };
        let missing = IDLE.saturating_sub(pool.idle[index].len() + pool.starting[index]);
        pool.starting[index] += missing;
        missing
    };
    for _ in 0..missing {
        tokio::spawn(replace(kind, runtime));
    }
}

/// Starts one background helper for the pool (counted in `starting` by the caller).
async fn replace(kind: Kind, runtime: tokio::runtime::Id) {
    let Kind::Sandboxed(network) = kind else {
        return;
    };
    let index = network.index();
    let started = start(kind, true).await;
    let mut guard = POOL.lock().unwrap();
    // A pool reset for another runtime has forgotten this start.
    let Some(pool) = guard.as_mut().filter(|pool| pool.runtime == Some(runtime)) else {
        return;
    };
    pool.starting[index] -= 1;
    match started {
        Ok(helper) => pool.idle[index].push(helper),
        Err(err) => tracing::warn!("cannot start a sandbox helper: {err}"),
    }
}

/// Starts a helper and waits until it is ready for its plan. A `background` one (a
/// replacement) starts with the idle scheduling policy, so that its exec only takes CPU time
/// that launches in progress do not want; it gets the daemon's back when handed out. Only a
/// daemon that can give it back does so ([`Scheduling::idle_is_reversible`]).
async fn start(kind: Kind, background: bool) -> Result<Helper, StartError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    // Created blocking: the helper's end must stay blocking; ours is switched below.
    let pair = || {
        socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)
    };
    let (ours, theirs) = pair()?;
    // A sandbox helper's program process gets its launch on its own socket (the helper's
    // stdout), which the helper does not keep.
    let (launch, program_end) = match kind {
        Kind::Sandboxed(_) => {
            let (launch, program_end) = pair()?;
            (Some(launch), Stdio::from(program_end))
        }
        Kind::Plain => (None, Stdio::null()),
    };
    let mut command = tokio::process::Command::new(super::SELF_EXE);
    command.arg0("exec-server");
    match kind {
        Kind::Plain => command.arg(SUPERVISOR_ARG),
        Kind::Sandboxed(network) => command.arg(HELPER_ARG).arg(network.arg()),
    };
    command
        .current_dir("/")
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(program_end)
        .stderr(Stdio::null());
    // On the host's network, the helper must be in the cgroup whose connections the daemon
    // refuses (`super::peers`) before it runs anything; without one, nothing may run there.
    let cgroup = match (kind, super::peers::cgroup()) {
        (Kind::Plain | Kind::Sandboxed(NetworkMode::Restricted | NetworkMode::Managed), _) => None,
        (_, Ok(cgroup)) => Some(cgroup),
        (_, Err(why)) => {
            return Err(StartError::Refused(Failure {
                errno: why.source.raw_os_error(),
                ..Stage::Network.fail(why)
            }))
        }
    };
    // No pre_exec, so std uses posix_spawn; the parent thread waits for the exec, so off the
    // async workers. The child inherits the thread's scheduling policy.
    let (mut child, scheduling) = tokio::task::spawn_blocking(move || {
        let scheduling = Scheduling::current()?;
        let background = background && Scheduling::idle_is_reversible();
        if background {
            Scheduling::IDLE.apply(0)?;
        }
        let spawned = command.spawn();
        if background {
            scheduling.apply(0)?;
        }
        let mut child = spawned?;
        if let Some(cgroup) = cgroup {
            let admitted = child
                .id()
                .ok_or_else(|| io::Error::other("the helper was reaped"))
                .and_then(|pid| cgroup.admit(pid));
            if let Err(err) = admitted {
                let _ = child.start_kill();
                return Err(io::Error::new(
                    err.kind(),
                    format!("moving the helper into the sandbox cgroup: {err}"),
                ));
            }
        }
        Ok::<_, io::Error>((child, scheduling))
    })
    .await
    .map_err(io::Error::other)??;
    let socket = std::os::unix::net::UnixStream::from(ours);
    if matches!(kind, Kind::Sandboxed(_)) {
        // The helper forks the program's process once it knows it is in its cgroup, so that
        // the fork is in it too. A helper that is gone reads nothing: its EOF below.
        let _ = (&socket).write_all(&[ADMITTED]);
    }
    socket.set_nonblocking(true)?;
    let mut control = UnixStream::from_std(socket)?;
    let mut ready = [0u8; 1];
    let read = tokio::time::timeout(super::SETUP_TIMEOUT, control.read(&mut ready)).await;
    let error = match read {
        Ok(Ok(1)) if ready[0] == READY => {
            let program = match launch {
                Some(launch) => {
                    // Then the pid of the program process it forked.
                    let mut pid = [0u8; 4];
                    let read =
                        tokio::time::timeout(super::SETUP_TIMEOUT, control.read_exact(&mut pid));
                    let pid = match read.await {
                        Ok(Ok(_)) => i32::from_le_bytes(pid),
                        _ => {
                            let _ = child.start_kill();
                            return Err(io::Error::other("the sandbox helper did not start").into());
                        }
                    };
                    let launch = std::os::unix::net::UnixStream::from(launch);
                    launch.set_nonblocking(true)?;
                    Some((pid, UnixStream::from_std(launch)?))
                }
                None => None,
            };
            return Ok(Helper {
                child,
                control,
                program,
                scheduling,
            });
        }
        // Anything else it wrote is the start of its Failure; it exits after writing it.
        Ok(Ok(1)) => {
            let mut text = ready.to_vec();
            let rest = tokio::time::timeout(super::SETUP_TIMEOUT, control.read_to_end(&mut text));
            match rest
                .await
                .map(|read| read.map(|_| serde_json::from_slice::<Failure>(&text)))
            {
                Ok(Ok(Ok(failure))) => StartError::Refused(failure),
                _ => io::Error::other("the sandbox helper failed to start").into(),
            }
        }
        Ok(Ok(_)) => io::Error::other("the sandbox helper exited before it was ready").into(),
        Ok(Err(err)) => err.into(),
        Err(_) => io::Error::other("the sandbox helper did not start in time").into(),
    };
    let _ = child.start_kill();
    Err(error)
}

/// A sandbox helper that has its launch.
pub struct HandedOver {
    pub helper: tokio::process::Child,
    /// On which the helper reports (`crate::process::supervisor::Report`).
    pub control: UnixStream,
    /// The program's process, and its socket, on which its verdict comes (EOF: executed).
    pub program: i32,
    pub verdict: UnixStream,
    /// For a managed network: the listeners; or, with none, what the helper wrote instead
    /// (the start of its `failed` report), and the launch was not sent.
    pub listeners: Vec<std::os::fd::OwnedFd>,
    pub unread: Vec<u8>,
}

impl Helper {
    /// Hands a sandbox helper its launch: for a managed network, first the ports, for which it
    /// sends the listeners; then, to the program's process, its stdio (and cgroups) and the
    /// launch frames ([`crate::process::supervisor::frames`]).
    pub async fn hand_over(
        mut self,
        fds: &[BorrowedFd<'_>],
        frames: &[u8],
        ports: Option<&[u16]>,
    ) -> io::Result<HandedOver> {
        let handed = async {
            let (program, mut verdict) = self
                .program
                .take()
                .ok_or_else(|| io::Error::other("not a sandbox helper"))?;
            let (mut listeners, mut unread) = (Vec::new(), Vec::new());
            if let Some(ports) = ports {
                let ports = serde_json::to_vec(ports)?;
                let mut frame = (ports.len() as u32).to_le_bytes().to_vec();
                frame.extend_from_slice(&ports);
                self.control.write_all(&frame).await?;
                (listeners, unread) = super::bridge::receive(&self.control).await?;
            }
            if unread.is_empty() {
                send(&mut verdict, fds, frames).await?;
            }
            Ok::<_, io::Error>((program, verdict, listeners, unread))
        };
        match handed.await {
            Ok((program, verdict, listeners, unread)) => Ok(HandedOver {
                helper: self.child,
                control: self.control,
                program,
                verdict,
                listeners,
                unread,
            }),
            Err(err) => {
                let _ = self.child.start_kill();
                Err(err)
            }
        }
    }
}

/// Sends a supervisor, on its fresh control socket, the program's stdio (and cgroups) and the
/// launch frames ([`crate::process::supervisor::frames`]).
pub async fn send(
    control: &mut UnixStream,
    fds: &[BorrowedFd<'_>],
    frames: &[u8],
) -> io::Result<()> {
    if frames.is_empty() {
        return Err(io::Error::other("empty launch"));
    }
    let fds: Vec<_> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    // The descriptors travel with the data (a stream socket carries control data only along
    // with data), and as much of the launch as the socket takes: nothing was sent on it
    // before, so at least its first byte. One message wakes the supervisor once, with all it
    // needs (a launch sent after the descriptors woke it twice).
    let sent = channel::send_fds(control.as_fd(), frames, &fds)?;
    control.write_all(&frames[sent..]).await
}

/// A thread's scheduling policy and its parameters (the nice value is separate, and is kept).
#[derive(Clone, Copy)]
struct Scheduling {
    policy: libc::c_int,
    priority: libc::c_int,
}

impl Scheduling {
    const IDLE: Self = Self {
        policy: libc::SCHED_IDLE,
        priority: 0,
    };

    /// Whether a thread may leave SCHED_IDLE for its old policy again: that takes CAP_SYS_NICE
    /// (or a permissive RLIMIT_NICE), which an unprivileged daemon lacks, and without it the
    /// blocking thread that spawned a helper, and the helper itself, would stay idle. Probed
    /// once, on a thread of its own.
    fn idle_is_reversible() -> bool {
        static REVERSIBLE: OnceLock<bool> = OnceLock::new();
        *REVERSIBLE.get_or_init(|| {
            std::thread::spawn(|| {
                Self::current().is_ok_and(|own| Self::IDLE.apply(0).is_ok() && own.apply(0).is_ok())
            })
            .join()
            .unwrap_or(false)
        })
    }

    fn current() -> io::Result<Self> {
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain calls about the calling thread, with a valid out-pointer.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if policy < 0 || unsafe { libc::sched_getparam(0, &mut param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            policy,
            priority: param.sched_priority,
        })
    }

    /// Applies to thread `tid` (0: the calling one).
    fn apply(self, tid: libc::pid_t) -> io::Result<()> {
        let param = libc::sched_param {
            sched_priority: self.priority,
        };
        // SAFETY: plain call with a valid parameter struct.
        if unsafe { libc::sched_setscheduler(tid, self.policy, &param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Gives a waiting helper, and the program's process it forked ahead, back the scheduling
    /// they were started without.
    fn restore(self, pid: Option<u32>, program: Option<i32>) -> io::Result<()> {
        let pid = pid.ok_or_else(|| io::Error::other("the helper was reaped"))?;
        self.apply(pid as libc::pid_t)?;
        program.map_or(Ok(()), |program| self.apply(program))
    }
}
