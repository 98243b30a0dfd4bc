//! The sandbox helper, one per sandboxed launch, for one network mode ([`NetworkMode`]).
//!
//! The fork server (`super::fork_server`: the daemon's binary executed once, before any runtime
//! or thread) forks it, so the helper is a fresh single-threaded process that cost
//! no exec. Its command name is [`HELPER_NAME`]. Helpers are started ahead of need
//! (`crate::launcher::pool`): the creation of a network namespace is the slowest step of a launch, and
//! does not depend on the plan. It has a control socket and the socket of the program's
//! process, and first says [`Answer::Hello`] with its pid and pidfd. Before any plan, it becomes a
//! session leader and the
//! subreaper of what it will start, creates its own empty network namespace unless network is
//! enabled, its own mount namespace (a follower of the host's mounts) with a private `/proc`
//! showing only the sandbox's own processes, attaches most of its seccomp rules (all that the
//! setup below does not need lifted), waits for [`Order::Admitted`], forks the program's
//! process ([`launch::fork_ahead`]), and writes [`Answer::Ready`] with that process's pid (or, when any of
//! that fails, its [`Failure`] instead).
//!
//! The program's process receives the launch from the daemon ([`launch::receive`]: the
//! program's stdio, the child setup, the [`Plan`]). For a managed network the helper first
//! receives the ports, brings `lo` up, listens at them and passes the listeners to the daemon
//! ([`super::bridge::open`]): after the fork, so the program never holds them. The helper
//! supervises the program's tree. The program's process, which already has its stdio and its
//! own session (and controlling terminal for a PTY), applies in order the mount view when the
//! file system is restricted, cwd, Landlock,
//! capabilities and securebits, no_new_privs, close-on-exec for every fd above 2, the last
//! seccomp filter, the resource limits, the program's environment (the helper itself runs with
//! an empty one), and `execvp`. The supervisor stays outside Landlock and the late filter: a
//! less restricted process may signal a more restricted one, so it can still kill the tree. A
//! failure at any step is the verdict on its socket; an exec the sandbox refused is also explained
//! on the program's stderr, and the child exits 126 in its place: the daemon reports that as
//! the process's exit.
//!
//! A plan for an `fs/*` operation ([`Plan::fs_op`]) stops before the environment: the child
//! closes every descriptor above 2 (its socket's EOF tells the daemon the sandbox is in place,
//! as an exec would) and runs the operation itself (`crate::child::fs_op`) with nothing
//! loaded or looked up after the sandbox is in place, so the intent need not grant the daemon's
//! binary or its libraries.

use super::launch::{self, exit_for};
use crate::ipc::channel;
use crate::ipc::message::{self, Answer, ChildSetup, Order};
use crate::os::scheduling::Scheduling;
use crate::sandbox::capabilities::{bound_capabilities, clear_capabilities};
use crate::sandbox::facilities::Enforcement;
use crate::sandbox::plan::{
    Failure, FsPlan, Grant, Identities, Identity, ManagedPlan, NetworkMode, Plan, Stage,
    HELPER_NAME,
};
use crate::sandbox::{landlock, mounts, open, seccomp};
use std::ffi::CString;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

