//! Confined helpers for sandboxed `fs/*` calls, kept per plan and reused.
//!
//! Setting a sandbox up (a helper, its mount view, Landlock, seccomp) costs far more than a
//! small file operation, so a helper that has confined itself for an fs call stays and serves
//! the next calls whose plan is the same (`crate::child::fs_op::serve`). Every call still
//! resolves its intent afresh (`crate::sandbox::prepare_fs_op`: canonical paths, globs, protected names and
//! the identity of each path) and is served only by a helper set up with exactly that plan, so
//! reuse never widens what a call gets: a root replaced meanwhile, a new glob match or a new
//! protected name changes the plan and gets a helper of its own. An idle helper is retired
//! after [`IDLE`] (its placeholders for missing protected names, mount points in its
//! namespace, go with it), and at most [`MAX_IDLE`] wait.

use super::sandboxed::{Launch, Sandboxed};
use super::spawn::ChildIo;
use super::spec::{LaunchSpec, DEFAULT_SIZE};
use super::tree;
use super::SETUP_TIMEOUT;
use crate::ipc::channel;
use crate::ipc::message::{Answer, FsReply, FsRequest, Report};
use crate::rpc::RpcError;
use crate::sandbox::denial::DenialContext;
use crate::sandbox::plan::Plan;
use crate::sandbox::{prepare_fs_op, prepare_walks, Prepared};
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long an idle helper waits for a call under its plan. Its placeholders stay as long.
const IDLE: Duration = Duration::from_millis(500);

/// Idle helpers kept at most, over all plans.
const MAX_IDLE: usize = 8;

/// Most descriptors one reply may pass back; more are closed by the kernel.
const MAX_PASSED_FDS: usize = 4;

/// How a sandboxed fs operation is named in messages.
const FS_OP: &str = "exec-server fs operation";

/// The output of [`run_fs_op`].
#[derive(Debug)]
pub(crate) struct FsOpOutput {
    /// The helper's reply, or None when it ended without one (then `stderr` and `exit_code`
    /// say why).
    pub(crate) reply: Option<FsReply>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) exit_code: i32,
    /// Descriptors the operation passed back ahead of its reply, close-on-exec.
    pub(crate) fds: Vec<OwnedFd>,
    /// What the classifier knows about this run's policy.
    pub(crate) context: Arc<DenialContext>,
}

/// A confined helper serving fs calls under `plan`.
struct Server {
    plan: Plan,
    runtime: tokio::runtime::Id,
    socket: tokio::net::UnixStream,
    stderr: tokio::net::unix::pipe::Receiver,
    tree: tree::Tree,
    sandboxed: Sandboxed,
    idle_since: Instant,
}

static IDLE_SERVERS: Mutex<Vec<Server>> = Mutex::new(Vec::new());

/// Runs one sandboxed `fs/*` operation under `sandbox`, confined as a process started in `cwd`
/// would be, so the kernel enforces the intent on the operation itself. Nothing is executed, so the intent need not grant the
/// daemon's binary or the platform libraries, and the operation gets exactly what the intent
/// grants. The intent must restrict the file system (`crate::fs::sandbox` runs every other
/// call directly).
pub(crate) async fn run_fs_op(
    sandbox: &FileSystemSandboxContext,
    cwd: &Path,
    request: &FsRequest,
) -> Result<FsOpOutput, RpcError> {
    // A resolution that walks directory trees runs off the async workers.
    let prepared = if prepare_walks(sandbox) {
        let (sandbox, cwd) = (sandbox.clone(), cwd.to_path_buf());
        tokio::task::spawn_blocking(move || prepare_fs_op(&sandbox, &cwd, FS_OP))
            .await
            .map_err(|err| RpcError::internal(err.to_string()))??
    } else {
        prepare_fs_op(sandbox, cwd, FS_OP)?
    };
    let Some(prepared) = prepared else {
        return Err(RpcError::internal(
            "a sandboxed fs operation needs an intent that restricts something",
        ));
    };
    // This call's own hold on its protected names lasts until its reply.
    let (mut server, _call) = match take_idle(&prepared.plan) {
        Some(server) => (server, Some(prepared)),
        None => (Server::start(prepared, cwd).await?, None),
    };
    let context = server.sandboxed.context.clone();
    let (reply, fds) = server.call(request).await;
    let output = FsOpOutput {
        reply,
        stderr: Vec::new(),
        exit_code: 0,
        fds,
        context,
    };
    if output.reply.is_some() {
        put_back(server);
        return Ok(output);
    }
    let (exit_code, stderr) = server.retire().await;
    Ok(FsOpOutput {
        exit_code,
        stderr,
        ..output
    })
}

/// An idle helper set up with exactly `plan`, on this runtime.
fn take_idle(plan: &Plan) -> Option<Server> {
    let runtime = tokio::runtime::Handle::current().id();
    let mut idle = IDLE_SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    let index = idle
        .iter()
        .position(|server| server.runtime == runtime && server.plan == *plan)?;
    Some(idle.swap_remove(index))
}

/// Keeps `server` for the next call under its plan; the first idle one starts the reaper.
fn put_back(mut server: Server) {
    server.idle_since = Instant::now();
    let mut idle = IDLE_SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    let first = idle.is_empty();
    idle.push(server);
    let excess = idle.len().saturating_sub(MAX_IDLE);
    let oldest: Vec<Server> = idle.drain(..excess).collect();
    drop(idle);
    for server in oldest {
        tokio::spawn(server.retire());
    }
    if first {
        tokio::spawn(reap());
    }
}

