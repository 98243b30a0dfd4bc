//! Supervisors started ahead of need: sandbox helpers (`crate::child::sandbox`) and plain
//! supervisors (`crate::child::supervisor`), both forked by the fork server.
//!
//! Creating a network namespace costs more than everything else in a sandboxed launch, and
//! does not depend on the launch, so each launch takes a helper that is already waiting and a replacement is started in the background. Helpers are kept per
//! kind (plain, or sandboxed per network mode ([`NetworkMode`]), since a restricting one has
//! already made its own namespace); none exists until the first launch of that kind, so a
//! daemon whose clients never ask for a managed network never starts such a helper. A launch
//! that finds none waiting starts one itself. Every sandbox helper serves exactly one launch;
//! plain supervisors are handed back ([`return_plain`]) and serve the next. The fork server,
//! the daemon's binary executed once, forks them all: a fork of it costs a fraction of an exec.

use super::{LaunchError, SELF_EXE, SETUP_TIMEOUT};
use crate::ipc::channel;
use crate::ipc::message::{Answer, Fork, Order, FORK_SERVER_ARG};
use crate::os::scheduling::Scheduling;
use crate::sandbox::plan::{Failure, ManagedPlan, NetworkMode, Stage};
use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd, RawFd};
use std::process::Stdio;
use std::sync::Mutex;
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

/// A started sandbox helper that has not received a plan yet.
pub(crate) struct Helper {
    pub process: HelperProcess,
    control: UnixStream,
    /// Its program's process, forked ahead and waiting for its launch on its own socket
    /// (`crate::child::launch::fork_ahead`).
    program: (i32, UnixStream),
    /// What it is to run with once handed out.
    scheduling: Scheduling,
}

/// A sandbox helper's process: the fork server's child, known to the daemon by the pidfd it
/// sent ([`Answer::Hello`]), so that a pid reused since is never signalled.
pub(crate) struct HelperProcess {
    pid: i32,
    pidfd: crate::pidfd::Pidfd,
}

/// The fork server (the daemon's child).
struct ForkServer {
    child: tokio::process::Child,
    control: UnixStream,
}

#[derive(Default)]
struct Pool {
    /// The runtime the sockets and the fork server's `Child` are registered with (a test
    /// process has several).
    runtime: Option<tokio::runtime::Id>,
    /// Per network mode (index: [`NetworkMode::index`]), ready helpers and helpers being
    /// started.
    idle: [Vec<Helper>; NetworkMode::ALL.len()],
    starting: [usize; NetworkMode::ALL.len()],
    /// The fork server of plain supervisors and sandbox helpers, once started.
    forks: Option<ForkServer>,
    /// The control sockets of forked plain supervisors waiting for a launch, and how many are
    /// being forked.
    plain: Vec<UnixStream>,
    plain_starting: usize,
}

/// What a launch runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A plain supervisor, reused from launch to launch.
    Plain,
    /// A sandbox helper for this network mode, one per launch.
    Sandboxed(NetworkMode),
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

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
pub(crate) async fn take_plain() -> Result<UnixStream, LaunchError> {
    let waiting = pool(&mut POOL.lock().unwrap()).plain.pop();
    match waiting {
        Some(control) => Ok(control),
        None => fork_supervisor().await,
    }
}