/// Runs a helper forked by the fork server (`super::fork_server`), with its control
/// socket and its program's socket (its launch, and its verdict); `background`: at idle
/// priority until the daemon takes it. Never returns.
pub(super) fn serve(
    network: NetworkMode,
    background: bool,
    control: OwnedFd,
    launch: OwnedFd,
) -> ! {
    let name = CString::new(HELPER_NAME).unwrap_or_default();
    // SAFETY: PR_SET_NAME reads a NUL-terminated string, which `name` is, and outlives the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    if background {
        // A lower priority needs no privilege; at worst the helper starts at normal priority.
        let _ = Scheduling::IDLE.apply(0);
    }
    launch::become_workload();
    let (mut control, launch) = (UnixStream::from(control), UnixStream::from(launch));
    if hello(&control).is_err() {
        std::process::exit(125);
    }
    // A failure before the launch is written instead of READY, and the helper exits.
    let late = start(network).and_then(|late| {
        let mut admitted = [0u8];
        let read = (&control).read_exact(&mut admitted);
        let order = read.map(|()| Order::read(admitted[0], &mut std::io::empty(), false));
        match order {
            Ok(Ok(Order::Admitted)) => Ok(late),
            // The daemon is gone, or never admitted it.
            _ => std::process::exit(0),
        }
    });
    // Where Landlock cannot scope signals, the program's process is the init of a PID namespace
    // of the launch's own (`super::init`), which tells the program's status on a pipe.
    let (status, init_status) = match Enforcement::current().own_pid_namespace() {
        true => match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok((read, write)) => (Some(read), Some(write)),
            Err(errno) => refuse_early(&control, Stage::Supervisor.os(errno)),
        },
        false => (None, None),
    };
    // The program's process is forked now, off the launch path.
    let ahead = late.and_then(|late| {
        let own_pid_namespace = init_status.is_some();
        let waiting = move || {
            bound_capabilities().map_err(|err| Stage::Capabilities.os(err))?;
            match own_pid_namespace {
                true => super::init::prepare(),
                false => Ok(()),
            }
        };
        launch::fork_ahead(&control, launch, waiting, move |setup, text| {
            if let Some(status) = init_status {
                if let Err(failure) = super::init::fork_program(status) {
                    return failure;
                }
            }
            confine_and_exec(&text, network, &late, setup)
        })
    });
    let ahead = ahead
        .and_then(|ahead| {
            let ready = Answer::Ready {
                program: Some(ahead.pid()),
            }
            .encode();
            control
                .write_all(&ready)
                .map_err(|err| Stage::Control.os(err))?;
            Ok(ahead)
        })
        .unwrap_or_else(|failure| {
            let _ = control.write_all(&serde_json::to_vec(&failure).unwrap_or_default());
            exit_for(&failure)
        });
    if network == NetworkMode::Managed {
        // The listeners, for the ports the daemon sends before the launch: opened after the
        // fork, so the program never holds them.
        if let Err(failure) = open_listeners(&control) {
            // SAFETY: kill takes no pointers; the pid is our own unreaped child, which has no
            // launch yet.
            unsafe { libc::kill(ahead.pid(), libc::SIGKILL) };
            launch::refuse(&control, failure)
        }
    }
    ahead.supervise(&control, None, status);
    // A helper's namespaces were made for its one launch.
    std::process::exit(0)
}

/// A failure before the program's process exists: written instead of READY.
fn refuse_early(mut control: &UnixStream, failure: Failure) -> ! {
    let _ = control.write_all(&serde_json::to_vec(&failure).unwrap_or_default());
    exit_for(&failure)
}

/// In the program's process, with its launch: applies the plan `text` and executes the program,
/// or serves the fs operations the plan is for; returns why it could not.
fn confine_and_exec(
    text: &[u8],
    network: NetworkMode,
    late_filter: &seccomp::Late,
    setup: &ChildSetup,
) -> Failure {
    let plan = match parse(text, network) {
        Ok(plan) => plan,
        Err(failure) => return failure,
    };
    match run(plan, late_filter, setup) {
        Ok(FsOp) => {
            // SAFETY: close_range takes integers; no descriptor above 2 is owned by anything
            // still alive here. Closing the launch socket tells the daemon the sandbox is in
            // place.
            if unsafe { libc::close_range(3, libc::c_uint::MAX, 0) } != 0 {
                return Stage::Fds.os(std::io::Error::last_os_error());
            }
            super::fs_op::serve()
        }
        Err(failure) => failure,
    }
}

/// A managed network's listeners (and TUN device), as the plan the daemon sends asks, passed to
/// it.
fn open_listeners(control: &UnixStream) -> Result<(), Failure> {
    let managed = message::read_launch_frame(&mut &*control)?;
    let managed: ManagedPlan =
        serde_json::from_slice(&managed).map_err(|e| Stage::Network.fail(e))?;
    super::bridge::open(control, &managed).map_err(|err| Stage::Network.os(err))
}

/// Tells the daemon this helper's pid, with a pidfd of it.
fn hello(control: &UnixStream) -> std::io::Result<()> {
    let pid = std::process::id() as i32;
    let pidfd = crate::pidfd::open_owned(pid)?;
    let hello = Answer::Hello { pid }.encode();
    channel::send_all_with_fds(control, &hello, &[pidfd.as_raw_fd()])
}

/// The plan, for this helper's network mode.
fn parse(text: &[u8], network: NetworkMode) -> Result<Plan, Failure> {
    let plan: Plan = serde_json::from_slice(text).map_err(|e| Stage::Policy.fail(e))?;
    if plan.network_mode() != network {
        return Err(Stage::Policy.fail("the plan's network mode is not this helper's"));
    }
    Ok(plan)
}