/// At shutdown: retires every idle helper of this runtime now, so that the placeholders they
/// mount are let go before the daemon removes those no launch holds.
pub(crate) async fn retire_idle() {
    let runtime = tokio::runtime::Handle::current().id();
    let idle: Vec<Server> = {
        let mut idle = IDLE_SERVERS.lock().unwrap_or_else(|e| e.into_inner());
        let (ours, others) = idle.drain(..).partition(|server| server.runtime == runtime);
        *idle = others;
        ours
    };
    futures::future::join_all(idle.into_iter().map(Server::retire)).await;
}

/// Retires idle helpers past [`IDLE`], until none waits.
async fn reap() {
    loop {
        tokio::time::sleep(IDLE / 2).await;
        let runtime = tokio::runtime::Handle::current().id();
        let (expired, left) = {
            let mut idle = IDLE_SERVERS.lock().unwrap_or_else(|e| e.into_inner());
            let (expired, kept): (Vec<Server>, Vec<Server>) = idle.drain(..).partition(|server| {
                server.runtime == runtime && server.idle_since.elapsed() >= IDLE
            });
            *idle = kept;
            let left = idle
                .iter()
                .filter(|server| server.runtime == runtime)
                .count();
            (expired, left)
        };
        for server in expired {
            server.retire().await;
        }
        if left == 0 {
            return;
        }
    }
}

impl Server {
    /// Starts a helper that confines itself with `prepared`'s plan and then serves calls.
    async fn start(prepared: Prepared, cwd: &Path) -> Result<Self, RpcError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let plan = prepared.plan.clone();
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| RpcError::internal(format!("cannot create a socket pair: {e}")))?;
        let mut spec = LaunchSpec {
            program: FS_OP.into(),
            args: Vec::new(),
            arg0: None,
            cwd: cwd.to_path_buf(),
            env: Default::default(),
            tty: false,
            pipe_stdin: false,
            stdin_fd: Some(Arc::new(theirs)),
            size: DEFAULT_SIZE,
            limits: Default::default(),
            run_as: None,
        };
        let mut launch = Launch::new(prepared, &mut spec).map_err(|err| err.into_rpc(FS_OP))?;
        let spawned = launch
            .spawn(&spec)
            .await
            .map_err(|err| err.into_rpc(FS_OP))?;
        // Only the helper's child may hold the other end, so its exit ends the conversation.
        drop(spec);
        let ChildIo::Pipes {
            stdin: None,
            stdout: _,
            stderr,
        } = spawned.io
        else {
            unreachable!("spawned on pipes with stdin on the socket");
        };
        let io_error = |e: std::io::Error| RpcError::internal(format!("the helper's socket: {e}"));
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr).map_err(io_error)?;
        let socket = std::os::unix::net::UnixStream::from(ours);
        socket.set_nonblocking(true).map_err(io_error)?;
        Ok(Self {
            plan,
            runtime: tokio::runtime::Handle::current().id(),
            socket: tokio::net::UnixStream::from_std(socket).map_err(io_error)?,
            stderr,
            tree: spawned.tree,
            sandboxed: launch.into_sandboxed(),
            idle_since: Instant::now(),
        })
    }

    /// One round trip: the reply (None: the helper ended without one) and the descriptors
    /// passed ahead of it.
    async fn call(&mut self, request: &FsRequest) -> (Option<FsReply>, Vec<OwnedFd>) {
        let mut fds = Vec::new();
        if self.socket.write_all(&request.encode()).await.is_err() {
            return (None, fds);
        }
        loop {
            let mut marker = [0u8; 1];
            let Ok(received) =
                channel::recv_fds_async(&self.socket, &mut marker, MAX_PASSED_FDS).await
            else {
                return (None, fds);
            };
            fds.extend(received.fds);
            match received.bytes {
                1 if Answer::passes_file(marker[0]) => continue,
                1 => return (self.read_reply(marker[0]).await, fds),
                _ => return (None, fds),
            }
        }
    }

    /// The reply whose marker was `marker`: its frame follows.
    async fn read_reply(&mut self, marker: u8) -> Option<FsReply> {
        let len = self.socket.read_u32_le().await.ok()? as usize;
        let mut frame = vec![0; len];
        self.socket.read_exact(&mut frame).await.ok()?;
        Answer::fs_reply(marker, &frame)
    }

    /// Ends the helper: closing the socket ends its serving loop, closing the control socket
    /// makes its supervisor kill what is left and exit, which is awaited, since placeholders
    /// are mount points in its namespace until then. Returns its exit code and what it wrote
    /// on stderr (why it ended, when it did so on its own).
    async fn retire(self) -> (i32, Vec<u8>) {
        let Self {
            socket,
            mut stderr,
            tree,
            sandboxed,
            ..
        } = self;
        drop(socket);
        let tree::Tree {
            supervisor,
            mut reports,
            orders,
            ..
        } = tree;
        let exited = async {
            loop {
                match reports.next().await {
                    Some(Report::Exited { code, .. }) => return code,
                    Some(_) => {}
                    None => return -1,
                }
            }
        };
        let code = tokio::time::timeout(SETUP_TIMEOUT, exited)
            .await
            .unwrap_or(-1);
        let mut message = Vec::new();
        let _ = tokio::time::timeout(
            Duration::from_millis(100),
            (&mut stderr).take(64 * 1024).read_to_end(&mut message),
        )
        .await;
        drop((reports, orders));
        if let Some(supervisor) = supervisor {
            supervisor.exited().await;
        }
        // Letting go of placeholders may scan the mount namespaces: off the async workers.
        let _ = tokio::task::spawn_blocking(move || drop(sandboxed)).await;
        (code, message)
    }
}
