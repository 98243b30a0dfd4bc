//! Starting a child on pipes or on a PTY, under its supervisor (which holds its whole tree),
//! as the leader of its own process group so that signals reach what it starts.

use super::input_wait::StdinObject;
use super::supervisor::{ChildSetup, PlainLaunch};
use super::tree::{self, Started, Tree};
use super::ProcessError;
use crate::sandbox::pool::Kind;
use exec_server_protocol::process::TerminalSize;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What to run, resolved to host terms.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub program: String,
    pub args: Vec<String>,
    pub arg0: Option<String>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub tty: bool,
    pub pipe_stdin: bool,
    /// When set (pipes only), the child's stdin is a duplicate of this descriptor instead of a
    /// pipe or /dev/null: `sandbox::run_fs_op` hands its helper one end of a socket pair.
    pub stdin_fd: Option<Arc<OwnedFd>>,
    pub size: TerminalSize,
    pub limits: Limits,
}

/// Resource limits: per process (set by the child before its exec) and per tree (cgroups).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_open_files: Option<u64>,
    pub max_cpu_seconds: Option<u64>,
    pub max_memory_bytes: Option<u64>,
    pub max_processes: Option<u64>,
}

/// The daemon's ends of a child's stdio.
pub enum ChildIo {
    Pipes {
        stdin: Option<OwnedFd>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    },
    Pty {
        master: OwnedFd,
        /// The terminal side, as the child's processes hold it.
        terminal: Option<StdinObject>,
    },
}

pub struct Spawned {
    /// The program's supervisor, which holds its tree.
    pub tree: Tree,
    pub io: ChildIo,
}

/// The capacity asked for the stdout and stderr pipes (Linux default: 64 KiB).
pub const OUTPUT_PIPE_BYTES: usize = 256 * 1024;

pub const DEFAULT_SIZE: TerminalSize = TerminalSize { rows: 24, cols: 80 };

/// Starts `spec`'s program under a supervisor, on pipes or on a PTY as its controlling
/// terminal, as the leader of its own process group (of its session on a PTY). A failure
/// is the start error, naming the working directory when that is what is missing (the OS
/// reports it as the program's ENOENT or ENOTDIR).
pub async fn start(spec: &LaunchSpec) -> Result<Spawned, ProcessError> {
    let cannot_start = |err| start_error(&spec.program, err);
    let (io, stdio) = detached_stdio(spec).map_err(cannot_start)?;
    let mut argv = vec![spec.arg0.clone().unwrap_or_else(|| spec.program.clone())];
    argv.extend(spec.args.iter().cloned());
    let launch = PlainLaunch {
        program: resolve_program(&spec.program, &spec.env, &spec.cwd)
            .to_string_lossy()
            .into_owned(),
        argv,
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
    };
    let payload = serde_json::to_vec(&launch).map_err(ProcessError::EncodeLaunch)?;
    let (tree, started, _) = tree::launch(Kind::Plain, spec, &stdio, &payload, None)
        .await
        .map_err(|err| start_error(&spec.program, err))?;
    match started {
        Started::Executed => Ok(Spawned { tree, io }),
        Started::Failed { failure } => Err(match failure.errno {
            Some(errno) => exec_error(spec, std::io::Error::from_raw_os_error(errno)),
            None => start_error(&spec.program, failure.message),
        }),
    }
}

impl LaunchSpec {
    /// What the supervisor's child applies to itself.
    pub fn setup(&self) -> ChildSetup {
        ChildSetup {
            tty: self.tty,
            max_open_files: self.limits.max_open_files,
            max_cpu_seconds: self.limits.max_cpu_seconds,
        }
    }
}

