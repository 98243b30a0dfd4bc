//! Upgrading without a restart (SIGUSR2, `exec-server upgrade`): the running daemon starts a
//! successor from the binary now at its own path, with the same arguments and environment, and
//! hands it the listening socket, so that no connection attempt is ever refused: while neither
//! accepts, connections wait in the socket's backlog.
//!
//! 1. The daemon starts the successor with its listener inherited (its descriptor number in
//!    [`LISTEN_FD_VAR`]), the writing end of a pipe ([`READY_FD_VAR`]) and its own pid
//!    ([`FROM_VAR`]); it goes on serving.
//! 2. The successor checks its configuration and that the socket is the listener its
//!    `--listen` names, writes one byte to the pipe, and waits until the predecessor has exited
//!    ([`Predecessor::take_over`]): one daemon at a time owns the sessions and processes.
//! 3. At that byte the predecessor stops accepting, closes its connections with 1012 (service
//!    restart) so clients reconnect and resume, flushes the audit log and exits
//!    ([`hand_over_and_exit`]). A successor that fails before the byte leaves it serving.

use crate::pidfd::Pidfd;
use crate::server::Daemon;
use std::ffi::OsString;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;

/// In a successor: the inherited listening socket's descriptor.
pub(crate) const LISTEN_FD_VAR: &str = "EXEC_SERVER_LISTEN_FD";
/// In a successor: the pipe on which it says it is ready.
pub(crate) const READY_FD_VAR: &str = "EXEC_SERVER_UPGRADE_READY_FD";
/// In a successor: its predecessor's pid.
pub(crate) const FROM_VAR: &str = "EXEC_SERVER_UPGRADE_FROM";

/// How long the predecessor waits for its successor's readiness before it gives up (and kills
/// it).
const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long the predecessor gives its connections to close.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// How long the successor waits for its predecessor to exit before it kills it: the
/// predecessor gave up the listener already, so a hung one only keeps everyone waiting.
const EXIT_LIMIT: Duration = Duration::from_secs(30);
const KILL_LIMIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub(crate) enum HandoverError {
    #[error(
        "{LISTEN_FD_VAR}, {READY_FD_VAR} and {FROM_VAR} are set by an upgrading daemon, all three"
    )]
    Incomplete,
    #[error("{var}={value:?} is not a usable descriptor or pid")]
    BadVar { var: &'static str, value: OsString },
    #[error("{var}: descriptor {fd} is not open: {source}")]
    NotOpen {
        var: &'static str,
        fd: RawFd,
        source: std::io::Error,
    },
    #[error(
        "{FROM_VAR}={from} is not this process's parent ({parent}): not started by an upgrade"
    )]
    NotFromParent { from: i32, parent: i32 },
    #[error("the inherited socket is not the listener of --listen {listen}: {why}")]
    NotTheListener { listen: String, why: String },
    #[error("--listen stdio cannot take over a listening socket")]
    Stdio,
    #[error(
        "cannot tell pid {pid} that this successor is ready (it gave the upgrade up): {source}"
    )]
    ReadySignal { pid: i32, source: std::io::Error },
    #[error("pid {pid} is still running after the hand-over, even after SIGKILL")]
    PredecessorStayed { pid: i32 },
    #[error("the daemon's own binary was not found at its start")]
    NoOwnBinary,
    #[error(
        "refusing to run the successor {}: {why}, so another user could have put it there \
         (an upgrade runs only a binary that root or this daemon's user placed; see \
         --upgrade-from-start-binary)",
        path.display()
    )]
    Untrusted { path: PathBuf, why: String },
    #[error("cannot start the successor {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the successor exited before it was ready ({0})")]
    SuccessorExited(std::process::ExitStatus),
    #[error("the successor was not ready within {READY_LIMIT:?}; killed it")]
    SuccessorSilent,
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What `main` captures for upgrades before any thread exists.
pub struct Handover {
    /// The daemon's own binary by the path it was started from: an upgrade runs whatever
    /// binary is at that path then (`/proc/self/exe` would be the old, replaced one).
    own_binary: Option<PathBuf>,
    /// With `--upgrade-from-start-binary`: the running binary, opened at start, which an
    /// upgrade executes in place of the one at `own_binary`.
    start_binary: Option<std::fs::File>,
    /// Where the daemon started, against which relative arguments were meant.
    cwd: Option<PathBuf>,
    /// In a successor: what the predecessor passed.
    inherited: Result<Option<Inherited>, HandoverError>,
}

