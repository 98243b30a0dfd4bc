//! The per-process supervisor: the process that starts a managed program and holds its whole
//! tree until every process of it is gone.
//!
//! For a plain or PTY launch it is forked by the fork server, the daemon's own binary
//! re-executed once as `exec-server __supervise` (`crate::launcher::pool`; `main` dispatches
//! to [`super::main_if_supervisor`] before any runtime exists, so it is a single-threaded
//! process); it serves one launch after another, each once the previous tree
//! is confirmed gone, so a launch costs neither a fork nor an exit of a supervisor. For a
//! sandboxed launch it is the sandbox helper itself, pre-started, which forks the program's
//! process ahead of the launch ([`super::launch::fork_ahead`]); the daemon then talks to that process directly
//! for the launch and its verdict.
//! It is the child subreaper of its tree (`PR_SET_CHILD_SUBREAPER`): whatever in the tree
//! detaches (a new session, a double fork, `nohup`) is re-parented to it, never to init, so it
//! can find, kill and reap every member, and the rusage of everything it reaps is the tree's.
//!
//! A launch ([`crate::ipc::message::launch`]; to a plain supervisor on its control socket, to a sandboxed program's
//! process on its own socket): a marker byte with the program's stdio (SCM_RIGHTS, then the
//! `cgroup.procs` of each group the program joins, see `crate::launcher::cgroup`), then two
//! length-prefixed frames: the `ChildSetup` and the payload (a `PlainLaunch`, or the
//! sandbox plan). On the control socket (the daemon's end is the only other one) a supervisor
//! answers with [`Report`]s, one JSON object per line: `started` or `failed` (plain only),
//! `exited` when the program itself exits, `gone` when the whole tree is. Orders ([`Order`]) are a kill
//! (kill the tree, confirm), a signal for the program's process group or the whole tree, and
//! the stdio to hold. EOF means the daemon is gone: [`Supervisor::on_daemon_gone`].