/// The plan asks for an fs operation in place of a program, and the sandbox is in place.
struct FsOp;

/// Everything that does not depend on the plan; returns the seccomp filter still to attach.
fn start(network: NetworkMode) -> Result<seccomp::Late, Failure> {
    // SAFETY: getsid, getpid and setsid take integers only and change at most this
    // process's session.
    if unsafe { libc::getsid(0) != libc::getpid() } && unsafe { libc::setsid() } < 0 {
        return Err(Stage::Session.os(std::io::Error::last_os_error()));
    }
    let filters = seccomp::filters(network).map_err(|err| Stage::Seccomp.setup(err))?;
    // SAFETY: unshare takes flags only; the process is single-threaded, so it all moves.
    if network != NetworkMode::Enabled && unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
        return Err(Stage::Namespaces.os(std::io::Error::last_os_error()));
    }
    // Every launch gets its own mount namespace, if only for its own /proc. Made here, off
    // the launch path, as a follower of the host's mounts, so the view a launch builds from it
    // is still the host's as it is at the launch.
    // SAFETY: unshare takes flags only; the process is single-threaded, so it all moves.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } < 0 {
        return Err(Stage::Namespaces.os(std::io::Error::last_os_error()));
    }
    mounts::follow_host()
        .and_then(|()| mounts::own_proc())
        .map_err(|err| Stage::Mounts.setup(err))?;
    for hidden in crate::sandbox::hidden() {
        mounts::hide(&hidden.path).map_err(|err| Stage::Mounts.setup(err))?;
    }
    // The next fork, the program's process, is pid 1 of a namespace of its own
    // (`super::init`).
    let own_pid_namespace = Enforcement::current().own_pid_namespace();
    // SAFETY: unshare takes flags only; it changes only where this process's children go.
    if own_pid_namespace && unsafe { libc::unshare(libc::CLONE_NEWPID) } < 0 {
        return Err(Stage::Namespaces.os(std::io::Error::last_os_error()));
    }
    // The supervisor of the program's tree (`super::supervisor`).
    if !launch::become_subreaper() {
        return Err(Stage::Supervisor.os(std::io::Error::last_os_error()));
    }
    seccomp::apply(&filters.early).map_err(|err| Stage::Seccomp.setup(err))?;
    Ok(filters.late)
}

/// The child's part, in the supervisor's fork (which gave it its stdio and session): the plan.
fn run(mut plan: Plan, late_filter: &seccomp::Late, setup: &ChildSetup) -> Result<FsOp, Failure> {
    let argv: Vec<CString> = plan
        .argv
        .iter()
        .map(|arg| CString::new(arg.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| Stage::Policy.fail(e))?;
    let program = CString::new(plan.program.as_bytes()).map_err(|e| Stage::Policy.fail(e))?;
    // At the launch, not when the helper started: the host may have bind-mounted them since.
    mounts::hide_aliases(crate::sandbox::hidden()).map_err(|err| Stage::Mounts.setup(err))?;

    // Hidden by a view without Landlock, a program reads as missing, not as refused.
    let hidden_by_view = plan.fs.is_some()
        && !Enforcement::current().landlock_fs
        && executable_by_mode(&plan.program, plan.env.get("PATH").map(String::as_str));
    if let Some(fs) = &mut plan.fs {
        enter_view(fs, &plan.cwd, setup.tty)?;
    } else {
        // The old cwd may sit on a mount that the view has since covered.
        std::env::set_current_dir(&plan.cwd).map_err(|err| Stage::Cwd.os(err))?;
    }
    let no_tcp_bind = plan
        .managed_network
        .as_ref()
        .is_some_and(|managed| !managed.allow_local_binding);
    landlock::restrict(
        Enforcement::current(),
        plan.fs.as_ref().map(|fs| (&fs.grants[..], &fs.identities)),
        no_tcp_bind,
    )
    .map_err(|err| Stage::Landlock.setup(err))?;
    clear_capabilities().map_err(|err| Stage::Capabilities.os(err))?;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(Stage::NoNewPrivs.os(std::io::Error::last_os_error()));
    }
    // SAFETY: close_range takes integers only; it only marks fds close-on-exec (the control socket stays open to
    // exec).
    if unsafe { libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as i32) } != 0 {
        return Err(Stage::Fds.os(std::io::Error::last_os_error()));
    }
    let late_filter = late_filter.for_plan(no_tcp_bind);
    seccomp::apply(std::slice::from_ref(late_filter)).map_err(|err| Stage::Seccomp.setup(err))?;
    launch::apply_limits(setup)?;
    if plan.fs_op {
        return Ok(FsOp);
    }

    // Only now, with everything in place, the program's environment (execvp searches its PATH).
    for (key, value) in &plan.env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(Stage::Policy.fail(format!("invalid environment variable `{key}`")));
        }
        std::env::set_var(key, value);
    }

    let mut err = nix::unistd::execvp(&program, &argv).unwrap_err();
    if err == nix::errno::Errno::ENOENT && hidden_by_view {
        // The same refusal as Landlock's, where the view alone hides what it does not grant.
        err = nix::errno::Errno::EACCES;
    }
    let errno = err as i32;
    Err(Failure {
        stage: Stage::Exec,
        message: format!("cannot execute `{}`: {}", plan.program, err.desc()),
        errno: Some(errno),
        denied: match errno {
            libc::EACCES | libc::EPERM => {
                hidden_by_view
                    || executable_by_mode(&plan.program, plan.env.get("PATH").map(String::as_str))
            }
            _ => false,
        },
    })
}

