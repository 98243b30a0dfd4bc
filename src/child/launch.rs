//! A program's launch, in the child: receiving it ([`receive`]), forking the program's process
//! (ahead of its launch for a sandbox helper: [`fork_ahead`]), entering its stdio, session and
//! cgroups, and the plain exec; and how a failed one is reported and exited.

use super::signals::{block_sigchld, internal_signals, own_pid, sigchld_mask};
use super::supervisor::{report, Supervisor, MAX_ORDER_FDS};
use crate::ipc::channel;
use crate::ipc::message::{self, ChildSetup, Order, OrderError, PlainLaunch, Report};
use crate::sandbox::plan::{Failure, Stage};
use std::ffi::CString;
use std::io::{Read, Write as _};
use std::os::fd::{AsFd as _, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// A forked plain supervisor: its own session, the subreaper of its trees, one launch after
/// another. It is handed back to the daemon's pool once a tree is confirmed gone, so a
/// launch costs neither a fork nor an exit of a supervisor (a few hundred µs each here).
pub(super) fn supervise(control: UnixStream) -> ! {
    // SAFETY: setsid takes no arguments and only changes this process's session.
    if unsafe { libc::setsid() } < 0 || !become_subreaper() {
        refuse(
            &control,
            Stage::Supervisor.os(std::io::Error::last_os_error()),
        );
    }
    loop {
        let (stdio, setup, payload) =
            receive(&control).unwrap_or_else(|failure| refuse(&control, failure));
        let launch: PlainLaunch = serde_json::from_slice(&payload)
            .unwrap_or_else(|err| refuse(&control, Stage::Launch.fail(err)));
        let simple = !setup.tty
            && stdio.len() == 3
            && setup.max_open_files.is_none()
            && setup.max_cpu_seconds.is_none()
            && setup.run_as.is_none();
        if simple {
            spawn_plain(&control, stdio, &launch)
        } else {
            run(&control, stdio, &setup, &payload, |setup, _| {
                exec_plain(&launch, setup)
            })
        }
    }
}

/// The common launch (pipes, no limits) needs nothing done between fork and exec but a new
/// process group, so std spawns it with `posix_spawn` (vfork: no copy of this process's page
/// tables, and the exec's outcome without a pipe), which shortens every launch.
fn spawn_plain(control: &UnixStream, stdio: Vec<OwnedFd>, launch: &PlainLaunch) {
    use std::os::unix::process::CommandExt as _;
    // std's posix_spawn hands the program this process's signal mask: SIGCHLD is blocked
    // (again, for a reused supervisor) only once the program is spawned. An exit in between
    // is not lost: the supervision loop reaps before it waits.
    sigchld_mask(libc::SIG_UNBLOCK);
    let [stdin, stdout, stderr]: [OwnedFd; 3] = stdio.try_into().expect("checked by the caller");
    let (program, args) = launch.argv.split_first().expect("argv is never empty");
    let spawned = std::process::Command::new(&launch.program)
        .arg0(program)
        .args(args)
        .current_dir(&launch.cwd)
        .env_clear()
        .envs(&launch.env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn();
    let sigchld = block_sigchld();
    match spawned {
        // Reaped by the supervision loop, with everything else of the tree.
        Ok(child) => {
            let pid = child.id() as i32;
            let started = Report::Started {
                pid,
                supervisor: own_pid(),
            };
            Ahead { pid, sigchld }.supervise(control, Some(started), None)
        }
        Err(err) => refuse(control, Stage::Exec.os(err)),
    }
}

/// Supervisors and what they start are the kernel's first choice under memory pressure, not
/// the daemon (whose low score they would inherit). Set by each supervisor first thing, before
/// it forks anything; raising needs no privilege.
pub(super) fn become_workload() {
    let _ = std::fs::write("/proc/self/oom_score_adj", "500");
}

/// Makes this process the child subreaper of its descendants.
pub(super) fn become_subreaper() -> bool {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// The program's stdio (and cgroup), the child setup and the launch, as the daemon sends them.
pub(super) fn receive(
    control: &UnixStream,
) -> Result<(Vec<OwnedFd>, ChildSetup, Vec<u8>), Failure> {
    let mut first = [0u8; 4096];
    let mut fds = Vec::new();
    // Orders left from a previous launch come first, each alone or glued to the launch.
    let (start, received) = loop {
        let message = channel::recv_fds(control.as_fd(), &mut first, MAX_ORDER_FDS, false)
            .map_err(|err| Stage::Policy.os(err))?;
        fds.extend(message.fds);
        if message.truncated {
            return Err(Stage::Policy.fail("too many descriptors"));
        }
        let received = message.bytes;
        if received == 0 {
            // The daemon went away before handing out a launch.
            std::process::exit(0);
        }
        let start = skip_orders(&first[..received], &mut fds)?;
        if let Some(start) = start {
            break (start, received);
        }
        if !fds.is_empty() {
            return Err(Stage::Policy.fail("descriptors without a launch"));
        }
    };
    if !(3..=5).contains(&fds.len()) {
        return Err(Stage::Policy.fail("expected the program's three stdio descriptors"));
    }
    let mut input = std::io::Cursor::new(first[start..received].to_vec()).chain(control);
    let setup = message::read_launch_frame(&mut input)?;
    let setup = serde_json::from_slice(&setup).map_err(|e| Stage::Policy.fail(e))?;
    Ok((fds, setup, message::read_launch_frame(&mut input)?))
}

/// Skips the orders left from a previous launch at the start of `message`; returns where the
/// launch's frames start after its [`Order::Launch`] (None: not in this message). The previous
/// tree's stdio to hold, come after it ended, are dropped: its descriptors were the only ones
/// with it (a launch's come in a message of their own).
fn skip_orders(message: &[u8], fds: &mut Vec<OwnedFd>) -> Result<Option<usize>, Failure> {
    let mut input = std::io::Cursor::new(message);
    while let Some(&marker) = message.get(input.position() as usize) {
        let first = input.position() == 0;
        input.set_position(input.position() + 1);
        match Order::read(marker, &mut input, false) {
            Ok(Order::Launch) => return Ok(Some(input.position() as usize)),
            Ok(Order::Kill | Order::CloseStdin | Order::Signal(_) | Order::SignalTree(_)) => {}
            Ok(Order::Hold(_)) if first => fds.clear(),
            Err(OrderError::Frame(_)) => return Err(Stage::Policy.fail("a cut order")),
            Ok(_) | Err(OrderError::Unknown) => return Err(Stage::Policy.fail("not a launch")),
        }
    }
    Ok(None)
}

/// Reports a launch that could not be made before any child existed, and exits.
pub(super) fn refuse(control: &UnixStream, failure: Failure) -> ! {
    let supervisor = own_pid();
    report(
        control,
        &Report::Failed {
            pid: 0,
            supervisor,
            failure,
        },
    );
    std::process::exit(125)
}

/// How a child that could not execute its program exits: the reason on its stderr (the
/// program's), and the code a shell would use.
pub(crate) fn exit_for(failure: &Failure) -> ! {
    // A refused exec is the program's own outcome (the daemon reports it as the process's
    // exit, 126 as from a shell), so the reason is written for its reader.
    if failure.denied {
        eprintln!("exec-server: {} (refused by the sandbox)", failure.message);
    } else {
        eprintln!(
            "exec-server sandbox: {}: {}",
            failure.stage, failure.message
        );
    }
    std::process::exit(if failure.stage == Stage::Exec {
        if failure.errno == Some(libc::ENOENT) {
            127
        } else {
            126
        }
    } else {
        125
    });
}

/// The program's process, forked before its launch is known: it receives its launch on its own
/// socket ([`fork_ahead`]). A sandbox helper forks it while it is pre-started, so that no fork
/// is on a sandboxed launch's path, and the daemon talks to it directly.
pub(super) struct Ahead {
    pid: i32,
    sigchld: OwnedFd,
}

/// Forks the program's process ahead of its launch. The child receives the launch on `launch`
/// (its stdio, the [`ChildSetup`], the payload: see [`message::launch`]), takes the stdio and its own
/// session, then runs `child`, which executes the program or returns why it could not;
/// `waiting` is what it does while it waits for the launch (a failure is its verdict). The
/// verdict is on `launch` too: EOF once the program was executed (the socket is close-on-exec),
/// the [`Failure`] otherwise. The child has no part of `control`, nor this process of `launch`.
pub(super) fn fork_ahead(
    control: &UnixStream,
    launch: UnixStream,
    waiting: impl FnOnce() -> Result<(), Failure>,
    child: impl FnOnce(&ChildSetup, Vec<u8>) -> Failure,
) -> Result<Ahead, Failure> {
    let sigchld = block_sigchld();
    // SAFETY: this process is single-threaded, so the child may run anything.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(sigchld);
        // SAFETY: the control socket is the supervisor's alone; its descriptor is closed once,
        // here, and never used in this process again.
        unsafe { libc::close(control.as_raw_fd()) };
        let waited = waiting();
        let failure = match receive(&launch) {
            Ok((stdio, setup, payload)) => waited
                .and_then(|()| enter(&stdio, &setup))
                .err()
                .unwrap_or_else(|| {
                    drop(stdio);
                    child(&setup, payload)
                }),
            Err(failure) => failure,
        };
        let _ = (&launch).write_all(&serde_json::to_vec(&failure).unwrap_or_default());
        exit_for(&failure)
    }
    drop(launch);
    if pid < 0 {
        return Err(Stage::Supervisor.os(std::io::Error::last_os_error()));
    }
    Ok(Ahead { pid, sigchld })
}

impl Ahead {
    pub(super) fn pid(&self) -> i32 {
        self.pid
    }

    /// Supervises the child's tree until it is confirmed gone, first reporting `started`
    /// when the daemon learns of the exec from this process. `program_status`: the child is
    /// the init of a PID namespace, which writes the program's status there
    /// (`super::init`).
    pub(super) fn supervise(
        self,
        control: &UnixStream,
        started: Option<Report>,
        program_status: Option<OwnedFd>,
    ) {
        if let Some(started) = started {
            report(control, &started);
        }
        let control = control
            .try_clone()
            .unwrap_or_else(|err| refuse(control, Stage::Supervisor.os(err)));
        Supervisor::new(control, self.sigchld, self.pid, program_status).serve()
    }
}

/// Forks the program's process for a launch already received, passes the launch on, and
/// supervises its tree until it is confirmed gone (see [`fork_ahead`]).
fn run(
    control: &UnixStream,
    stdio: Vec<OwnedFd>,
    setup: &ChildSetup,
    payload: &[u8],
    child: impl FnOnce(&ChildSetup, Vec<u8>) -> Failure,
) {
    let (ours, theirs) =
        UnixStream::pair().unwrap_or_else(|err| refuse(control, Stage::Supervisor.os(err)));
    let ahead =
        fork_ahead(control, theirs, || Ok(()), child).unwrap_or_else(|f| refuse(control, f));
    let passed = send_launch(&ours, &stdio, &message::launch(setup, payload));
    // The program's pipes or terminal must close when the program's side does.
    drop(stdio);
    let mut verdict = Vec::new();
    let _ = (&ours).read_to_end(&mut verdict);
    let (pid, supervisor) = (ahead.pid, own_pid());
    let started = match (passed, serde_json::from_slice(&verdict).ok()) {
        (Err(err), _) => Report::Failed {
            pid,
            supervisor,
            failure: Stage::Supervisor.os(err),
        },
        (Ok(()), Some(failure)) => Report::Failed {
            pid,
            supervisor,
            failure,
        },
        (Ok(()), None) => Report::Started { pid, supervisor },
    };
    ahead.supervise(control, Some(started), None)
}

/// Sends a launch: the descriptors with the first bytes, then the rest.
fn send_launch(socket: &UnixStream, fds: &[OwnedFd], frames: &[u8]) -> std::io::Result<()> {
    let fds: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    channel::send_all_with_fds(socket, frames, &fds)
}

/// In the child: the signal state of a fresh process, its stdio, its session or group.
fn enter(stdio: &[OwnedFd], setup: &ChildSetup) -> Result<(), Failure> {
    let last_os = |stage: Stage| stage.os(std::io::Error::last_os_error());
    // SAFETY: the signal set is a valid, emptied one; the other calls take integers and
    // descriptors this process owns (its stdio, which it is about to replace).
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Rust ignores SIGPIPE in its processes; a program expects the default.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Ignored by the supervisor ([`shield_from_signals`]), which an exec would keep.
        internal_signals(libc::SIG_DFL);
        for (target, fd) in stdio.iter().take(3).enumerate() {
            if libc::dup2(fd.as_raw_fd(), target as RawFd) < 0 {
                return Err(last_os(Stage::Stdio));
            }
        }
        // Its own session and group, so that signals reach what it starts in it.
        if libc::setsid() < 0 {
            return Err(last_os(Stage::Session));
        }
        // A PTY's session leader takes its terminal as the controlling one.
        if setup.tty && libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0) < 0 {
            return Err(last_os(Stage::Terminal));
        }
    }
    for cgroup in &stdio[3..] {
        // Joined before the exec, so that nothing the program does escapes the group.
        let mut procs =
            std::fs::File::from(cgroup.try_clone().map_err(|err| Stage::Cgroup.os(err))?);
        procs.write_all(b"0").map_err(|err| Stage::Cgroup.os(err))?;
    }
    Ok(())
}