/// What a successor inherited.
pub(super) struct Inherited {
    pub listener: OwnedFd,
    pub predecessor: Predecessor,
}

impl Handover {
    /// Records the own binary (and opens it, `from_start_binary`) and takes what a predecessor
    /// passed, removing its variables from the environment (managed processes inherit the
    /// daemon's). Call before any thread starts.
    pub fn capture(from_start_binary: bool) -> Self {
        let cwd = std::env::current_dir().ok();
        let own_binary = own_binary(cwd.as_deref());
        let inherited = inherited();
        if matches!(inherited, Ok(Some(_))) {
            name_after(own_binary.as_deref());
        }
        Self {
            own_binary,
            // Close-on-exec (std's default): no child but the successor's exec sees it.
            start_binary: from_start_binary
                .then(|| std::fs::File::open("/proc/self/exe").ok())
                .flatten(),
            cwd,
            inherited,
        }
    }

    pub(super) fn take_inherited(&mut self) -> Result<Option<Inherited>, HandoverError> {
        std::mem::replace(&mut self.inherited, Ok(None))
    }
}

/// The path the binary was started from (`argv[0]` made absolute, or found on PATH), if it is
/// the running binary; else the running binary's own path. Not canonicalized: a symlink that
/// an upgrade repoints is followed then.
fn own_binary(cwd: Option<&Path>) -> Option<PathBuf> {
    let running = std::fs::metadata("/proc/self/exe").ok()?;
    let is_running = |path: &Path| {
        std::fs::metadata(path)
            .is_ok_and(|found| (found.dev(), found.ino()) == (running.dev(), running.ino()))
    };
    let absolute = |path: PathBuf| match cwd {
        Some(cwd) => cwd.join(path),
        None => path,
    };
    let argv0 = PathBuf::from(std::env::args_os().next()?);
    let candidates: Vec<PathBuf> = if argv0.components().count() > 1 {
        vec![absolute(argv0)]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| absolute(dir.join(&argv0)))
            .collect()
    };
    candidates
        .into_iter()
        .find(|path| path.is_absolute() && is_running(path))
        .or_else(|| std::fs::read_link("/proc/self/exe").ok())
}

/// A successor was executed through a descriptor (`/proc/self/fd/N`), which names the
/// process `N`: it takes its binary's name back, by which `exec-server upgrade`, `ps` and
/// `pkill` know it.
fn name_after(binary: Option<&Path>) {
    let name = binary
        .and_then(Path::file_name)
        .map(std::os::unix::ffi::OsStrExt::as_bytes);
    if let Ok(name) = std::ffi::CString::new(name.unwrap_or(b"exec-server")) {
        // SAFETY: a NUL-terminated name; the kernel keeps its first 15 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
}

/// Opens the successor's binary for its exec, refusing one that a user other than root and
/// this daemon's could have put at `path`: the file, or a directory on the way to it (on the
/// path as configured and on its resolution), owned by another uid or writable by group or
/// others. A sticky directory (`/tmp`) may be writable by all: only the owner of an entry may
/// rename or remove it there, and the entry's owner is checked in turn. The caller executes
/// the descriptor, so the file checked is the file run.
fn open_trusted(path: &Path) -> Result<std::fs::File, HandoverError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let untrusted = |why: String| HandoverError::Untrusted {
        path: path.to_owned(),
        why,
    };
    let own = nix::unistd::geteuid().as_raw();
    let check = |at: &Path, meta: &std::fs::Metadata| {
        if meta.uid() != 0 && meta.uid() != own {
            return Err(untrusted(format!(
                "{} is owned by uid {}",
                at.display(),
                meta.uid()
            )));
        }
        let sticky_dir = meta.is_dir() && meta.mode() & libc::S_ISVTX != 0;
        let writable = meta.mode() & (libc::S_IWGRP | libc::S_IWOTH);
        if writable != 0 && !sticky_dir && !meta.file_type().is_symlink() {
            let who = if writable & libc::S_IWOTH != 0 {
                "others"
            } else {
                "its group"
            };
            return Err(untrusted(format!(
                "{} is writable by {who} (mode {:o})",
                at.display(),
                meta.mode() & 0o7777
            )));
        }
        Ok(())
    };
    let resolved = std::fs::canonicalize(path).map_err(|err| untrusted(err.to_string()))?;
    // Each component as configured (a symbolic link's owner may repoint it) and as resolved.
    for walked in [path, resolved.as_path()] {
        for at in walked.ancestors() {
            let meta = std::fs::symlink_metadata(at).map_err(|err| untrusted(err.to_string()))?;
            check(at, &meta)?;
        }
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&resolved)
        .map_err(|err| untrusted(err.to_string()))?;
    check(&resolved, &file.metadata()?)?;
    Ok(file)
}

