//! The daemon's side of a supervised launch (`crate::child::supervisor`): the supervisor's
//! process, its reports and the orders sent to it.

use super::cgroup::Group;
use super::pool::{self, Kind};
use super::spec::LaunchSpec;
use super::{LaunchError, SETUP_TIMEOUT};
use crate::ipc::channel;
use crate::ipc::message::{
    self, supervisor_socket, Adopted, Answer, Hold, Order, Report, EXIT_RECORD, SUPERVISOR_SOCKET,
};
use crate::sandbox::plan::{Failure, ManagedPlan};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// A supervisor that has its launch.
pub(crate) struct Tree {
    /// A sandbox helper's process, which the daemon waits for (its mount namespace goes with
    /// it); both kinds of supervisor are the fork server's children, which it reaps.
    pub supervisor: Option<pool::HelperProcess>,
    pub supervisor_pid: i32,
    /// The program's process (or the one exiting in its place).
    pub program_pid: i32,
    /// The tree's cgroups, with per-tree limits.
    pub group: Option<Group>,
    pub reports: Reports,
    pub orders: Orders,
    /// Until [`launch`] returns them.
    listeners: Vec<OwnedFd>,
}

/// The read half of the control socket, after what was read before it (see [`launch`]).
pub(crate) struct Reports(
    tokio::io::Lines<
        tokio::io::BufReader<tokio::io::Chain<std::io::Cursor<Vec<u8>>, OwnedReadHalf>>,
    >,
);

/// The write half of the control socket; taken back when a plain supervisor is reused
/// ([`reuse`]), after which orders go nowhere: never to the supervisor's next tree.
pub(crate) struct Orders(std::sync::Mutex<Option<OwnedWriteHalf>>);

/// What the supervisor says about the exec.
pub(crate) enum Started {
    Executed,
    /// The program's process could not execute the program and exits in its place.
    Failed {
        failure: Failure,
    },
}

/// Hands the launch of `spec` (`payload`: what the program's process applies) to a waiting
/// supervisor of `kind`, with the program's `stdio` and the tree's cgroups, and waits for the
/// verdict on the exec: a plain supervisor reports it; a sandbox helper's program process,
/// forked ahead, tells the daemon itself. For a managed network (`managed`), also the
/// descriptors the helper opened in the sandbox's network namespace (`super::bridge`).
pub(crate) async fn launch(
    kind: Kind,
    spec: &LaunchSpec,
    stdio: &[OwnedFd; 3],
    payload: &[u8],
    managed: Option<&ManagedPlan>,
) -> Result<(Tree, Started, Vec<OwnedFd>), LaunchError> {
    let mut group = Group::create(spec.limits.max_memory_bytes, spec.limits.max_processes)
        .map_err(LaunchError::Cgroup)?;
    // The groups' `cgroup.procs`, which the program's process joins: not kept.
    let procs = group.as_mut().map(|group| std::mem::take(&mut group.procs));
    let fds: Vec<BorrowedFd<'_>> = stdio
        .iter()
        .chain(procs.iter().flatten())
        .map(AsFd::as_fd)
        .collect();
    let frames = message::launch(&spec.setup(), payload);
    let setup = async {
        let (mut tree, first) = match kind {
            Kind::Plain => hand_to_supervisor(&fds, &frames, group).await?,
            Kind::Sandboxed(network) => {
                hand_to_helper(network, &fds, &frames, managed, group).await?
            }
        };
        let (supervisor, program, started) = match first {
            Some(Report::Started { supervisor, pid }) => (supervisor, pid, Started::Executed),
            Some(Report::Failed {
                supervisor,
                failure,
                pid,
            }) => (supervisor, pid, Started::Failed { failure }),
            _ => return Err(LaunchError::SupervisorFailed),
        };
        (tree.supervisor_pid, tree.program_pid) = (supervisor, program);
        Ok::<_, LaunchError>((tree, started))
    };
    // Dropping the tree (on any error) closes the control socket: the supervisor ends.
    let setup = tokio::time::timeout(SETUP_TIMEOUT, setup).await;
    drop(fds);
    if kind == Kind::Plain {
        pool::refill_plain();
    }
    let Ok(setup) = setup else {
        return Err(LaunchError::Timeout);
    };
    drop(procs);
    let (mut tree, started) = setup?;
    let listeners = std::mem::take(&mut tree.listeners);
    Ok((tree, started, listeners))
}

impl Tree {
    fn new(
        supervisor: Option<pool::HelperProcess>,
        control: tokio::net::UnixStream,
        unread: Vec<u8>,
        group: Option<Group>,
    ) -> Self {
        let (reports, orders) = connect(control, unread);
        Self {
            supervisor,
            supervisor_pid: 0,
            program_pid: 0,
            group,
            reports,
            orders,
            listeners: Vec::new(),
        }
    }
}

