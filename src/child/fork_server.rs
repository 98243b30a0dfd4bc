//! The fork server: the daemon's binary executed once (`exec-server __supervise`), before any
//! runtime or thread exists, which forks every plain supervisor and sandbox helper the daemon
//! orders ([`crate::ipc::message::Order::Fork`]). A fork of this small, single-threaded
//! process costs far less than an exec of the daemon's binary, and what it forks is as fresh.

use super::launch::{become_subreaper, become_workload, exit_for, supervise};
use super::signals::{block_sigchld, drain, own_pid, readable, shield_from_signals};
use crate::ipc::channel;
use crate::ipc::message::{Answer, Fork, Order, FORK_ORDER_BYTES};
use crate::os::proc_tree::children;
use crate::sandbox::plan::{Failure, NetworkMode, Stage, MAX_PLAN_BYTES};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

/// The fork server's life: shielded from stray signals, told what sandboxes hide, then serving
/// the daemon's fork orders until its EOF.
pub(super) fn main() -> ! {
    shield_from_signals();
    become_workload();
    let mut control = control_socket().unwrap_or_else(|failure| exit_for(&failure));
    // The daemon's first frame: the paths every sandbox helper forked here hides, and how
    // they enforce.
    let settings = channel::read_frame(&mut &control, MAX_PLAN_BYTES)
        .ok()
        .and_then(|frame| serde_json::from_slice(&frame).ok());
    let Some(settings) = settings else {
        std::process::exit(125);
    };
    crate::sandbox::HelperSettings::install(settings);
    let ready = Answer::Ready { program: None }.encode();
    // Its own session, so that nothing aimed at the daemon's group or terminal reaches it.
    // SAFETY: setsid takes no arguments and only changes this process's session.
    if unsafe { libc::setsid() } < 0 || control.write_all(&ready).is_err() {
        std::process::exit(125);
    }
    serve_forks(&control)
}

/// The fork server: for each [`Order::Fork`] of the daemon (the sockets with it), a fresh plain
/// supervisor or sandbox helper is forked. It reaps them, and exits at EOF (each sees its own
/// EOF and kills its tree).
///
/// It is also the child subreaper above every supervisor it forked: a supervisor that dies
/// anyway (SIGKILL from outside) leaves its tree to this process instead of init, and what
/// arrives here that was not forked here is such an orphaned tree member, killed at once. Each
/// one's death re-parents its own children here, so the tree is ended round by round; the
/// daemon has seen its control socket close and reported the exit.
fn serve_forks(control: &UnixStream) -> ! {
    let sigchld = block_sigchld();
    if !become_subreaper() {
        std::process::exit(125);
    }
    let mut forked = std::collections::HashSet::new();
    loop {
        let mut fds = [readable(control.as_raw_fd()), readable(sigchld.as_raw_fd())];
        // SAFETY: two valid pollfds, for as many entries as passed.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if fds[1].revents != 0 {
            drain(&sigchld);
            reap_and_kill_orphans(&mut forked);
        }
        if fds[0].revents == 0 {
            continue;
        }
        let Some(child) = receive_order(control) else {
            continue;
        };
        // SAFETY: this process is single-threaded, so the child may run anything.
        let pid = unsafe { libc::fork() };
        if pid > 0 {
            forked.insert(pid);
        } else if pid == 0 {
            drop(sigchld);
            turn_into(child, control)
        }
    }
}

/// Reaps what exited; kills what arrived here without being forked here (orphaned tree
/// members of a supervisor that died).
fn reap_and_kill_orphans(forked: &mut std::collections::HashSet<i32>) {
    loop {
        // SAFETY: waitpid with a null status pointer is allowed; statuses are not needed.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
        forked.remove(&pid);
    }
    for orphan in children(own_pid())
        .into_iter()
        .filter(|pid| !forked.contains(pid))
    {
        // SAFETY: kill takes no pointers; the pid is an unreaped child of this process, so it
        // cannot have been reused.
        unsafe { libc::kill(orphan, libc::SIGKILL) };
    }
}

/// The next fork order, with its sockets; None for one that is not (it is skipped). Exits at
/// the daemon's EOF.
fn receive_order(control: &UnixStream) -> Option<Child> {
    let mut request = [0u8; FORK_ORDER_BYTES];
    let received = match channel::recv_fds(control.as_fd(), &mut request, 2, false) {
        Ok(received) if received.bytes > 0 => received,
        _ => std::process::exit(0),
    };
    if (&*control)
        .read_exact(&mut request[received.bytes..])
        .is_err()
    {
        std::process::exit(0);
    }
    let Ok(Order::Fork(fork)) = Order::read(request[0], &mut &request[1..], true) else {
        return None;
    };
    let mut fds = received.fds.into_iter();
    match (fork, fds.next(), fds.next(), fds.next()) {
        (Fork::Supervisor, Some(socket), None, None) => Some(Child::Supervisor(socket)),
        (
            Fork::Helper {
                network,
                background,
            },
            Some(control),
            Some(launch),
            None,
        ) => Some(Child::Helper {
            network,
            background,
            control,
            launch,
        }),
        _ => None,
    }
}

/// In the forked child: drops what is the fork server's, and becomes `child`.
fn turn_into(child: Child, control: &UnixStream) -> ! {
    // SAFETY: the fork server's socket is not the child's to use (the descriptor is closed
    // once, here, and never used after); the signal set is a valid, emptied one (SIGCHLD was
    // blocked only for the fork server's signalfd, closed by the caller).
    unsafe {
        libc::close(control.as_raw_fd());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
    match child {
        Child::Supervisor(socket) => supervise(UnixStream::from(socket)),
        Child::Helper {
            network,
            background,
            control,
            launch,
        } => super::sandbox::serve(network, background, control, launch),
    }
}

/// What the fork server forks.
enum Child {
    /// A plain supervisor, with its control socket.
    Supervisor(OwnedFd),
    Helper {
        network: NetworkMode,
        background: bool,
        control: OwnedFd,
        launch: OwnedFd,
    },
}

/// The fork server's control socket, which the daemon passed as stdin, moved off it
/// (close-on-exec), with /dev/null in its place: no other copy of it stays open here, nor in
/// what is forked.
fn control_socket() -> Result<UnixStream, Failure> {
    let last_os = || Stage::Control.os(std::io::Error::last_os_error());
    // SAFETY: duplicating an inherited fd into a new one we then own.
    let socket = unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_DUPFD_CLOEXEC, 3) };
    if socket < 0 {
        return Err(last_os());
    }
    // SAFETY: the new fd is ours.
    let socket = unsafe { UnixStream::from_raw_fd(socket) };
    let null = std::fs::File::open("/dev/null").map_err(|err| Stage::Control.os(err))?;
    // SAFETY: replaces the inherited fd, whose socket is kept above.
    if unsafe { libc::dup2(null.as_raw_fd(), libc::STDIN_FILENO) } < 0 {
        return Err(last_os());
    }
    Ok(socket)
}