/// The per-process limits of `setup`, set last before the exec (the setup needs descriptors).
pub(super) fn apply_limits(setup: &ChildSetup) -> Result<(), Failure> {
    use nix::sys::resource::{setrlimit, Resource};
    for (resource, limit) in [
        (Resource::RLIMIT_NOFILE, setup.max_open_files),
        (Resource::RLIMIT_CPU, setup.max_cpu_seconds),
    ] {
        if let Some(limit) = limit {
            setrlimit(resource, limit, limit).map_err(|errno| Stage::Limits.os(errno))?;
        }
    }
    Ok(())
}

/// Takes `run_as`'s credentials for good: groups first, as only root may set them.
fn become_user(run_as: &crate::ipc::message::RunAs) -> Result<(), Failure> {
    use nix::unistd::{setgid, setgroups, setuid, Gid, Uid};
    let groups: Vec<Gid> = run_as
        .groups
        .iter()
        .map(|&gid| Gid::from_raw(gid))
        .collect();
    setgroups(&groups).map_err(|errno| Stage::Credentials.os(errno))?;
    setgid(Gid::from_raw(run_as.gid)).map_err(|errno| Stage::Credentials.os(errno))?;
    setuid(Uid::from_raw(run_as.uid)).map_err(|errno| Stage::Credentials.os(errno))
}

