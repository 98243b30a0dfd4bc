//! The per-process supervisor: the process that starts a managed program and holds its whole
//! tree until every process of it is gone.
//!
//! For a plain or PTY launch it is forked by the fork server, the daemon's own binary
//! re-executed once as `exec-server __supervise` (`crate::sandbox::pool::fork_supervisor`;
//! `main` dispatches to [`main_if_supervisor`] before any runtime exists, so it is a
//! single-threaded process); it serves one launch after another, each once the previous tree
//! is confirmed gone, so a launch costs neither a fork nor an exit of a supervisor. For a
//! sandboxed launch it is the sandbox helper itself, pre-started, which forks the program's
//! process ahead of the launch ([`fork_ahead`]); the daemon then talks to that process directly
//! for the launch and its verdict.
//! It is the child subreaper of its tree (`PR_SET_CHILD_SUBREAPER`): whatever in the tree
//! detaches (a new session, a double fork, `nohup`) is re-parented to it, never to init, so it
//! can find, kill and reap every member, and the rusage of everything it reaps is the tree's.
//!
//! A launch ([`frames`]; to a plain supervisor on its control socket, to a sandboxed program's
//! process on its own socket): a marker byte with the program's stdio (SCM_RIGHTS, then the
//! `cgroup.procs` of each group the program joins, see `super::cgroup`), then two
//! length-prefixed frames: the [`ChildSetup`] and the payload (a [`PlainLaunch`], or the
//! sandbox plan). On the control socket (the daemon's end is the only other one) a supervisor
//! answers with [`Report`]s, one JSON object per line: `started` or `failed` (plain only),
//! `exited` when the program itself exits, `gone` when the whole tree is. Orders are [`KILL`]
//! (kill the tree, confirm) or [`SIGNAL`] and a signal number (for the program's process
//! group). EOF means the daemon is gone: [`on_daemon_gone`].

use crate::channel::{
    self, FrameError, ADOPTED, CLOSE_STDIN, HOLD, KILL, LAUNCH, READY, SIGNAL, SIGNAL_TREE,
};
use crate::sandbox::helper;
use crate::sandbox::plan::{Failure, NetworkMode, Stage, MAX_PLAN_BYTES};
use exec_server_protocol::process::ProcessUsage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::io::{Read, Write as _};
use std::os::fd::{AsFd as _, AsRawFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const SUPERVISOR_ARG: &str = "__supervise";

/// How long a kill order waits for the tree to be gone before it says it could not confirm.
const KILL_BOUND: Duration = Duration::from_secs(2);

/// What the child applies to itself whatever the launch: its session and terminal, its own
/// resource limits, its cgroup.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildSetup {
    /// The program runs on a PTY (its stdio), which becomes its controlling terminal.
    pub tty: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_seconds: Option<u64>,
}

/// An unsandboxed launch.
#[derive(Debug, Serialize, Deserialize)]
pub struct PlainLaunch {
    /// Already resolved on the child's PATH by the daemon.
    pub program: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "camelCase")]
pub enum Report {
    /// The program was executed, as `pid`, by the supervisor `supervisor`.
    Started { pid: i32, supervisor: i32 },
    /// It could not be; the child `pid` exits in its place (126 or 127 for an exec failure).
    Failed {
        pid: i32,
        supervisor: i32,
        failure: Failure,
    },
    /// The program itself exited; `usage` covers the tree as reaped so far.
    Exited {
        code: i32,
        signal: Option<i32>,
        usage: ProcessUsage,
    },
    /// The whole tree is gone (`confirmed`), or a kill order could not confirm it within its
    /// bound (the supervisor keeps killing).
    Gone {
        confirmed: bool,
        usage: ProcessUsage,
    },
}

/// What a supervisor holds for the daemon (a [`HOLD`] order), so that a daemon that dies, even
/// by SIGKILL, leaves the program running with nothing lost: its output goes on into the
/// stream files, and a successor daemon adopts the tree on the socket. Travelling with it, in
/// order: the listening socket, the process's directory in the state directory (by
/// descriptor: a path could lead elsewhere by the time the tree ends), the stream files, the
/// output ends, and the stdin end if any.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// One stream (a terminal's master, which is also its stdin), or stdout and stderr.
    pub tty: bool,
    pub stdin: bool,
    /// Bytes an orphaned supervisor moves into a stream's file beyond what the daemon had
    /// taken, at most, before the program waits (while its tree runs).
    pub max_tail: u64,
}

impl Hold {
    pub fn streams(&self) -> usize {
        super::store::streams(self.tty).len()
    }