fn inherited() -> Result<Option<Inherited>, HandoverError> {
    let values = [LISTEN_FD_VAR, READY_FD_VAR, FROM_VAR].map(std::env::var_os);
    for var in [LISTEN_FD_VAR, READY_FD_VAR, FROM_VAR] {
        std::env::remove_var(var);
    }
    let [listen, ready, from] = match values {
        [None, None, None] => return Ok(None),
        [Some(listen), Some(ready), Some(from)] => [listen, ready, from],
        _ => return Err(HandoverError::Incomplete),
    };
    let number = |var: &'static str, value: OsString| {
        value
            .to_str()
            .and_then(|text| text.parse::<i32>().ok())
            .filter(|n| *n > 2)
            .ok_or(HandoverError::BadVar { var, value })
    };
    let listener = own_fd(LISTEN_FD_VAR, number(LISTEN_FD_VAR, listen)?)?;
    let ready = own_fd(READY_FD_VAR, number(READY_FD_VAR, ready)?)?;
    let from = number(FROM_VAR, from)?;
    let parent_is_from = || {
        let parent = nix::unistd::getppid().as_raw();
        if parent == from {
            Ok(())
        } else {
            Err(HandoverError::NotFromParent { from, parent })
        }
    };
    parent_is_from()?;
    let pidfd = crate::pidfd::open_owned(from)?;
    // Still the parent, so the pidfd is its: one that exited meanwhile would have made this
    // process an orphan, with another parent pid.
    parent_is_from()?;
    Ok(Some(Inherited {
        listener,
        predecessor: Predecessor {
            pid: from,
            ready,
            pidfd,
        },
    }))
}

/// Takes the inherited descriptor `fd`, closed on exec from now on: the processes this daemon
/// starts must not hold its listener.
fn own_fd(var: &'static str, fd: RawFd) -> Result<OwnedFd, HandoverError> {
    // SAFETY: fcntl(F_SETFD) takes integers only; it fails on a descriptor that is not open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        let source = std::io::Error::last_os_error();
        return Err(HandoverError::NotOpen { var, fd, source });
    }
    // SAFETY: an open descriptor that nothing else in this process owns (it was inherited).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The inherited socket as the TCP listener of `listen` (its address; any port for port 0).
pub(super) fn tcp_listener(
    fd: OwnedFd,
    listen: SocketAddr,
) -> Result<tokio::net::TcpListener, HandoverError> {
    let wrong = |why: String| HandoverError::NotTheListener {
        listen: listen.to_string(),
        why,
    };
    check_listening(&fd).map_err(wrong)?;
    let listener = std::net::TcpListener::from(fd);
    let local = listener
        .local_addr()
        .map_err(|err| wrong(format!("not a TCP socket ({err})")))?;
    if local.ip() != listen.ip() || (listen.port() != 0 && local.port() != listen.port()) {
        return Err(wrong(format!("it is bound to {local}")));
    }
    listener.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}

/// The inherited socket as the Unix listener at `path`.
pub(super) fn unix_listener(
    fd: OwnedFd,
    path: &Path,
) -> Result<std::os::unix::net::UnixListener, HandoverError> {
    let wrong = |why: String| HandoverError::NotTheListener {
        listen: format!("unix://{}", path.display()),
        why,
    };
    check_listening(&fd).map_err(wrong)?;
    let listener = std::os::unix::net::UnixListener::from(fd);
    let local = listener
        .local_addr()
        .map_err(|err| wrong(format!("not a Unix socket ({err})")))?;
    if local.as_pathname() != Some(path) {
        return Err(wrong(format!("it is bound to {local:?}")));
    }
    Ok(listener)
}

fn check_listening(fd: &OwnedFd) -> Result<(), String> {
    match nix::sys::socket::getsockopt(fd, nix::sys::socket::sockopt::AcceptConn) {
        Ok(true) => Ok(()),
        Ok(false) => Err("it does not listen".into()),
        Err(errno) => Err(format!("not a socket ({errno})")),
    }
}

/// A successor's predecessor: the daemon that started it, still serving.
pub(super) struct Predecessor {
    pid: i32,
    ready: OwnedFd,
    pidfd: OwnedFd,
}

