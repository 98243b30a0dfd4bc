//! Starting a child on pipes or on a PTY, under its supervisor (which holds its whole tree),
//! as the leader of its own process group so that signals reach what it starts.

use super::pool::Kind;
use super::spec::LaunchSpec;
use super::tree::{self, Started, Tree};
use super::LaunchError;
use crate::ipc::message::PlainLaunch;
use crate::os::pipe::OUTPUT_PIPE_BYTES;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The daemon's ends of a child's stdio.
pub(crate) enum ChildIo {
    Pipes {
        stdin: Option<OwnedFd>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    },
    Pty {
        master: OwnedFd,
        /// The terminal side's device number, as the child's processes hold it.
        terminal: Option<u64>,
    },
}

pub(crate) struct Spawned {
    /// The program's supervisor, which holds its tree.
    pub tree: Tree,
    pub io: ChildIo,
}

/// Starts `spec`'s program under a supervisor, on pipes or on a PTY as its controlling
/// terminal, as the leader of its own process group (of its session on a PTY). A failed exec
/// names the working directory when that is what is missing (the OS reports it as the
/// program's ENOENT or ENOTDIR).
pub(crate) async fn start(spec: &LaunchSpec) -> Result<Spawned, LaunchError> {
    let (io, stdio) = detached_stdio(spec).map_err(LaunchError::Stdio)?;
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
    let payload = serde_json::to_vec(&launch).expect("a launch serializes");
    let (tree, started, _) = tree::launch(Kind::Plain, spec, &stdio, &payload, None).await?;
    match started {
        Started::Executed => Ok(Spawned { tree, io }),
        Started::Failed { failure } => Err(match failure.errno {
            Some(errno) => exec_error(spec, std::io::Error::from_raw_os_error(errno)),
            None => LaunchError::Child(failure.message),
        }),
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
pub(crate) fn detached_stdio(spec: &LaunchSpec) -> std::io::Result<(ChildIo, [OwnedFd; 3])> {
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
            terminal: nix::sys::stat::fstat(&ends[0])
                .ok()
                .map(|stat| stat.st_rdev),
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
fn exec_error(spec: &LaunchSpec, err: std::io::Error) -> LaunchError {
    match std::fs::metadata(&spec.cwd) {
        Err(missing) if matches!(missing.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            LaunchError::MissingCwd(spec.cwd.clone())
        }
        Ok(meta) if !meta.is_dir() => LaunchError::CwdNotDirectory(spec.cwd.clone()),
        _ => LaunchError::Exec(err),
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