    /// How many descriptors travel with it.
    pub fn fds(&self) -> usize {
        2 + 2 * self.streams() + usize::from(self.stdin && !self.tty)
    }
}

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

/// What comes with [`ADOPTED`], as a frame: which held ends travel with it (the open outputs,
/// in order, then the stdin).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Adopted {
    pub outputs: Vec<bool>,
    pub stdin: bool,
}

/// Runs the fork server of plain supervisors and never returns when this process was started
/// as one.
pub fn main_if_supervisor() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(SUPERVISOR_ARG)) {
        return;
    }
    shield_from_signals();
    become_workload();
    let mut control = control_socket().unwrap_or_else(|failure| exit_for(&failure));
    // The daemon's first frame: the paths every sandbox helper forked here hides.
    let hidden = read_frame(&mut &control)
        .ok()
        .and_then(|frame| serde_json::from_slice(&frame).ok());
    let Some(hidden) = hidden else {
        std::process::exit(125);
    };
    crate::sandbox::hide_from_sandboxes(hidden);
    // Its own session, so that nothing aimed at the daemon's group or terminal reaches it.
    // SAFETY: plain syscall.
    if unsafe { libc::setsid() } < 0 || control.write_all(&[READY]).is_err() {
        std::process::exit(125);
    }
    serve_forks(&control)
}

/// The fork server: for each request of the daemon (`channel::FORK_REQUEST_BYTES`, the sockets
/// with them), a fresh plain supervisor or sandbox helper is forked. A fork of this small,
/// single-threaded process costs far less than an exec of the daemon's binary, and a helper
/// forked from it is as fresh as one executed. It reaps them, and exits at EOF (each sees its
/// own EOF and kills its tree).
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
        // SAFETY: two valid pollfds.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            continue;
        }
        if fds[1].revents != 0 {
            drain(&sigchld);
            loop {
                // SAFETY: plain call; statuses are not needed.
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
                // SAFETY: plain syscall on an unreaped child of this process (not reused).
                unsafe { libc::kill(orphan, libc::SIGKILL) };
            }
        }
        if fds[0].revents == 0 {
            continue;
        }
        let mut request = [0u8; channel::FORK_REQUEST_BYTES];
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
        let mut fds = received.fds.into_iter();
        let child = match (request[0], fds.next(), fds.next(), fds.next()) {
            (channel::FORK, Some(socket), None, None) => Child::Supervisor(socket),
            (channel::FORK_HELPER, Some(control), Some(launch), None) => {
                let mode = usize::from(request[1]);
                let Some(network) = NetworkMode::ALL.into_iter().find(|n| n.index() == mode) else {
                    continue;
                };
                Child::Helper {
                    network,
                    background: request[2] == 1,
                    control,
                    launch,
                }
            }
            _ => continue,
        };
        // SAFETY: this process is single-threaded, so the child may run anything.
        let pid = unsafe { libc::fork() };
        if pid > 0 {
            forked.insert(pid);
        } else if pid == 0 {
            drop(sigchld);
            // SAFETY: the fork server's socket is not the child's to use; SIGCHLD is blocked
            // here only for the signalfd just closed.
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
                } => helper::serve(network, background, control, launch),
            }
        }
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

/// A forked plain supervisor: its own session, the subreaper of its trees, one launch after
/// another. It is handed back to the daemon's pool once a tree is confirmed gone, so a
/// launch costs neither a fork nor an exit of a supervisor (a few hundred µs each here).
fn supervise(control: UnixStream) -> ! {
    // SAFETY: plain syscall.
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
            && setup.max_cpu_seconds.is_none();
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
            Ahead { pid, sigchld }.supervise(control, Some(started))
        }
        Err(err) => refuse(control, Stage::Exec.os(err)),
    }
}

