//! codex's own exec-server, the referee for codex behaviour: the npm package `@openai/codex` at
//! a pinned version, installed into the build directory when missing (as the bench installs
//! sshd), and started on a loopback port with a `CODEX_HOME` of its own. Other npm tools the
//! tests drive (`buf`, the Connect client of the envd tests) are installed the same way.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The version every differential test is written against; a bump shows up as test diffs.
pub const CODEX_VERSION: &str = "0.171.0";

/// The `codex` launcher, installed with npm under `target/codex-peer-<version>` on first use.
pub fn codex_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let package = format!("@openai/codex@{CODEX_VERSION}");
            npm_binary(&format!("codex-peer-{CODEX_VERSION}"), &package, "codex")
        })
        .clone()
}

/// The launcher `bin` of the npm package `package` (`name@version`), installed into
/// `target/<directory>` when missing. Concurrent test processes serialise on an exclusive lock
/// of the install directory.
pub fn npm_binary(directory: &str, package: &str, bin: &str) -> PathBuf {
    let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .join(directory);
    let binary = prefix.join("node_modules/.bin").join(bin);
    std::fs::create_dir_all(&prefix).expect("create the npm install directory");
    let lock = std::fs::File::open(&prefix).expect("open the npm install directory");
    // SAFETY: flock on a descriptor we own; it is released when `lock` is dropped.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    assert_eq!(locked, 0, "lock the npm install directory");
    if !binary.exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg(package)
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|err| panic!("npm installs {package} (apt install npm): {err}"));
        assert!(status.success(), "npm install {package} failed");
    }
    binary
}

/// A running `codex exec-server`; killed on drop.
pub struct CodexPeer {
    child: Child,
    /// The `ws://127.0.0.1:PORT` it listens on.
    pub url: String,
    /// Held open: codex may log to stdout later, and a closed pipe would kill it.
    _stdout: BufReader<std::process::ChildStdout>,
    _home: tempfile::TempDir,
}

impl CodexPeer {
    /// `codex exec-server --listen ws://127.0.0.1:0` plus `args`.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// As `start`, with extra environment variables.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_without(args, env, &[])
    }

    /// As `start_with`, with the variables named in `removed` taken out of its environment.
    pub fn start_without(args: &[&str], env: &[(&str, &str)], removed: &[&str]) -> Self {
        Self::start_as(None, args, env, removed)
    }

    /// As `start`, running as `nobody` (uid and gid 65534), whose home it is given.
    pub fn start_unprivileged() -> Self {
        Self::start_unprivileged_with(&[])
    }

    /// [`CodexPeer::start_unprivileged`] with `env` added (a `HOME` there wins).
    pub fn start_unprivileged_with(env: &[(&str, &str)]) -> Self {
        Self::start_as(Some(65534), &[], env, &[])
    }

    fn start_as(uid: Option<u32>, args: &[&str], env: &[(&str, &str)], removed: &[&str]) -> Self {
        // codex refuses a CODEX_HOME under /tmp for some operations; /var/tmp is outside it.
        let home = tempfile::tempdir_in("/var/tmp").expect("CODEX_HOME");
        let mut command = Command::new(codex_binary());
        if let Some(uid) = uid {
            std::os::unix::fs::chown(home.path(), Some(uid), Some(uid)).expect("chown its home");
            command
                .uid(uid)
                .gid(uid)
                .env("HOME", home.path())
                .current_dir("/");
        }
        command
            .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
            .args(args)
            .env("CODEX_HOME", home.path())
            .envs(env.iter().copied())
            // Its own group: the npm launcher (node) runs the native binary as a child, which
            // would outlive a kill of the launcher alone.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for key in removed {
            command.env_remove(key);
        }
        let mut child = command.spawn().expect("start codex exec-server");
        let stdout = child.stdout.take().expect("codex stdout");
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("codex prints its listening URL");
        let url = line.trim().to_owned();
        assert!(
            url.starts_with("ws://"),
            "codex exec-server printed {url:?}"
        );
        Self {
            child,
            url,
            _stdout: stdout,
            _home: home,
        }
    }
}

/// `codex exec-server` started with `args` and no `--listen`, as in remote mode, its stderr
/// piped (remote mode logs there and prints nothing on stdout); killed on drop.
pub struct RemoteCodex {
    pub child: Child,
    _home: tempfile::TempDir,
}

impl CodexPeer {
    /// `codex exec-server ARGS` with `env` added (remote mode: `--remote …`).
    pub fn spawn_remote(args: &[&str], env: &[(&str, &str)]) -> RemoteCodex {
        let home = tempfile::tempdir_in("/var/tmp").expect("CODEX_HOME");
        let child = Command::new(codex_binary())
            .arg("exec-server")
            .args(args)
            .env("CODEX_HOME", home.path())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // As in `start_with`: the whole group dies with it, the native server too.
            .process_group(0)
            .spawn()
            .expect("start codex exec-server");
        RemoteCodex { child, _home: home }
    }
}

impl Drop for RemoteCodex {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process group this server leads; no memory is involved.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for CodexPeer {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process group this peer leads; no memory is involved.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
