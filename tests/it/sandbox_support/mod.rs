//! Shared pieces of the sandbox suites: workspaces, profiles and a probe runner.

use crate::common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The real interpreter (the pyenv shim is a script that reads more than the probes grant).
pub fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 on PATH");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    })
}

pub fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A workspace the sandbox may write, and an outside directory it must not touch.
pub struct Dirs {
    pub ws: PathBuf,
    pub outside: PathBuf,
    _ws: tempfile::TempDir,
    _outside: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Self {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f"), "original").unwrap();
        Self {
            ws: ws.path().canonicalize().unwrap(),
            outside: outside.path().canonicalize().unwrap(),
            _ws: ws,
            _outside: outside,
        }
    }

    pub fn out(&self, name: &str) -> PathBuf {
        self.outside.join(name)
    }

    pub fn ws(&self, name: &str) -> PathBuf {
        self.ws.join(name)
    }

    /// Asserts the outside directory still holds exactly `f` = "original".
    pub fn assert_outside_untouched(&self) {
        let names: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["f"], "the outside directory changed");
        assert_eq!(std::fs::read_to_string(self.out("f")).unwrap(), "original");
    }

    /// Names in the workspace (no placeholder may be left behind).
    pub fn ws_names(&self) -> Vec<String> {
        names_in(&self.ws)
    }

    /// Asserts the workspace comes to hold exactly `expected` ([`assert_names_settle`]).
    pub async fn assert_ws_names_settle(&self, expected: &[&str]) {
        assert_names_settle(&self.ws, expected).await;
    }
}