use super::signals::{drain, own_pid, readable};
use crate::ipc::channel::{self, FrameError};
use crate::ipc::message::{Adopted, Answer, Hold, Order, OrderError, Report, EXIT_RECORD};
use crate::os::proc_tree::{children, descendants};
use exec_server_protocol::process::ProcessUsage;
use std::io::Write as _;
use std::os::fd::{AsFd as _, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Descriptors an order or a launch may carry, at most.
pub(super) const MAX_ORDER_FDS: usize = 8;

/// How long a kill order waits for the tree to be gone before it says it could not confirm.
const KILL_BOUND: Duration = Duration::from_secs(2);

/// What a supervisor holds, as received.
struct Held {
    hold: Hold,
    listener: std::os::unix::net::UnixListener,
    dir: crate::state_dir::Dir,
    files: Vec<std::fs::File>,
    /// None once at its end.
    outputs: Vec<Option<OwnedFd>>,
    stdin: Option<OwnedFd>,
}

/// The supervision of one launch's tree (see the module's documentation).
pub(super) struct Supervisor {
    /// To the daemon (a successor's, once adopted).
    control: UnixStream,
    sigchld: OwnedFd,
    leader: i32,
    /// The program's wait status, once reaped.
    leader_exit: Option<libc::c_int>,
    /// With a PID namespace of the launch's own, the leader is the namespace's init, which
    /// writes the program's status here when the program exits (`super::init`).
    program_status: Option<OwnedFd>,
    exit_reported: bool,
    usage: TreeUsage,
    held: Option<Held>,
}

impl Supervisor {
    /// Supervises the tree of the program `leader`, with SIGCHLD readable on `sigchld`.
    /// `program_status`: see [`super::init`].
    pub(super) fn new(
        control: UnixStream,
        sigchld: OwnedFd,
        leader: i32,
        program_status: Option<OwnedFd>,
    ) -> Self {
        Self {
            control,
            sigchld,
            leader,
            leader_exit: None,
            program_status,
            exit_reported: false,
            usage: TreeUsage::default(),
            held: None,
        }
    }

    /// Returns once the tree is confirmed gone, and both reports are sent.
    pub(super) fn serve(mut self) {
        loop {
            if !self.reap() {
                return self.gone(true);
            }
            if self.leader_exit.is_some() && !self.exit_reported {
                self.report_exit();
            }
            let status = self.program_status.as_ref().map_or(-1, AsRawFd::as_raw_fd);
            let mut fds = [
                readable(self.control.as_raw_fd()),
                readable(self.sigchld.as_raw_fd()),
                // Negative (none): poll skips it.
                readable(status),
            ];
            // SAFETY: three pollfds.
            if unsafe { libc::poll(fds.as_mut_ptr(), 3, -1) } < 0 {
                continue;
            }
            if fds[2].revents != 0 {
                self.take_program_status();
                continue;
            }
            if fds[1].revents != 0 {
                drain(&self.sigchld);
                // Reaped and reported first: an order that came with the exit (the stdio to
                // hold, for a program that is done already) waits its turn.
                continue;
            }
            if fds[0].revents != 0 {
                if let Some(Order::Kill) = self.take_order() {
                    return self.kill_and_confirm();
                }
            }
        }
    }

    /// Reads and carries out the daemon's next order; a kill is returned to the caller, which
    /// ends the serving loop with it.
    fn take_order(&mut self) -> Option<Order> {
        let mut marker = [0u8; 1];
        let received = channel::recv_fds(self.control.as_fd(), &mut marker, MAX_ORDER_FDS, false);
        let fds = match received {
            Ok(received) if received.bytes > 0 => received.fds,
            _ => {
                self.on_daemon_gone();
                return None;
            }
        };
        match Order::read(marker[0], &mut &self.control, false) {
            Ok(Order::Kill) => return Some(Order::Kill),
            Ok(Order::Hold(Some(hold))) => self.hold(hold, fds),
            Ok(Order::CloseStdin) => {
                if let Some(held) = &mut self.held {
                    held.stdin = None;
                }
            }
            Ok(Order::SignalTree(signal)) => {
                for pid in descendants(own_pid()) {
                    // SAFETY: kill takes no pointers; the pid is of this tree (one reaped
                    // meanwhile can only be ours to reap, so it is not reused).
                    unsafe { libc::kill(pid, libc::c_int::from(signal)) };
                }
            }
            Ok(Order::Signal(signal)) if self.leader_exit.is_none() => {
                // SAFETY: kill takes no pointers; the group is the unreaped program's.
                unsafe { libc::kill(-self.leader, libc::c_int::from(signal)) };
            }
            Err(OrderError::Frame(FrameError::Io(_))) => self.on_daemon_gone(),
            // Not for a running tree, or not an order: ignored.
            Ok(_) | Err(_) => {}
        }
        None
    }

    /// The daemon ended, without an order (even by SIGKILL). A tree whose stdio the supervisor
    /// holds waits for a successor ([`Self::orphaned`]); any other dies with the daemon.
    fn on_daemon_gone(&mut self) {
        if self.held.is_none() {
            self.kill_tree(None);
            std::process::exit(0)
        }
        self.orphaned();
    }

    fn hold(&mut self, hold: Hold, fds: Vec<OwnedFd>) {
        if hold.fds() != fds.len() {
            return;
        }
        let streams = hold.streams();
        let mut fds = fds.into_iter();
        let listener: std::os::unix::net::UnixListener = fds.next().expect("counted").into();
        // Listening again stamps the socket with this process's credentials, which is how a
        // successor tells the supervisor its meta names from whoever else could take the
        // abstract name (the credentials were the daemon's that bound it).
        // SAFETY: listen on a listening socket we hold; it only updates its backlog and owner.
        unsafe { libc::listen(listener.as_raw_fd(), 128) };
        let dir = fds.next().expect("counted").into();
        let files = fds.by_ref().take(streams).map(Into::into).collect();
        let outputs = fds.by_ref().take(streams).map(Some).collect();
        // A terminal's master is its stdin too.
        let stdin = fds.next();
        self.held = Some(Held {
            hold,
            listener,
            dir,
            files,
            outputs,
            stdin,
        });
    }

    /// Orphaned: keeps moving the tree's output into the stream files (up to the bound, while
    /// the tree runs) until a successor daemon connects, which it then serves as its own; or,
    /// once the tree is gone and its output ended, records its last reports ([`EXIT_RECORD`]) for the
    /// successor to find, and exits.
    fn orphaned(&mut self) {
        let held = self.held.as_mut().expect("checked by the caller");
        // A terminal's bytes pass through it.
        let mut buffer = Vec::new();
        let bounds: Vec<u64> = held
            .files
            .iter()
            .map(|file| file.metadata().map_or(0, |m| m.len()) + held.hold.max_tail)
            .collect();
        loop {
            let tree_gone = !self.reap();
            let held = self.held.as_mut().expect("checked above");
            if tree_gone && held.outputs.iter().all(Option::is_none) {
                self.record_end();
            }
            let mut fds = vec![
                readable(held.listener.as_raw_fd()),
                readable(self.sigchld.as_raw_fd()),
            ];
            // Output beyond the bound waits in its pipe while the tree runs (backpressure);
            // once the tree is gone, what is left is taken to the end.
            for (index, output) in held.outputs.iter().enumerate() {
                let below = held.files[index].metadata().map_or(0, |m| m.len()) < bounds[index];
                fds.push(readable(match output {
                    Some(fd) if below || tree_gone => fd.as_raw_fd(),
                    _ => -1,
                }));
            }
            // SAFETY: valid pollfds; negative descriptors are skipped.
            if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
                continue;
            }
            if fds[1].revents != 0 {
                drain(&self.sigchld);
            }
            for (index, polled) in fds[2..].iter().enumerate() {
                if polled.revents != 0 {
                    move_output(held, index, &mut buffer);
                }
            }
            if fds[0].revents != 0 {
                if let Some(control) = accept_successor(&held.listener) {
                    return self.adopted_by(control);
                }
            }
        }
    }

    /// Hands the held stdio to the successor on `control`, which is the daemon from now on;
    /// the reports it needs follow from the serving loop (the exit again: the predecessor may
    /// not have kept it).
    fn adopted_by(&mut self, control: UnixStream) {
        let held = self.held.as_ref().expect("adopted only when holding");
        let adopted = Adopted {
            outputs: held.outputs.iter().map(Option::is_some).collect(),
            stdin: held.stdin.is_some(),
        };
        let fds: Vec<RawFd> = held
            .outputs
            .iter()
            .flatten()
            .chain(&held.stdin)
            .map(AsRawFd::as_raw_fd)
            .collect();
        let message = Answer::Adopted(adopted).encode();
        if channel::send_all_with_fds(&control, &message, &fds).is_err() {
            return self.orphaned();
        }
        self.control = control;
        self.exit_reported = false;
    }

    /// The tree is gone and its output taken: its last reports go where a successor finds
    /// them, as the control socket would have carried them.
    fn record_end(&mut self) -> ! {
        let gone = Report::Gone {
            confirmed: true,
            usage: self.usage.report(),
        };
        self.exit_reported = false;
        let exit = self.exit_report();
        let held = self.held.as_ref().expect("recorded only when holding");
        let partial = "exit.partial";
        let lines = Report::lines([Some(gone), exit].iter().flatten());
        if held.dir.write(partial, &lines).is_ok() {
            let _ = held.dir.rename(partial, EXIT_RECORD);
        }
        std::process::exit(0)
    }

    fn kill_and_confirm(&mut self) {
        let confirmed = self.kill_tree(Some(Instant::now() + KILL_BOUND));
        self.gone(confirmed);
    }

    /// Reports the tree gone, then the program's exit, so that the daemon knows the tree's fate
    /// when it reports the exit. Without confirmation, it kills the tree to the end and exits:
    /// such a supervisor serves no other launch.
    fn gone(&mut self, confirmed: bool) {
        let usage = self.usage.report();
        // One write: the daemon wakes once for both.
        let gone = Report::Gone { confirmed, usage };
        let exit = self.exit_report();
        report_all(&self.control, [Some(gone), exit].iter().flatten());
        if !confirmed {
            self.kill_tree(None);
            // A program that was reaped only now.
            self.report_exit();
            std::process::exit(0)
        }
    }

    fn report_exit(&mut self) {
        if let Some(exit) = self.exit_report() {
            report(&self.control, &exit);
        }
    }

    /// The `exited` report, once the program was reaped, if not made yet.
    fn exit_report(&mut self) -> Option<Report> {
        if self.exit_reported {
            return None;
        }
        let status = self.leader_exit?;
        self.exit_reported = true;
        let (code, signal) = if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            (128 + signal, Some(signal))
        } else {
            (libc::WEXITSTATUS(status), None)
        };
        let usage = self.usage.report();
        Some(Report::Exited {
            code,
            signal,
            usage,
        })
    }

    /// Reaps every exited child, adding up its usage. Returns false once none is left.
    fn reap(&mut self) -> bool {
        loop {
            let mut status = 0;
            // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: both out-pointers are to live locals of the right types.
            let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
            match pid {
                0 => return true,
                p if p < 0 => {
                    return std::io::Error::last_os_error().raw_os_error() != Some(libc::ECHILD)
                }
                p => {
                    if p == self.leader {
                        // An init's own status, only when it wrote none for the program.
                        self.take_program_status();
                        self.leader_exit.get_or_insert(status);
                    }
                    self.usage.add(&usage);
                }
            }
        }
    }

    /// The program's status from the init of its PID namespace, if it wrote it; the pipe is
    /// done with either way (the init writes once, and its end closes with it).
    fn take_program_status(&mut self) {
        if let Some(status) = self.program_status.take() {
            if let Some(status) = super::init::read_status(&status) {
                self.leader_exit.get_or_insert(status);
            }
        }
    }

    /// SIGKILLs every process of the tree until none is left, or the deadline passes (false).
    /// A killed process's children are re-parented here, so each round reaches further; the
    /// process groups of the children reach members that have not been re-parented yet.
    fn kill_tree(&mut self, deadline: Option<Instant>) -> bool {
        // SAFETY: getpgrp takes no arguments and cannot fail.
        let own_group = unsafe { libc::getpgrp() };
        loop {
            for child in children(own_pid()) {
                // SAFETY: getpgid and kill take integers only; the pids are our own unreaped
                // children, so none can have been reused.
                unsafe {
                    let group = libc::getpgid(child);
                    if group > 0 && group != own_group {
                        libc::kill(-group, libc::SIGKILL);
                    }
                    libc::kill(child, libc::SIGKILL);
                }
            }
            if !self.reap() {
                return true;
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Moves what output `index` has into the end of its file (an orphan's: no daemon takes it);
/// at its end, or when the file cannot take more, the output is closed.
fn move_output(held: &mut Held, index: usize, buffer: &mut Vec<u8>) {
    let Some(output) = &held.outputs[index] else {
        return;
    };
    let file = &held.files[index];
    let end = file.metadata().map_or(0, |m| m.len());
    match crate::os::pipe::move_into(output, !held.hold.tty, file, end, buffer) {
        Ok(0) => held.outputs[index] = None,
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(_) => held.outputs[index] = None,
    }
}

/// A successor daemon on the listener: a peer of this user that is not inside a sandbox (a
/// sandboxed process runs as the same user, and must never take over a tree).
fn accept_successor(listener: &std::os::unix::net::UnixListener) -> Option<UnixStream> {
    let (socket, _) = listener.accept().ok()?;
    let peer =
        nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    // SAFETY: geteuid takes no arguments and cannot fail.
    let own = unsafe { libc::geteuid() };
    if peer.uid() != own || crate::sandbox::peers::runs_in_sandbox(peer.pid()) {
        return None;
    }
    socket.set_nonblocking(false).ok()?;
    Some(socket)
}

/// The usage of one launch's tree as reaped so far: everything the tree ran is reaped here,
/// directly or by an ancestor that was, and a reaped process's usage includes that of the
/// descendants it reaped. Counted per launch, since a plain supervisor serves many.
#[derive(Clone, Copy, Default)]
struct TreeUsage {
    user_us: u64,
    system_us: u64,
    max_rss_kib: u64,
}

impl TreeUsage {
    fn add(&mut self, reaped: &libc::rusage) {
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        self.user_us += us(reaped.ru_utime);
        self.system_us += us(reaped.ru_stime);
        self.max_rss_kib = self.max_rss_kib.max(reaped.ru_maxrss as u64);
    }

    fn report(self) -> ProcessUsage {
        ProcessUsage {
            user_cpu_ms: self.user_us / 1000,
            system_cpu_ms: self.system_us / 1000,
            max_rss_kib: self.max_rss_kib,
            wall_ms: 0,
        }
    }
}

/// Reports one thing to the daemon.
pub(super) fn report(control: &UnixStream, report: &Report) {
    report_all(control, std::iter::once(report));
}

/// Reports, one line each, in one write.
pub(super) fn report_all<'a>(mut control: &UnixStream, reports: impl Iterator<Item = &'a Report>) {
    // A daemon that is gone reads nothing; its EOF is handled by the loop.
    let _ = control.write_all(&Report::lines(reports));
}