/// Takes every signal this process does not use (a stray `pkill -HUP -f exec-server`, meant
/// for the daemon, must not end a supervisor and leave its tree untracked): a handler that does
/// nothing, with SA_RESTART. Handled, not ignored nor blocked: the kernel resets handlers to
/// the default at the program's exec, while an ignored disposition or a mask would be
/// inherited (std's `posix_spawn` resets neither). SIGCHLD stays the signalfd's; SIGKILL and
/// SIGSTOP cannot be caught; the fault signals keep Rust's handling (a real fault must not
/// return to its instruction forever). glibc refuses handlers for its own 32 and 33, which are
/// ignored instead and given back their default before the exec ([`internal_signals`]).
fn shield_from_signals() {
    const KEPT: &[libc::c_int] = &[
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGCHLD,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (it does nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        for signal in 1..=libc::SIGRTMAX() {
            if !KEPT.contains(&signal) {
                // Fails (EINVAL) for glibc's own signals only.
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
    internal_signals(libc::SIG_IGN);
}

/// Sets the disposition of glibc's signals 32 and 33 through the kernel's call, which glibc's
/// `sigaction` refuses for them. Only SIG_IGN and SIG_DFL: no handler code to return through.
fn internal_signals(disposition: libc::sighandler_t) {
    // The kernel's struct sigaction: with nothing but the disposition set, the fields after it
    // (flags, restorer where the architecture has one, mask) are all zero in either layout.
    let action: [u64; 4] = [disposition as u64, 0, 0, 0];
    for signal in [32, 33] {
        // SAFETY: a valid kernel sigaction and an 8-byte signal set size; no old action wanted.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                action.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
    }
}

/// Supervisors and what they start are the kernel's first choice under memory pressure, not
/// the daemon (whose low score they would inherit). Set by each supervisor first thing, before
/// it forks anything; raising needs no privilege.
pub fn become_workload() {
    let _ = std::fs::write("/proc/self/oom_score_adj", "500");
}

/// Makes this process the child subreaper of its descendants.
pub fn become_subreaper() -> bool {
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
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

/// The program's stdio (and cgroup), the child setup and the launch, as the daemon sends them.
pub fn receive(control: &UnixStream) -> Result<(Vec<OwnedFd>, ChildSetup, Vec<u8>), Failure> {
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
        let mut start = 0;
        while let Some(&byte) = first[..received].get(start).filter(|&&b| b != LAUNCH) {
            start += match byte {
                KILL | CLOSE_STDIN => 1,
                SIGNAL | SIGNAL_TREE => 2,
                // The previous tree's stdio, come after it ended: its descriptors were the
                // only ones with it (a launch's come in a message of their own).
                HOLD if start == 0 => {
                    fds.clear();
                    let len = first
                        .get(1..5)
                        .map(|len| u32::from_le_bytes(len.try_into().expect("4 bytes")));
                    5 + len.ok_or_else(|| Stage::Policy.fail("a cut order"))? as usize
                }
                _ => return Err(Stage::Policy.fail("not a launch")),
            };
        }
        if start < received {
            break (start + 1, received);
        }
        if !fds.is_empty() {
            return Err(Stage::Policy.fail("descriptors without a launch"));
        }
    };
    if !(3..=5).contains(&fds.len()) {
        return Err(Stage::Policy.fail("expected the program's three stdio descriptors"));
    }
    let mut input = std::io::Cursor::new(first[start..received].to_vec()).chain(control);
    let setup = read_frame(&mut input)?;
    let setup = serde_json::from_slice(&setup).map_err(|e| Stage::Policy.fail(e))?;
    Ok((fds, setup, read_frame(&mut input)?))
}

/// One length-prefixed frame of a launch.
pub fn read_frame(input: &mut impl Read) -> Result<Vec<u8>, Failure> {
    channel::read_frame(input, MAX_PLAN_BYTES).map_err(|err| match err {
        FrameError::Io(err) => Stage::Policy.os(err),
        too_large => Stage::Policy.fail(too_large),
    })
}

/// The launch [`receive`] reads, for the daemon to send.
pub fn frames(setup: &ChildSetup, payload: &[u8]) -> Vec<u8> {
    let setup = serde_json::to_vec(setup).expect("the setup serializes");
    channel::launch(&[&setup, payload])
}

/// Reports a launch that could not be made before any child existed, and exits.
pub fn refuse(control: &UnixStream, failure: Failure) -> ! {
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

fn report(control: &UnixStream, report: &Report) {
    report_all(control, std::iter::once(report));
}

/// Reports, one line each, in one write.
fn report_all<'a>(mut control: &UnixStream, reports: impl Iterator<Item = &'a Report>) {
    // A daemon that is gone reads nothing; its EOF is handled by the loop.
    let _ = control.write_all(&report_lines(reports));
}

/// Reports as the control socket carries them: one JSON line each.
fn report_lines<'a>(reports: impl Iterator<Item = &'a Report>) -> Vec<u8> {
    let mut lines = Vec::new();
    for report in reports {
        serde_json::to_writer(&mut lines, report).expect("reports serialize");
        lines.push(b'\n');
    }
    lines
}

/// How a child that could not execute its program exits: the reason on its stderr (the
/// program's), and the code a shell would use.
pub fn exit_for(failure: &Failure) -> ! {
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
pub struct Ahead {
    pid: i32,
    sigchld: OwnedFd,
}

/// Forks the program's process ahead of its launch. The child receives the launch on `launch`
/// (its stdio, the [`ChildSetup`], the payload: see [`frames`]), takes the stdio and its own
/// session, then runs `child`, which executes the program or returns why it could not;
/// `waiting` is what it does while it waits for the launch (a failure is its verdict). The
/// verdict is on `launch` too: EOF once the program was executed (the socket is close-on-exec),
/// the [`Failure`] otherwise. The child has no part of `control`, nor this process of `launch`.
pub fn fork_ahead(
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
        // SAFETY: the control socket is the supervisor's alone.
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
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Supervises the child's tree until it is confirmed gone, first reporting `started`
    /// when the daemon learns of the exec from this process.
    pub fn supervise(self, control: &UnixStream, started: Option<Report>) {
        if let Some(started) = started {
            report(control, &started);
        }
        let control = control
            .try_clone()
            .unwrap_or_else(|err| refuse(control, Stage::Supervisor.os(err)));
        Supervisor {
            control,
            sigchld: self.sigchld,
            leader: self.pid,
            leader_exit: None,
            exit_reported: false,
            usage: TreeUsage::default(),
            held: None,
        }
        .serve()
    }
}

/// Forks the program's process for a launch already received, passes the launch on, and
/// supervises its tree until it is confirmed gone (see [`fork_ahead`]).
pub fn run(
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
    let passed = send_launch(&ours, &stdio, &frames(setup, payload));
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
    ahead.supervise(control, Some(started))
}

/// Sends a launch: the descriptors with the first bytes, then the rest.
fn send_launch(socket: &UnixStream, fds: &[OwnedFd], frames: &[u8]) -> std::io::Result<()> {
    let fds: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    channel::send_all_with_fds(socket, frames, &fds)
}

/// In the child: the signal state of a fresh process, its stdio, its session or group.
fn enter(stdio: &[OwnedFd], setup: &ChildSetup) -> Result<(), Failure> {
    let last_os = |stage: Stage| stage.os(std::io::Error::last_os_error());
    // SAFETY: plain calls on this process's signal state and descriptors.
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

impl ChildSetup {
    /// The per-process limits, set last before the exec (the setup needs descriptors).
    pub fn apply_limits(&self) -> Result<(), Failure> {
        use nix::sys::resource::{setrlimit, Resource};
        for (resource, limit) in [
            (Resource::RLIMIT_NOFILE, self.max_open_files),
            (Resource::RLIMIT_CPU, self.max_cpu_seconds),
        ] {
            if let Some(limit) = limit {
                setrlimit(resource, limit, limit).map_err(|errno| Stage::Limits.os(errno))?;
            }
        }
        Ok(())
    }
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
        std::env::set_current_dir(&launch.cwd).map_err(|err| Stage::Exec.os(err))?;
        setup.apply_limits()?;
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

/// SIGCHLD blocked and readable as a signalfd (the child unblocks it before its exec).
fn block_sigchld() -> OwnedFd {
    let set = sigchld_mask(libc::SIG_BLOCK);
    // SAFETY: plain call with a valid signal set.
    unsafe {
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            std::process::exit(125);
        }
        OwnedFd::from_raw_fd(fd)
    }
}

/// Blocks or unblocks (`how`) SIGCHLD; returns the set of it.
fn sigchld_mask(how: libc::c_int) -> libc::sigset_t {
    // SAFETY: plain calls with a valid signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(how, &set, std::ptr::null_mut());
        set
    }
}

struct Supervisor {
    /// To the daemon (a successor's, once adopted).
    control: UnixStream,
    sigchld: OwnedFd,
    leader: i32,
    /// The program's wait status, once reaped.
    leader_exit: Option<libc::c_int>,
    exit_reported: bool,
    usage: TreeUsage,
    held: Option<Held>,
}

/// Descriptors an order may carry, at most.
const MAX_ORDER_FDS: usize = 8;

impl Supervisor {
    /// Returns once the tree is confirmed gone, and both reports are sent.
    fn serve(mut self) {
        loop {
            if !self.reap() {
                return self.gone(true);
            }
            if self.leader_exit.is_some() && !self.exit_reported {
                self.report_exit();
            }
            let mut fds = [
                readable(self.control.as_raw_fd()),
                readable(self.sigchld.as_raw_fd()),
            ];
            // SAFETY: two valid pollfds.
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                continue;
            }
            if fds[1].revents != 0 {
                drain(&self.sigchld);
                // Reaped and reported first: an order that came with the exit (the stdio to
                // hold, for a program that is done already) waits its turn.
                continue;
            }
            if fds[0].revents != 0 {
                let mut order = [0u8; 2];
                let received =
                    channel::recv_fds(self.control.as_fd(), &mut order[..1], MAX_ORDER_FDS, false);
                match received.map(|received| (received.bytes, received.fds)) {
                    Ok((0, _)) | Err(_) => self.on_daemon_gone(),
                    Ok((_, fds)) if order[0] == HOLD => self.hold(fds),
                    Ok(_) if order[0] == CLOSE_STDIN => {
                        if let Some(held) = &mut self.held {
                            held.stdin = None;
                        }
                    }
                    Ok(_) if order[0] == KILL => return self.kill_and_confirm(),
                    Ok(_) if order[0] == SIGNAL || order[0] == SIGNAL_TREE => {
                        if self.control.read_exact(&mut order[1..]).is_err() {
                            self.on_daemon_gone();
                        }
                        let signal = libc::c_int::from(order[1]);
                        if order[0] == SIGNAL_TREE {
                            for pid in descendants(own_pid()) {
                                // SAFETY: plain syscall on a process of this tree (a pid
                                // reaped meanwhile can only be ours to reap, so not reused).
                                unsafe { libc::kill(pid, signal) };
                            }
                        } else if self.leader_exit.is_none() {
                            // SAFETY: plain syscall; the group is the unreaped program's.
                            unsafe { libc::kill(-self.leader, signal) };
                        }
                    }
                    Ok(_) => {}
                }
            }
        }
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

    fn hold(&mut self, fds: Vec<OwnedFd>) {
        let hold: Option<Hold> = read_frame(&mut &self.control)
            .ok()
            .and_then(|frame| serde_json::from_slice(&frame).ok());
        let Some(hold) = hold.filter(|hold| hold.fds() == fds.len()) else {
            return;
        };
        let streams = hold.streams();
        let mut fds = fds.into_iter();
        let listener = fds.next().expect("counted").into();
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
    /// once the tree is gone and its output ended, records its last reports (`store::EXIT`) for the
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
        let frame = serde_json::to_vec(&adopted).expect("serializes");
        let message = channel::message(Some(ADOPTED), &[&frame]);
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
        let lines = report_lines([Some(gone), exit].iter().flatten());
        if held.dir.write(partial, &lines).is_ok() {
            let _ = held.dir.rename(partial, super::store::EXIT);
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
            // SAFETY: plain call with valid out-pointers.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
            match pid {
                0 => return true,
                p if p < 0 => {
                    return std::io::Error::last_os_error().raw_os_error() != Some(libc::ECHILD)
                }
                p => {
                    if p == self.leader {
                        self.leader_exit = Some(status);
                    }
                    self.usage.add(&usage);
                }
            }
        }
    }

    /// SIGKILLs every process of the tree until none is left, or the deadline passes (false).
    /// A killed process's children are re-parented here, so each round reaches further; the
    /// process groups of the children reach members that have not been re-parented yet.
    fn kill_tree(&mut self, deadline: Option<Instant>) -> bool {
        // SAFETY: plain syscall.
        let own_group = unsafe { libc::getpgrp() };
        loop {
            for child in children(own_pid()) {
                // SAFETY: plain syscalls on our own unreaped children and their groups.
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
    match super::io::move_into(output, !held.hold.tty, file, end, buffer) {
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
    // SAFETY: plain syscall.
    let own = unsafe { libc::geteuid() };
    if peer.uid() != own || crate::sandbox::peers::runs_in_sandbox(peer.pid()) {
        return None;
    }
    socket.set_nonblocking(false).ok()?;
    Some(socket)
}

/// A pollfd waiting for `fd` to be readable (a negative `fd` is skipped).
fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Empties a non-blocking signalfd.
fn drain(signals: &OwnedFd) {
    let mut info = [0u8; 128];
    // SAFETY: reads whole siginfo records into a buffer of the right size.
    while unsafe { libc::read(signals.as_raw_fd(), info.as_mut_ptr().cast(), 128) } > 0 {}
}

fn own_pid() -> i32 {
    // SAFETY: plain syscall.
    unsafe { libc::getpid() }
}

/// Every process below `root`, through every thread's children. One that exits during the
/// walk has its children re-parented to the supervisor, where the walk may meet them again:
/// each is listed once.
pub fn descendants(root: i32) -> std::collections::HashSet<i32> {
    let mut pending = vec![root];
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = pending.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            for child in children.unwrap_or_default().split_whitespace() {
                if let Ok(child) = child.parse::<i32>() {
                    if seen.insert(child) {
                        pending.push(child);
                    }
                }
            }
        }
    }
    seen
}

/// The children of the single-threaded process `pid` (its one task lists them all).
pub fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
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