/// Where `posix_spawnp` would find `program`: on the child's PATH, or the daemon's when the
/// child has none (as std's spawn did); the first regular, executable file. Names with a slash,
/// no PATH, or no match are returned as they are, so the exec reports the error.
fn resolve_program(program: &str, env: &BTreeMap<String, String>, cwd: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let own = std::env::var("PATH").ok();
    let Some(path) = env
        .get("PATH")
        .or(own.as_ref())
        .filter(|_| !program.contains('/'))
    else {
        return PathBuf::from(program);
    };
    path.split(':')
        .map(|dir| cwd.join(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| PathBuf::from(program))
}

/// The stdio of a child that its supervisor starts: our side, and the child's stdin, stdout and
/// stderr (which the supervisor receives), all close-on-exec.
pub fn detached_stdio(spec: &LaunchSpec) -> std::io::Result<(ChildIo, [OwnedFd; 3])> {
    if spec.tty {
        let (pty, pts) = pty_process::open().map_err(pty_error)?;
        pty.resize(pty_process::Size::new(spec.size.rows, spec.size.cols))
            .map_err(pty_error)?;
        let pts = std::os::fd::AsFd::as_fd(&pts);
        let ends = [
            pts.try_clone_to_owned()?,
            pts.try_clone_to_owned()?,
            pts.try_clone_to_owned()?,
        ];
        let io = ChildIo::Pty {
            master: pty.into(),
            terminal: StdinObject::of(&ends[0]),
        };
        return Ok((io, ends));
    }
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from);
    let (child_stdin, stdin) = match &spec.stdin_fd {
        Some(fd) => (fd.try_clone()?, None),
        None if spec.pipe_stdin => {
            let (read, write) = pipe()?;
            (read, Some(write))
        }
        None => (std::fs::File::open("/dev/null")?.into(), None),
    };
    let (stdout, child_stdout) = pipe()?;
    let (stderr, child_stderr) = pipe()?;
    grow_output_pipe(stdout.as_raw_fd());
    grow_output_pipe(stderr.as_raw_fd());
    let io = ChildIo::Pipes {
        stdin,
        stdout,
        stderr,
    };
    Ok((io, [child_stdin, child_stdout, child_stderr]))
}

/// Fewer, larger reads for chatty children; on failure (a per-user limit) the pipe simply
/// keeps its default size.
fn grow_output_pipe(fd: std::os::fd::RawFd) {
    // SAFETY: fcntl on a pipe fd we own.
    unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, OUTPUT_PIPE_BYTES as libc::c_int) };
}

/// The error for an exec that failed with `err`, naming the working directory when that is
/// what is missing. Looked at only after a failure, so a normal launch pays nothing for it.
fn exec_error(spec: &LaunchSpec, err: std::io::Error) -> ProcessError {
    let cwd = spec.cwd.display();
    match std::fs::metadata(&spec.cwd) {
        Err(missing) if matches!(missing.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            start_error(
                &spec.program,
                format!("the working directory `{cwd}` does not exist"),
            )
        }
        Ok(meta) if !meta.is_dir() => start_error(
            &spec.program,
            format!("the working directory `{cwd}` is not a directory"),
        ),
        _ => start_error(&spec.program, err),
    }
}

/// The error for a program that could not be started.
pub fn start_error(program: &str, why: impl std::fmt::Display) -> ProcessError {
    ProcessError::StartFailed {
        program: program.to_owned(),
        why: why.to_string(),
    }
}

fn pty_error(err: pty_process::Error) -> std::io::Error {
    match err {
        pty_process::Error::Io(io) => io,
        other => std::io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_like_execvp_with_the_child_path() {
        let env = |path: &str| BTreeMap::from([("PATH".to_owned(), path.to_owned())]);
        let root = Path::new("/");
        assert_eq!(
            resolve_program("sh", &env("/nonexistent:/bin:/usr/bin"), root),
            Path::new("/bin/sh")
        );
        // An empty PATH entry is the working directory, as for execvp.
        assert_eq!(
            resolve_program("sh", &env(":/usr/bin"), Path::new("/bin")),
            Path::new("/bin/sh")
        );
        assert_eq!(resolve_program("./x", &env("/bin"), root), Path::new("./x"));
        assert_eq!(
            resolve_program("no-such-program", &env("/bin"), root),
            Path::new("no-such-program")
        );
        // Without a PATH of its own, the child's program is found on the daemon's.
        let found = resolve_program("sh", &BTreeMap::new(), root);
        assert!(found.is_absolute() && found.ends_with("sh"), "{found:?}");
    }
}