/// Forks replacements for the plain supervisors taken, in the background, when few are left
/// waiting. Called once a launch has its verdict: on two cores, a fork (and the new
/// supervisor's setup) beside the launch delayed the launch itself.
pub(crate) fn refill_plain() {
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
pub(crate) fn return_plain(control: UnixStream) {
    let mut guard = POOL.lock().unwrap();
    let pool = pool(&mut guard);
    if pool.plain.len() < PLAIN_KEPT {
        pool.plain.push(control);
    }
}

/// Has the fork server fork a new plain supervisor; returns its control socket.
async fn fork_supervisor() -> Result<UnixStream, LaunchError> {
    let (ours, theirs) = socket_pair().map_err(LaunchError::Socket)?;
    fork(Fork::Supervisor, &[theirs.as_raw_fd()]).await?;
    nonblocking(ours).map_err(LaunchError::Socket)
}

/// Sends the fork server (started on first use) the order to fork `what`, with `fds`.
async fn fork(what: Fork, fds: &[RawFd]) -> Result<(), LaunchError> {
    let request = Order::Fork(what).encode();
    // A fork server killed from outside is replaced once.
    let mut replaced = false;
    loop {
        {
            let mut guard = POOL.lock().unwrap();
            let forks = &mut pool(&mut guard).forks;
            if let Some(server) = forks {
                if channel::send_fds(server.control.as_fd(), &request, fds)
                    .is_ok_and(|sent| sent == request.len())
                {
                    return Ok(());
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
        // exit as a spare, and what it forked would be re-parented to init.
        let _starting = FORK_SERVER_START.lock().await;
        if pool(&mut POOL.lock().unwrap()).forks.is_none() {
            let forks = start_fork_server().await?;
            pool(&mut POOL.lock().unwrap()).forks = Some(forks);
        }
    }
    Err(LaunchError::ForkServerGone)
}

fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    // Blocking: the child's end must stay so; ours is switched when it becomes async.
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?)
}

fn nonblocking(socket: OwnedFd) -> io::Result<UnixStream> {
    let socket = std::os::unix::net::UnixStream::from(socket);
    socket.set_nonblocking(true)?;
    UnixStream::from_std(socket)
}

/// Held while the fork server is started.
static FORK_SERVER_START: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A ready sandbox helper for this network mode: a waiting one, or a new one.
pub(crate) async fn take(network: NetworkMode) -> Result<Helper, LaunchError> {
    let index = network.index();
    let runtime = tokio::runtime::Handle::current().id();
    let waiting = {
        let mut guard = POOL.lock().unwrap();
        let pool = pool(&mut guard);
        // One that died while waiting (killed from outside) is dropped (the fork server
        // reaps it).
        std::iter::from_fn(|| pool.idle[index].pop()).find(|helper| helper.process.is_running())
    };
    refill(network, runtime);
    if let Some(helper) = waiting {
        match helper
            .scheduling
            .restore(helper.process.id(), helper.program.0)
        {
            Ok(()) => return Ok(helper),
            Err(err) => tracing::warn!("cannot reschedule a waiting sandbox helper: {err}"),
        }
    }
    start_helper(network, false).await
}

/// Starts replacements in the background until the mode has its idle helpers.
fn refill(network: NetworkMode, runtime: tokio::runtime::Id) {
    let index = network.index();
    let missing = {
        let mut guard = POOL.lock().unwrap();
        let Some(pool) = guard.as_mut() else { return };
        let missing = IDLE.saturating_sub(pool.idle[index].len() + pool.starting[index]);
        pool.starting[index] += missing;
        missing
    };
    for _ in 0..missing {
        tokio::spawn(replace(network, runtime));
    }
}

/// Starts one background helper for the pool (counted in `starting` by the caller).
async fn replace(network: NetworkMode, runtime: tokio::runtime::Id) {
    let index = network.index();
    let started = start_helper(network, true).await;
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

/// Executes the fork server (`exec-server __supervise`) and waits until it is ready.
async fn start_fork_server() -> Result<ForkServer, LaunchError> {
    let (ours, theirs) = socket_pair().map_err(LaunchError::Socket)?;
    let mut command = tokio::process::Command::new(SELF_EXE);
    command
        .arg0("exec-server")
        .arg(FORK_SERVER_ARG)
        .current_dir("/")
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // No pre_exec, so std uses posix_spawn; the parent thread waits for the exec, so off the
    // async workers.
    let mut child = tokio::task::spawn_blocking(move || command.spawn())
        .await
        .map_err(io::Error::other)
        .and_then(|spawned| spawned)
        .map_err(LaunchError::ForkServerSpawn)?;
    let ready = async {
        let mut control = nonblocking(ours)?;
        // Its first frame: what every sandbox helper it forks must hide
        // (`crate::sandbox::hidden`), and how it enforces.
        let settings = serde_json::to_vec(&crate::sandbox::HelperSettings::current())?;
        control
            .write_all(&channel::message(None, &[&settings]))
            .await?;
        let mut ready = [0u8; 1];
        control.read_exact(&mut ready).await?;
        Ok::<_, io::Error>(Answer::is_ready(ready[0]).then_some(control))
    };
    if let Ok(Ok(Some(control))) = tokio::time::timeout(SETUP_TIMEOUT, ready).await {
        return Ok(ForkServer { child, control });
    }
    let _ = child.start_kill();
    Err(LaunchError::ForkServerNotReady)
}

/// Has the fork server fork a sandbox helper for `network`, and waits until it is ready for
/// its plan. A `background` one (a replacement) starts with the idle scheduling policy, so
/// that its setup only takes CPU time that launches in progress do not want; it gets the
/// daemon's back when handed out. Only a daemon that can give it back does so
/// ([`Scheduling::idle_is_reversible`]).
async fn start_helper(network: NetworkMode, background: bool) -> Result<Helper, LaunchError> {
    // On the host's network, the helper must be in the cgroup whose connections the daemon
    // refuses (`crate::sandbox::peers`) before it runs anything; without one, nothing may run
    // there.
    let cgroup = match network {
        NetworkMode::Restricted | NetworkMode::Managed => None,
        NetworkMode::Enabled => Some(crate::sandbox::peers::cgroup().as_ref().map_err(|why| {
            LaunchError::Sandbox(Failure {
                errno: why.source.raw_os_error(),
                ..Stage::Network.fail(why)
            })
        })?),
    };
    let scheduling = Scheduling::current().map_err(LaunchError::Scheduling)?;
    let background = background && Scheduling::idle_is_reversible();
    // The helper's program process gets its launch on its own socket, which the helper does
    // not keep.
    let pairs = socket_pair().and_then(|control| Ok((control, socket_pair()?)));
    let ((ours, theirs), (launch, program_end)) = pairs.map_err(LaunchError::Socket)?;
    let what = Fork::Helper {
        network,
        background,
    };
    fork(what, &[theirs.as_raw_fd(), program_end.as_raw_fd()]).await?;
    drop((theirs, program_end));
    let mut control = nonblocking(ours).map_err(LaunchError::Socket)?;
    let process = match tokio::time::timeout(SETUP_TIMEOUT, receive_hello(&control)).await {
        Ok(hello) => hello.map_err(LaunchError::Hello)?,
        Err(_) => return Err(LaunchError::HelperTimeout),
    };
    let ready = tokio::time::timeout(SETUP_TIMEOUT, admit(&mut control, &process, cgroup));
    let program = match ready.await {
        Ok(Ok(program)) => nonblocking(launch)
            .map(|socket| (program, socket))
            .map_err(LaunchError::Socket),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(LaunchError::HelperTimeout),
    };
    match program {
        Ok(program) => Ok(Helper {
            process,
            control,
            program,
            scheduling,
        }),
        Err(err) => {
            process.kill();
            Err(err)
        }
    }
}

/// Admits a started helper (into `cgroup`, on the host's network), and waits until it is
/// ready: returns the pid of the program process it then forked.
async fn admit(
    control: &mut UnixStream,
    process: &HelperProcess,
    cgroup: Option<&crate::sandbox::peers::SandboxCgroup>,
) -> Result<i32, LaunchError> {
    if let Some(cgroup) = cgroup {
        cgroup
            .admit(process.id() as u32)
            .map_err(LaunchError::Admission)?;
    }
    // The helper forks the program's process once it knows it is in its cgroup, so that the
    // fork is in it too.
    let mut first = [0u8; 1];
    let admitted = async {
        control.write_all(&Order::Admitted.encode()).await?;
        control.read(&mut first).await
    };
    match admitted.await.map_err(LaunchError::Send)? {
        1 => {}
        _ => return Err(LaunchError::HelperExited),
    }
    if Answer::is_ready(first[0]) {
        // Then the pid of the program process it forked.
        let mut pid = [0u8; 4];
        return match control.read_exact(&mut pid).await {
            Ok(_) => Ok(i32::from_le_bytes(pid)),
            Err(_) => Err(LaunchError::HelperNotReady),
        };
    }
    // Anything else it wrote is the start of its Failure; it exits after writing it.
    let mut text = first.to_vec();
    match control.read_to_end(&mut text).await {
        Ok(_) => Err(serde_json::from_slice::<Failure>(&text)
            .map_or(LaunchError::HelperFailed, LaunchError::Sandbox)),
        Err(_) => Err(LaunchError::HelperFailed),
    }
}

/// The helper's first message: its pid, with its pidfd.
async fn receive_hello(control: &UnixStream) -> io::Result<HelperProcess> {
    let mut message = [0u8; 5];
    let received = channel::recv_fds_async(control, &mut message, 1).await?;
    let hello = Answer::hello(&message[..received.bytes]);
    let (Some(pid), Ok([pidfd])) = (hello, <[OwnedFd; 1]>::try_from(received.fds)) else {
        return Err(io::Error::other("the sandbox helper did not say hello"));
    };
    Ok(HelperProcess {
        pid,
        pidfd: crate::pidfd::Pidfd::from_fd(pidfd)?,
    })
}

impl HelperProcess {
    pub(crate) fn id(&self) -> i32 {
        self.pid
    }

    /// Whether it has not exited yet.
    pub(crate) fn is_running(&self) -> bool {
        self.pidfd.is_running()
    }

    pub(crate) fn kill(&self) {
        let _ = self.pidfd.signal(libc::SIGKILL);
    }

    /// Resolves once it has exited (its namespaces are gone with it).
    pub(crate) async fn exited(&self) {
        self.pidfd.exited().await
    }
}

/// A sandbox helper that has its launch.
pub(crate) struct HandedOver {
    pub helper: HelperProcess,
    /// On which the helper reports ([`Report`](crate::ipc::message::Report)).
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
    /// Hands a sandbox helper its launch: for a managed network, first its plan, for which it
    /// sends the listeners (and the TUN device); then, to the program's process, its stdio (and cgroups) and the
    /// launch frames ([`crate::ipc::message::launch`]).
    pub(crate) async fn hand_over(
        mut self,
        fds: &[BorrowedFd<'_>],
        frames: &[u8],
        managed: Option<&ManagedPlan>,
    ) -> io::Result<HandedOver> {
        let (program, mut verdict) = self.program;
        let handed = async {
            let (mut listeners, mut unread) = (Vec::new(), Vec::new());
            if let Some(managed) = managed {
                let managed = serde_json::to_vec(managed)?;
                let mut frame = (managed.len() as u32).to_le_bytes().to_vec();
                frame.extend_from_slice(&managed);
                self.control.write_all(&frame).await?;
                (listeners, unread) = super::bridge::receive(&self.control).await?;
            }
            if unread.is_empty() {
                send(&mut verdict, fds, frames).await?;
            }
            Ok::<_, io::Error>((listeners, unread))
        };
        match handed.await {
            Ok((listeners, unread)) => Ok(HandedOver {
                helper: self.process,
                control: self.control,
                program,
                verdict,
                listeners,
                unread,
            }),
            Err(err) => {
                self.process.kill();
                Err(err)
            }
        }
    }
}

/// Sends a supervisor, on its fresh control socket, the program's stdio (and cgroups) and the
/// launch frames ([`crate::ipc::message::launch`]).
pub(crate) async fn send(
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