/// The plain child's part: environment, working directory, limits, exec.
fn exec_plain(launch: &PlainLaunch, setup: &ChildSetup) -> Failure {
    let cstrings = |items: &mut dyn Iterator<Item = &str>| {
        items
            .map(CString::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Stage::Launch.fail(e))
    };
    let prepared = (|| {
        let program = CString::new(launch.program.as_str()).map_err(|e| Stage::Launch.fail(e))?;
        let argv = cstrings(&mut launch.argv.iter().map(String::as_str))?;
        let env: Vec<String> = launch.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let env = cstrings(&mut env.iter().map(String::as_str))?;
        // As the user, so that a directory it may not enter is refused as it would be to it.
        if let Some(run_as) = &setup.run_as {
            become_user(run_as)?;
        }
        std::env::set_current_dir(&launch.cwd).map_err(|err| Stage::Exec.os(err))?;
        apply_limits(setup)?;
        Ok((program, argv, env))
    })();
    let (program, argv, env) = match prepared {
        Ok(prepared) => prepared,
        Err(failure) => return failure,
    };
    let err = nix::unistd::execve(&program, &argv, &env).unwrap_err();
    Failure {
        stage: Stage::Exec,
        message: format!("cannot execute `{}`: {}", launch.program, err.desc()),
        errno: Some(err as i32),
        denied: false,
    }
}