impl Predecessor {
    /// Says this successor is ready (its configuration and listener checked), then waits
    /// until the predecessor has exited; only then may this daemon touch sessions, processes
    /// and the state they keep.
    pub(super) async fn take_over(self) -> Result<(), HandoverError> {
        let pid = self.pid;
        std::fs::File::from(self.ready)
            .write_all(b"R")
            .map_err(|source| HandoverError::ReadySignal { pid, source })?;
        tracing::info!("told pid {pid} that this successor is ready; waiting for it to exit");
        let predecessor = Pidfd::from_fd(self.pidfd)?;
        if tokio::time::timeout(EXIT_LIMIT, predecessor.exited())
            .await
            .is_err()
        {
            tracing::warn!(
                "pid {pid} did not exit within {EXIT_LIMIT:?} of the hand-over; killing it"
            );
            let _ = predecessor.signal(libc::SIGKILL);
            tokio::time::timeout(KILL_LIMIT, predecessor.exited())
                .await
                .map_err(|_| HandoverError::PredecessorStayed { pid })?;
        }
        tracing::info!("pid {pid} has exited; taking over");
        Ok(())
    }
}

/// A successor that said it is ready.
pub(super) struct Successor {
    child: tokio::process::Child,
    pid: i32,
}

/// SIGUSR2, which asks for an upgrade: listened for before the banner, so that no request
/// meets the default action (the end of the daemon).
pub(super) fn requests() -> std::io::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
}

/// Resolves with a ready successor once one of `requests` asked for one and one started; a
/// successor that fails is logged and the daemon goes on serving. `listener` is None on stdio,
/// which cannot be handed over.
pub(super) async fn successor_on_signal(
    handover: &Handover,
    mut requests: tokio::signal::unix::Signal,
    listener: Option<BorrowedFd<'_>>,
) -> Successor {
    loop {
        requests.recv().await;
        let Some(listener) = listener else {
            tracing::warn!(
                "received SIGUSR2, but a daemon without a listener (stdio, or remote mode alone) \
                 cannot be upgraded; ignored"
            );
            continue;
        };
        let binary = handover.own_binary.as_deref().unwrap_or(Path::new("?"));
        tracing::info!(
            "received SIGUSR2; starting the successor {} with this daemon's listener",
            binary.display()
        );
        match start_successor(handover, listener).await {
            Ok(successor) => return successor,
            Err(err) => tracing::error!("upgrade failed; this daemon goes on serving: {err}"),
        }
    }
}

async fn start_successor(
    handover: &Handover,
    listener: BorrowedFd<'_>,
) -> Result<Successor, HandoverError> {
    let binary = handover
        .own_binary
        .clone()
        .ok_or(HandoverError::NoOwnBinary)?;
    // The successor is executed through a descriptor (the kernel resolves `/proc/self/fd/N`
    // before it closes the close-on-exec ones): the file checked, or the one started from.
    let checked;
    let executable = match &handover.start_binary {
        Some(start) => start,
        None => {
            checked = open_trusted(&binary)?;
            &checked
        }
    };
    let (ready, ready_writer) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let command = successor_command(handover, executable, listener, ready_writer.as_fd());
    let mut command = tokio::process::Command::from(command);
    // A start abandoned (SIGTERM while waiting) ends the successor too.
    command.kill_on_drop(true);
    // The fork waits for the exec: off the async workers.
    let child = tokio::task::spawn_blocking(move || command.spawn())
        .await
        .map_err(std::io::Error::other)?
        .map_err(|source| HandoverError::Spawn {
            path: binary,
            source,
        })?;
    drop(ready_writer);
    wait_ready(child, ready).await
}