/// Asserts `dir` comes to hold exactly `expected`: placeholders stay a moment after the last
/// sandbox that held them (for the next launch), and while a confined helper of sandboxed fs
/// calls waits for its next call.
pub async fn assert_names_settle(dir: &Path, expected: &[&str]) {
    let settled = tokio::time::timeout(TIMEOUT, async {
        while names_in(dir) != expected {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(settled.is_ok(), "{:?} != {expected:?}", names_in(dir));
}

/// The names in `dir`, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

pub fn entry(path: Value, access: &str) -> Value {
    json!({"path": path, "access": access})
}

pub fn special(kind: &str) -> Value {
    json!({"type": "special", "value": {"kind": kind}})
}

pub fn special_sub(kind: &str, subpath: &str) -> Value {
    json!({"type": "special", "value": {"kind": kind, "subpath": subpath}})
}

pub fn path(p: &Path) -> Value {
    json!({"type": "path", "path": uri(p)})
}

/// A managed restricted profile with these entries, anchored at `ws`, which is also its one
/// workspace root (sent explicitly, as clients do: roots never default to the cwd).
pub fn restricted(ws: &Path, entries: Vec<Value>, network: &str) -> Value {
    json!({
        "permissions": {"type": "managed", "network": network,
            "file_system": {"type": "restricted", "entries": entries}},
        "cwd": uri(ws),
        "workspaceRoots": [uri(ws)],
        "windowsSandboxLevel": "disabled",
    })
}

/// Read everything, write the workspace (the common workspace-write profile).
pub fn workspace_write(ws: &Path, network: &str) -> Value {
    restricted(
        ws,
        vec![
            entry(special("root"), "read"),
            entry(special("project_roots"), "write"),
        ],
        network,
    )
}

pub fn params(id: &str, argv: &[&str], cwd: &Path, sandbox: Value) -> Value {
    json!({
        "processId": id,
        "argv": argv,
        "cwd": uri(cwd),
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"},
        "tty": false,
        "sandbox": sandbox,
    })
}

#[derive(Debug)]
pub struct Outcome {
    pub output: String,
    pub code: i64,
    pub denied: bool,
}

/// Starts a process, reads it to the end, and checks that `process/start` reported the
/// Linux sandbox.
pub async fn run(client: &Client, params: Value) -> Outcome {
    let id = params["processId"].as_str().unwrap().to_owned();
    let started = client.call("process/start", params).await;
    assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
    let (bytes, last) = read_all(client, &id).await;
    Outcome {
        output: String::from_utf8_lossy(&bytes).into_owned(),
        code: last["exitCode"].as_i64().unwrap(),
        denied: last["sandboxDenied"].as_bool().unwrap(),
    }
}

/// Runs `sh -c script` under `sandbox` in `cwd`.
pub async fn sh(client: &Client, id: &str, cwd: &Path, sandbox: &Value, script: &str) -> Outcome {
    run(
        client,
        params(id, &["sh", "-c", script], cwd, sandbox.clone()),
    )
    .await
}

/// Runs a Python probe under `sandbox` in `cwd`.
pub async fn py(client: &Client, id: &str, cwd: &Path, sandbox: &Value, code: &str) -> Outcome {
    run(
        client,
        params(id, &[python(), "-c", code], cwd, sandbox.clone()),
    )
    .await
}

/// Asserts a probe failed, was classified as a sandbox denial, and printed `expect`.
pub fn assert_denied(outcome: &Outcome, expect: &str) {
    assert_ne!(outcome.code, 0, "{outcome:?}");
    assert!(outcome.denied, "not classified as denied: {outcome:?}");
    assert!(
        outcome.output.contains(expect),
        "expected {expect:?} in {outcome:?}"
    );
}

/// Asserts a probe succeeded.
pub fn assert_ok(outcome: &Outcome) {
    assert_eq!(outcome.code, 0, "{outcome:?}");
    assert!(!outcome.denied, "{outcome:?}");
}

/// Python for probes that try calls and print `NAME OK` or `NAME ERR <errno name>` per call:
/// `attempt(name, fn)` and `syscall(nr, *args)` (raw, raising OSError). Needs `ctypes`,
/// `errno` and `os` imported first.
pub const PY_ATTEMPT: &str = r#"libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        fn(); print(name, 'OK')
    except OSError as e:
        print(name, 'ERR', errno.errorcode.get(e.errno, e.errno))
def syscall(nr, *args):
    if libc.syscall(nr, *args) < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
"#;

/// The host pids of `pids` as a sandbox of `daemon` wrote them: the same, unless the sandbox
/// has a PID namespace of its own ([`own_pid_namespaces`]), where they are found among the
/// daemon's descendants by their pid in the namespace (`NSpid`).
pub fn host_pids(daemon: i32, pids: &[i32]) -> Vec<i32> {
    if !own_pid_namespaces() {
        return pids.to_vec();
    }
    let mut pending = vec![daemon];
    let mut found = Vec::new();
    while let Some(pid) = pending.pop() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let nspid: Vec<i32> = status
            .lines()
            .find_map(|line| line.strip_prefix("NSpid:"))
            .map(|ids| {
                ids.split_whitespace()
                    .filter_map(|id| id.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if nspid.len() > 1 && pids.contains(nspid.last().unwrap()) {
            found.push(pid);
        }
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children"));
            pending.extend(
                (children.unwrap_or_default().split_whitespace())
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    assert_eq!(
        found.len(),
        pids.len(),
        "{pids:?} in the daemon's tree: {found:?}"
    );
    found
}

/// How reading a path outside every grant fails: Landlock refuses it, the mount view alone
/// leaves it out ([`landlock_fs`]).
pub fn unreadable() -> &'static str {
    match landlock_fs() {
        true => "Permission denied",
        false => "No such file or directory",
    }
}

/// How a TCP bind fails under a managed network without local binding: Landlock refuses it
/// (EACCES) from ABI 4, seccomp refuses every bind (EPERM) below.
pub fn bind_refusal() -> (&'static str, &'static str) {
    match landlock_abi() >= 4 {
        true => ("EACCES", "Permission denied"),
        false => ("EPERM", "Operation not permitted"),
    }
}

/// The kernel helper this host runs (modprobe, a piped core dump handler, a uevent helper),
/// as the daemon reads it: a root write is refused where there is one (docs/sandbox.md, "Root
/// write").
pub fn kernel_helper() -> Option<String> {
    let read = |file: &str| std::fs::read_to_string(file).unwrap_or_default();
    let core = read("/proc/sys/kernel/core_pattern");
    [
        read("/proc/sys/kernel/modprobe"),
        read("/proc/sys/kernel/hotplug"),
    ]
    .into_iter()
    .map(|text| text.trim().to_owned())
    .chain(core.trim().strip_prefix('|').map(str::to_owned))
    .find_map(|command| command.split_whitespace().next().map(str::to_owned))
}

/// Why the daemon of pid `daemon` refuses a root write on this host, if it does: what its
/// message says (a kernel helper, or a file it loads with other hard links, which perf's
/// build-id cache makes).
pub fn root_write_refusal(daemon: i32) -> Option<String> {
    let binary = std::fs::read_link(format!("/proc/{daemon}/exe")).ok();
    let maps = std::fs::read_to_string(format!("/proc/{daemon}/maps")).unwrap_or_default();
    let files: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(PathBuf::from)
        .filter(|path| Some(path) != binary.as_ref())
        .collect();
    // As the daemon sees them, in its own mount namespace.
    let linked = !linked(&files, &format!("/proc/{daemon}/root")).is_empty();
    kernel_helper().or_else(|| linked.then(|| "hard links".to_owned()))
}

/// Those of `files` (and the loader's configuration) with other hard links, canonical, as
/// seen below `root`.
fn linked(files: &[PathBuf], root: &str) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let config = ["/etc/ld.so.cache", "/etc/ld.so.conf"].map(PathBuf::from);
    let mut linked: Vec<PathBuf> = files
        .iter()
        .chain(&config)
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .filter(|path| {
            let seen = format!("{root}{}", path.display());
            std::fs::metadata(seen).is_ok_and(|meta| meta.is_file() && meta.nlink() > 1)
        })
        .collect();
    linked.sort();
    linked.dedup();
    linked
}

/// A daemon that can take a root write on this host, if any can (no kernel helper): where a
/// file it loads has other hard links (perf's build-id cache makes them under `~/.debug`), it
/// runs in a mount namespace of its own with a copy of each such file bound over it, which
/// changes nothing on the host. The directory holds the copies.
pub fn root_write_daemon(env: &[(&str, &str)]) -> (Daemon, tempfile::TempDir) {
    let copies = tempfile::tempdir().unwrap();
    let binary = env!("CARGO_BIN_EXE_exec-server");
    let ldd = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .unwrap();
    let loaded: Vec<PathBuf> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    let linked = linked(&loaded, "");
    if linked.is_empty() {
        return (Daemon::start_with(&[], env), copies);
    }
    let mut script = String::new();
    for (index, path) in linked.iter().enumerate() {
        let copy = copies.path().join(index.to_string());
        std::fs::copy(path, &copy).unwrap();
        script += &format!("mount --bind '{}' '{}' && ", copy.display(), path.display());
    }
    script += "exec \"$@\"";
    let mut command = std::process::Command::new("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
            binary,
        ])
        .args(["--listen", "ws://127.0.0.1:0"])
        .env("EXEC_SERVER_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped());
    if let Ok(mode) = std::env::var(LANDLOCK_MODE_VAR) {
        in_landlock_mode(&mut command, &mode);
    }
    (Daemon::launch(command), copies)
}