/// Builds the view of `fs` and enters `cwd` in it; `tty`: the process runs on a PTY.
fn enter_view(fs: &mut FsPlan, cwd: &std::path::Path, tty: bool) -> Result<(), Failure> {
    // Before the view, whose binds of `/proc` paths come from this instance.
    proc_identities_from_own_proc(&mut fs.identities);
    mounts::apply(&fs.mounts, &mut fs.identities)
        .and_then(|()| mounts::hide_sockets(&fs.hidden_sockets))
        .map_err(|err| Stage::Mounts.setup(err))?;
    if let Some((grant, id)) = tty.then(own_terminal).flatten() {
        fs.identities.insert(grant.path.clone(), id);
        fs.grants.push(grant);
    }
    // The cwd the daemon resolved, not a directory or link put in its place since. The mount
    // view alone shows a cwd outside every grant as a bare directory of its own, which grants
    // nothing to swap in.
    let granted = Enforcement::current().landlock_fs
        || fs.grants.iter().any(|grant| cwd.starts_with(&grant.path));
    let dir = match granted {
        true => open::open_verified(cwd, &fs.identities)
            .map(|(dir, _)| dir)
            .map_err(|err| Stage::Cwd.setup(err))?,
        false => open::open_nofollow(cwd).map_err(|err| Stage::Cwd.os(err))?,
    };
    nix::unistd::fchdir(&dir).map_err(|errno| Stage::Cwd.os(errno))
}

/// Whether the program, looked up on `path_var`, is executable by its mode bits: then an
/// EACCES from exec came from the sandbox (`access(2)` is not subject to Landlock).
fn executable_by_mode(program: &str, path_var: Option<&str>) -> bool {
    let candidates: Vec<std::path::PathBuf> = if program.contains('/') {
        vec![program.into()]
    } else {
        path_var
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(program))
                    .collect()
            })
            .unwrap_or_default()
    };
    candidates.iter().any(|path| {
        crate::path::cstring(path)
            // SAFETY: valid NUL-terminated path.
            .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0)
    })
}

/// The PTY the process runs on (asked only in tty mode), which programs reopen as
/// /dev/pts/N, and the identity of the terminal it has open. None when the view does not show
/// it at that name: a private `/dev` (root write) has a `pts` of its own, as codex's has.
fn own_terminal() -> Option<(Grant, Identity)> {
    let path = std::fs::read_link("/proc/self/fd/0").ok()?;
    if !path.starts_with("/dev/pts/") {
        return None;
    }
    let id = Identity::of_stat(&nix::sys::stat::fstat(std::io::stdin()).ok()?);
    let shown = nix::sys::stat::lstat(&path).ok()?;
    (Identity::of_stat(&shown) == id).then_some((Grant { path, write: true }, id))
}

/// The daemon took the identities of `/proc` paths on the host's procfs; the sandbox now sees
/// its own instance (`mounts::own_proc`), which this helper just mounted read-only and where
/// nothing can plant a link, so those identities are taken again from it.
fn proc_identities_from_own_proc(identities: &mut Identities) {
    for (path, id) in identities.iter_mut() {
        if path.starts_with("/proc") {
            // As the daemon took it (`Identity::stat`), only on this instance.
            if let Ok(own) = crate::sandbox::plan::Identity::stat(path) {
                *id = own;
            }
        }
    }
}
