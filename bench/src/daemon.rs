//! The daemon under measure, started on a state dir of its own: on tmpfs as deployed by
//! default, on the machine's disk, or keeping no state, for the fan-out's rows.

use anyhow::Context as _;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Where a daemon keeps what it needs to find its processes again after a restart.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum StateDir {
    /// On tmpfs, as the default state dir is (/run, $XDG_RUNTIME_DIR), when there is one.
    Tmpfs,
    /// On a disk filesystem (ext4, overlay, xfs…), as a container's `/run` or a disk-backed
    /// Kubernetes `emptyDir` is.
    Disk,
    /// `none`: no state kept.
    Off,
}

/// Where a daemon listens unless it is a fleet's pod: a free loopback port.
const LOOPBACK: &str = "ws://127.0.0.1:0";

pub(crate) struct Daemon {
    pub(crate) child: std::process::Child,
    pub(crate) url: String,
    /// Its own state dir, never the host's default, which a daemon of the host may hold; a
    /// successor gets the same one. None: it keeps no state.
    state_dir: Option<Arc<TempDir>>,
}

impl Daemon {
    /// A daemon keeping state on tmpfs, as deployed by default.
    pub(crate) fn start(binary: &Path, args: &[&str]) -> anyhow::Result<Self> {
        Self::start_keeping(binary, args, StateDir::Tmpfs)
    }

    pub(crate) fn start_keeping(
        binary: &Path,
        args: &[&str],
        state: StateDir,
    ) -> anyhow::Result<Self> {
        let parent = match state {
            StateDir::Off => return Self::spawn(binary, LOOPBACK, args, &[], None),
            StateDir::Tmpfs if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
            StateDir::Tmpfs => std::env::temp_dir(),
            StateDir::Disk => disk_dir()?,
        };
        let state_dir = tempfile::Builder::new()
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(parent)?;
        Self::spawn(binary, LOOPBACK, args, &[], Some(Arc::new(state_dir)))
    }

    /// A daemon on `state_dir`, a predecessor's.
    pub(crate) fn start_on(
        binary: &Path,
        args: &[&str],
        state_dir: Arc<TempDir>,
    ) -> anyhow::Result<Self> {
        Self::spawn(binary, LOOPBACK, args, &[], Some(state_dir))
    }

    /// A pod of a fleet, as deployed: listening on `listen`, keeping no state, `env` set.
    pub(crate) fn start_pod(
        binary: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::spawn(binary, listen, args, env, None)
    }

    fn spawn(
        binary: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
        state_dir: Option<Arc<TempDir>>,
    ) -> anyhow::Result<Self> {
        let mut child = std::process::Command::new(binary)
            .args(["--listen", listen, "--log", "warn"])
            .args(args)
            .envs(env.iter().copied())
            // Not the flag: a `--daemon` older than it ignores the variable.
            .env(
                "EXEC_SERVER_STATE_DIR",
                state_dir
                    .as_ref()
                    .map_or(Path::new("none"), |dir| dir.path()),
            )
            .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line)?;
        Ok(Self {
            child,
            url: line.trim().to_owned(),
            state_dir,
        })
    }

    /// SIGKILL, as a crash or the OOM killer; returns its state dir for a successor.
    pub(crate) fn crash(mut self) -> anyhow::Result<Arc<TempDir>> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.state_dir
            .clone()
            .context("a daemon that keeps no state has none to hand on")
    }

    pub(crate) fn rss_kib(&self) -> f64 {
        self.status_kib("VmRSS:")
    }

    /// The peak resident set since the daemon started.
    pub(crate) fn peak_rss_kib(&self) -> f64 {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> f64 {
        status_kib(self.child.id(), field)
    }
}

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `VmHWM:`); NaN when unreadable.
pub(crate) fn status_kib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN)
}

impl Drop for Daemon {
    /// A shutdown (SIGTERM) ends the daemon's processes; a SIGKILL would leave them running
    /// for a successor on its state dir. SIGKILL only for a daemon that does not stop.
    fn drop(&mut self) {
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory on a disk filesystem: the temporary directory unless it is tmpfs, else the
/// bench's build directory.
fn disk_dir() -> anyhow::Result<PathBuf> {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    [std::env::temp_dir(), target]
        .into_iter()
        .find(|dir| !in_memory(dir))
        .context("the temporary and the build directory both lie on tmpfs: no disk to measure")
}

/// Whether `dir` lies on tmpfs or ramfs (or cannot be inspected).
fn in_memory(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return true;
    };
    // SAFETY: a NUL-terminated path and a statfs buffer of the right size.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut fs) } != 0 {
        return true;
    }
    // ramfs's magic number (linux/magic.h), which libc does not export.
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    matches!(fs.f_type, libc::TMPFS_MAGIC | RAMFS_MAGIC)
}