/// A plain launch: to a waiting plain supervisor, which reports the verdict first.
async fn hand_to_supervisor(
    fds: &[BorrowedFd<'_>],
    frames: &[u8],
    group: Option<Group>,
) -> Result<(Tree, Option<Report>), LaunchError> {
    let mut control = pool::take_plain().await?;
    // A waiting supervisor killed from outside cannot take it: a fresh one, once.
    if pool::send(&mut control, fds, frames).await.is_err() {
        control = pool::take_plain().await?;
        pool::send(&mut control, fds, frames)
            .await
            .map_err(LaunchError::Send)?;
    }
    let mut tree = Tree::new(None, control, Vec::new(), group);
    let first = tree.reports.next().await;
    Ok((tree, first))
}

/// A sandboxed launch: to a waiting helper's program process, forked ahead, whose verdict
/// comes on its own socket (EOF: executed).
async fn hand_to_helper(
    network: crate::sandbox::plan::NetworkMode,
    fds: &[BorrowedFd<'_>],
    frames: &[u8],
    managed: Option<&ManagedPlan>,
    group: Option<Group>,
) -> Result<(Tree, Option<Report>), LaunchError> {
    let helper = pool::take(network).await?;
    let handed = helper
        .hand_over(fds, frames, managed)
        .await
        .map_err(LaunchError::Send)?;
    let (program, supervisor) = (handed.program, handed.helper.id());
    let refused = !handed.unread.is_empty();
    let mut tree = Tree::new(Some(handed.helper), handed.control, handed.unread, group);
    tree.supervisor_pid = supervisor;
    tree.listeners = handed.listeners;
    if refused {
        // The helper's own failure, in place of the listeners.
        let first = tree.reports.next().await;
        return Ok((tree, first));
    }
    let mut verdict = Vec::new();
    let mut socket = handed.verdict;
    socket
        .read_to_end(&mut verdict)
        .await
        .map_err(LaunchError::Send)?;
    let first = match serde_json::from_slice(&verdict) {
        Ok(failure) => Report::Failed {
            pid: program,
            supervisor,
            failure,
        },
        Err(_) if verdict.is_empty() => Report::Started {
            pid: program,
            supervisor,
        },
        Err(err) => return Err(LaunchError::Verdict(err)),
    };
    Ok((tree, Some(first)))
}

/// The reports and orders of a supervisor's control socket, after `unread` (bytes of it read
/// already).
pub(crate) fn connect(control: tokio::net::UnixStream, unread: Vec<u8>) -> (Reports, Orders) {
    let (read_half, write) = control.into_split();
    (
        Reports(tokio::io::BufReader::new(std::io::Cursor::new(unread).chain(read_half)).lines()),
        Orders(std::sync::Mutex::new(Some(write))),
    )
}

impl Reports {
    /// The next report; None once the supervisor is gone (or says something unreadable).
    pub(crate) async fn next(&mut self) -> Option<Report> {
        let line = self.0.next_line().await.ok()??;
        Report::parse(&line)
    }
}

impl Orders {
    /// Kill the whole tree; the supervisor answers with `exited` (if not yet) and `gone`.
    pub(crate) fn kill(&self) {
        self.send(&Order::Kill.encode());
    }

    /// `signal` to the program's process group, while it has not exited.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        self.send(&Order::Signal(signal as u8).encode());
    }

    /// `signal` to every process of the tree.
    pub(crate) fn signal_tree(&self, signal: nix::sys::signal::Signal) {
        self.send(&Order::SignalTree(signal as u8).encode());
    }

    /// Hand the supervisor the daemon's ends of the stdio (see [`Hold`]).
    pub(crate) fn hold(&self, hold: Hold, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd as _;
        let message = Order::Hold(Some(hold)).encode();
        let raw: Vec<_> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let orders = self.0.lock().unwrap();
        let Some(orders) = &*orders else {
            return Ok(());
        };
        let socket: &tokio::net::UnixStream = orders.as_ref();
        // Small enough for an idle socket's buffer in one message.
        let sent = channel::send_fds(socket.as_fd(), &message, &raw)?;
        if sent < message.len() {
            return Err(std::io::Error::other("the supervisor's socket is full"));
        }
        Ok(())
    }

    /// Close the supervisor's copy of the stdin.
    pub(crate) fn close_stdin(&self) {
        self.send(&Order::CloseStdin.encode());
    }

    fn send(&self, order: &[u8]) {
        // An order's bytes always fit in an idle socket's buffer; a supervisor that is gone needs no
        // order. One sent just before the socket was taken back reaches the supervisor ahead
        // of its next launch, which skips it.
        if let Some(orders) = &*self.0.lock().unwrap() {
            let _ = orders.try_write(order);
        }
    }
}

/// Hands a plain supervisor whose tree is confirmed gone, and which reported it, back to the
/// pool for the next launch.
pub(crate) fn reuse(reports: Reports, orders: &Orders) {
    let Some(write) = orders.0.lock().unwrap().take() else {
        return;
    };
    let reader = reports.0.into_inner();
    // Anything read past the last report would be lost: such a supervisor is not reused.
    if !reader.buffer().is_empty() {
        return;
    }
    let (before, read) = reader.into_inner().into_inner();
    if before.position() < before.get_ref().len() as u64 {
        return;
    }
    if let Ok(control) = read.reunite(write) {
        pool::return_plain(control);
    }
}

/// A predecessor's supervisor, as a successor finds it.
pub(crate) struct Adoption {
    pub reports: Reports,
    pub orders: Orders,
    /// Which of the stdio it still held (none when it is gone).
    pub adopted: Adopted,
    pub held: Vec<OwnedFd>,
}

/// Connects to the orphaned supervisor `supervisor_pid` (any of this user's, when not known)
/// of the process in directory `dir`, named `name`, listening on its abstract socket (or, as an
/// older daemon's did, on the socket file in that directory) and takes over its tree. One that is gone left its last reports in
/// [`EXIT_RECORD`] (which the reports then are); with neither, the reports end at once (the
/// supervisor ended before the process could be seen to).
pub(crate) async fn adopt(
    dir: &crate::state_dir::Dir,
    name: &str,
    supervisor_pid: Option<i32>,
) -> Adoption {
    // An older daemon's supervisor listens on a file in the private directory: only the
    // abstract name needs its listener's identity checked.
    let found = match connect_abstract(&supervisor_socket(name)) {
        Ok(control) => Ok((control, supervisor_pid)),
        Err(_) => std::os::unix::net::UnixStream::connect(dir.through_fd(SUPERVISOR_SOCKET))
            .map(|control| (control, None)),
    };
    let taken = match found {
        Ok((control, supervisor_pid)) => take_over(control, supervisor_pid).await,
        Err(err) => Err(err.into()),
    };
    match taken {
        Ok(adoption) => adoption,
        Err(err) => {
            // As the supervisor would have sent them; a FIFO or device there is refused, not
            // waited on.
            let lines = dir.read(EXIT_RECORD).unwrap_or_else(|exit| {
                tracing::warn!("no supervisor ({err}) and no exit recorded ({exit})");
                Vec::new()
            });
            // A socket whose peer is gone: orders go nowhere, the reports are the recorded ones.
            let (ours, _) = tokio::net::UnixStream::pair().expect("a socket pair");
            let (reports, orders) = connect(ours, lines);
            Adoption {
                reports,
                orders,
                adopted: Adopted {
                    outputs: Vec::new(),
                    stdin: false,
                },
                held: Vec::new(),
            }
        }
    }
}

/// How long a supervisor that accepted a successor's connection has to answer it. One that is
/// gone refuses the connection at once; a live one answers as soon as it runs, which a loaded
/// machine may delay: given up on, its tree would be left to no daemon.
const ADOPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Why a predecessor's supervisor could not be taken over.
#[derive(Debug, thiserror::Error)]
enum TakeOverError {
    #[error("{0}")]
    Socket(#[from] std::io::Error),
    #[error("the supervisor did not answer")]
    Silent,
    #[error("the supervisor did not hand its tree over")]
    NotHandedOver,
    #[error("the supervisor's answer is too large")]
    TooLarge,
    #[error("the socket's listener is not the supervisor (pid {0:?}, user {1})")]
    Impostor(Option<i32>, u32),
}

/// Connects to the abstract socket `name` without waiting: a full backlog (anyone on the host
/// may connect to an abstract name) fails the connection rather than blocking the adoption.
fn connect_abstract(name: &str) -> std::io::Result<std::os::unix::net::UnixStream> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd as _;
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let fd = socket(AddressFamily::Unix, SockType::Stream, flags, None)?;
    connect(fd.as_raw_fd(), &UnixAddr::new_abstract(name.as_bytes())?)?;
    Ok(fd.into())
}

/// Takes the tree over from the supervisor on `control`: only if it runs as this daemon's
/// user and, when known, is `supervisor_pid` (an abstract socket's name can be taken by anyone
/// once its supervisor is gone, and stdin's bytes would go to whoever holds it).
async fn take_over(
    control: std::os::unix::net::UnixStream,
    supervisor_pid: Option<i32>,
) -> Result<Adoption, TakeOverError> {
    control.set_nonblocking(true)?;
    let mut control = tokio::net::UnixStream::from_std(control)?;
    let peer = control.peer_cred()?;
    // SAFETY: geteuid takes no arguments and cannot fail.
    let own = unsafe { libc::geteuid() };
    if peer.uid() != own || supervisor_pid.is_some_and(|pid| peer.pid() != Some(pid)) {
        return Err(TakeOverError::Impostor(peer.pid(), peer.uid()));
    }
    let mut first = [0u8; 1];
    let received = tokio::time::timeout(
        ADOPT_TIMEOUT,
        channel::recv_fds_async(&control, &mut first, 4),
    )
    .await
    .map_err(|_| TakeOverError::Silent)??;
    if received.bytes == 0 || !Answer::is_adopted(first[0]) {
        return Err(TakeOverError::NotHandedOver);
    }
    let len = control.read_u32_le().await? as usize;
    if len > 4096 {
        return Err(TakeOverError::TooLarge);
    }
    let mut frame = vec![0u8; len];
    control.read_exact(&mut frame).await?;
    let adopted = Answer::adopted(first[0], &frame).ok_or(TakeOverError::NotHandedOver)?;
    let (reports, orders) = connect(control, Vec::new());
    Ok(Adoption {
        reports,
        orders,
        adopted,
        held: received.fds,
    })
}