/// The command that runs `executable` as this daemon's successor, with its arguments and
/// environment, `listener` and the `ready` pipe inherited and the variables naming them.
fn successor_command(
    handover: &Handover,
    executable: &std::fs::File,
    listener: BorrowedFd<'_>,
    ready: BorrowedFd<'_>,
) -> std::process::Command {
    use std::os::unix::process::CommandExt as _;
    let program = PathBuf::from(format!("/proc/self/fd/{}", executable.as_raw_fd()));
    let inherited = [listener.as_raw_fd(), ready.as_raw_fd()];
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(program);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command
        .args(args)
        .env(LISTEN_FD_VAR, inherited[0].to_string())
        .env(READY_FD_VAR, inherited[1].to_string())
        .env(FROM_VAR, std::process::id().to_string());
    if let Some(cwd) = &handover.cwd {
        command.current_dir(cwd);
    }
    // SAFETY: only fcntl, async-signal-safe, in the child between fork and exec. The child's
    // copies are made inheritable; the daemon's stay close-on-exec.
    unsafe {
        command.pre_exec(move || {
            for fd in inherited {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command
}

/// Waits (bounded) for the successor `child` to say on `ready` that it is ready; one that
/// exits or stays silent instead is a failed upgrade.
async fn wait_ready(
    mut child: tokio::process::Child,
    ready: OwnedFd,
) -> Result<Successor, HandoverError> {
    let pid = child.id().map_or(-1, |pid| pid as i32);
    tracing::info!("started the successor, pid {pid}; waiting until it is ready");
    let mut ready = tokio::net::unix::pipe::Receiver::from_owned_fd(ready)?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(READY_LIMIT, ready.read(&mut byte)).await {
        Ok(Ok(1)) => Ok(Successor { child, pid }),
        // It closed the pipe without the byte: it exited, most likely.
        Ok(_) => {
            let status = match tokio::time::timeout(Duration::from_secs(1), child.wait()).await {
                Ok(status) => status?,
                Err(_) => {
                    child.kill().await?;
                    child.wait().await?
                }
            };
            Err(HandoverError::SuccessorExited(status))
        }
        Err(_) => {
            child.kill().await?;
            Err(HandoverError::SuccessorSilent)
        }
    }
}

/// The predecessor's end of an upgrade, once `successor` is ready (the accept loop is gone
/// already): closes the connections with 1012 so clients reconnect (to the successor, through
/// the backlog) and resume, leaving their sessions as they are, flushes the audit log, and
/// exits without killing the managed processes: their supervisors outlive this process, and
/// the successor adopts them and the sessions from the state dir. Never runs the socket's
/// removal (`UnixSocket`'s drop): the file is the successor's now.
///
/// Whatever else the successor would need from this daemon is to be written out here, after
/// the connections closed and before the flush.
pub(super) async fn hand_over_and_exit(
    successor: Successor,
    connections: &super::ws::Connections,
    daemon: &Daemon,
) -> ! {
    let pid = successor.pid;
    // Dropped, it would be killed (see kill_on_drop above).
    std::mem::forget(successor.child);
    tracing::info!("the successor, pid {pid}, is ready; stopped accepting connections");
    daemon.sessions.hand_over();
    let closed = connections.close_for_restart(CLOSE_LIMIT).await;
    tracing::info!("closed {closed} connection(s) with 1012 (service restart)");
    daemon.audit.flush(super::AUDIT_FLUSH_LIMIT).await;
    super::systemd::notify_handed_over(pid as u32);
    tracing::info!("handed over to pid {pid}; exiting");
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen(addr: &str) -> SocketAddr {
        addr.parse().unwrap()
    }

    #[tokio::test]
    async fn only_the_listener_of_listen_is_taken_over() {
        let tcp = || OwnedFd::from(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        assert!(tcp_listener(tcp(), listen("127.0.0.1:0")).is_ok());
        let bound = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = bound.local_addr().unwrap().port();
        let exact = listen(&format!("127.0.0.1:{port}"));
        assert!(tcp_listener(OwnedFd::from(bound), exact).is_ok());
        let other_ip = tcp_listener(tcp(), listen("0.0.0.0:0")).unwrap_err();
        assert!(
            other_ip.to_string().contains("it is bound to 127.0.0.1:"),
            "{other_ip}"
        );
        assert!(tcp_listener(tcp(), exact).is_err(), "another port");
        let udp = OwnedFd::from(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
        let not_listening = tcp_listener(udp, listen("127.0.0.1:0")).unwrap_err();
        assert!(not_listening.to_string().ends_with("it does not listen"));
        let file = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let not_a_socket = tcp_listener(file, listen("127.0.0.1:0")).unwrap_err();
        assert!(not_a_socket.to_string().contains("not a socket"));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exec.sock");
        let unix = || OwnedFd::from(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let socket = unix();
        assert!(tcp_listener(socket.try_clone().unwrap(), listen("127.0.0.1:0")).is_err());
        assert!(unix_listener(socket.try_clone().unwrap(), &path).is_ok());
        let elsewhere = unix_listener(socket, &dir.path().join("other.sock")).unwrap_err();
        assert!(
            elsewhere.to_string().contains("it is bound to"),
            "{elsewhere}"
        );
    }
}
