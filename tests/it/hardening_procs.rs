//! Issue #26, tried as an attacker would: stray signals to the daemon's supervisors, a
//! supervisor killed from outside, an upgrade to a binary another user could have written, and
//! host Unix sockets reached from a sandbox whose network is restricted.

use crate::common::*;
use crate::process_tree::{all_running, assert_all_gone, detaching_script, gone, tags};
use crate::sandbox_support;
use serde_json::{json, Value};

/// What a careless `pkill -SIG -f exec-server` may send: every signal whose default ends or
/// stops a process (glibc's reserved 32 and 33 and real-time ones included), but the fault
/// signals, which keep their handling.
const STRAY: &[i32] = &[
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGSTKFLT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGPWR,
    libc::SIGABRT,
    32,
    33,
    34,
    64,
];

/// Signals 32 and 33 in a `/proc/PID/status` mask.
const GLIBC_INTERNAL: u64 = 0b11 << 31;

/// `future`, which must end within the harness's timeout (a stopped supervisor never answers).
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// The parent of `pid`.
fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat_fields(&stat)[1].parse().unwrap()
}

/// `argv` on the three launch paths of a supervisor: posix_spawn (plain pipes), a fork (a
/// terminal) and a sandbox helper.
fn launches(id: &str, argv: &[&str], dirs: &sandbox_support::Dirs) -> [Value; 3] {
    let plain = start_params(&format!("{id}-plain"), argv);
    let mut tty = start_params(&format!("{id}-tty"), argv);
    tty["tty"] = json!(true);
    let sandboxed = sandbox_support::params(
        &format!("{id}-sandboxed"),
        argv,
        &dirs.ws,
        sandbox_support::workspace_write(&dirs.ws, "restricted"),
    );
    [plain, tty, sandboxed]
}

/// A tree that detaches (tagged with test `n`), whose shell first prints its parent: the
/// supervisor.
fn tree_script(n: u32) -> String {
    format!("echo $PPID; {}", detaching_script(&tags(n)))
}

/// Starts the tree of `tree_script(n)` with `params`; returns its id, its supervisor's pid (the
/// first line it prints, but in a PID namespace of its own) and the pids of its sleeps.
async fn start_tree(client: &Client, params: Value, n: u32) -> (String, i32, Vec<i32>) {
    let id = params["processId"].as_str().unwrap().to_owned();
    let sandboxed = params.get("sandbox").is_some();
    client.call("process/start", params).await;
    let read = read_until(client, &id, 0, |bytes| bytes.contains(&b'\n')).await;
    let text = String::from_utf8_lossy(&read.bytes);
    let pids = all_running(&tags(n)).await;
    let supervisor = match sandboxed && own_pid_namespaces() {
        // In a PID namespace of the launch's own the shell's parent is the namespace's init
        // (pid 1 there), which the detached sleeps are re-parented to; its parent is the
        // supervisor.
        true => parent(parent(pids[0])),
        false => text.lines().next().unwrap().trim().parse().unwrap(),
    };
    (id, supervisor, pids)
}

#[tokio::test]
async fn stray_signals_leave_supervisors_serving_and_programs_their_default_signal_state() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let script = tree_script(201);
    for params in launches("stray", &["sh", "-c", &script], &dirs) {
        let (id, supervisor, pids) = start_tree(&client, params, 201).await;
        let fork_server = parent(supervisor);
        for signal in STRAY {
            for pid in [supervisor, fork_server] {
                // SAFETY: plain syscall on the daemon's own processes.
                unsafe { libc::kill(pid, *signal) };
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(pid_alive(supervisor), "{id}: the supervisor died");
        assert!(pid_alive(fork_server), "{id}: the fork server died");
        let state = std::fs::read_to_string(format!("/proc/{supervisor}/stat")).unwrap();
        assert_eq!(stat_fields(&state)[0], "S", "{id}: the supervisor stopped");
        assert!(pids.iter().all(|pid| !gone(*pid)), "{id}: the tree died");
        // Still the tree's supervisor: terminate ends it all and says so.
        let reply = client
            .call("process/terminate", json!({"processId": id}))
            .await;
        assert_eq!(reply["running"], true, "{id}");
        let (_, last) = within(&id, read_all(&client, &id)).await;
        assert_eq!(last["reason"], "terminated", "{id}: {last}");
        assert!(last.get("cleanupUnconfirmed").is_none(), "{id}: {last}");
        assert_all_gone(&pids, "every process of the tree to be gone").await;
    }
    // What the supervisors take, their programs do not inherit: a fresh signal state.
    let status = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"];
    for params in launches("state", &status, &dirs) {
        let id = params["processId"].as_str().unwrap().to_owned();
        client.call("process/start", params).await;
        let (bytes, _) = read_all(&client, &id).await;
        let text = String::from_utf8_lossy(&bytes);
        let mask = |field: &str| {
            let line = text.lines().find(|line| line.starts_with(field)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk"), 0, "{id}: {text}");
        // glibc's posix_spawn (2.36) ignores its own 32 and 33 in every child it spawns,
        // whatever the parent does; nothing else may be ignored.
        assert_eq!(mask("SigIgn") & !GLIBC_INTERNAL, 0, "{id}: {text}");
    }
}

#[tokio::test]
async fn a_supervisor_killed_from_outside_takes_its_tree_with_it() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let script = tree_script(211);
    for params in launches("killed", &["sh", "-c", &script], &dirs) {
        let (id, supervisor, pids) = start_tree(&client, params, 211).await;
        // SAFETY: plain syscall on the daemon's own process.
        unsafe { libc::kill(supervisor, libc::SIGKILL) };
        // The daemon noticed: the process is reported ended.
        let (_, last) = within(&id, read_all(&client, &id)).await;
        assert_eq!(last["exited"], true, "{id}: {last}");
        // And nothing of the tree goes on untracked (a detached member reparented to init
        // would).
        assert_all_gone(&pids, &format!("{id}: the orphaned tree to be ended")).await;
    }
}

/// A daemon started from a copy of the binary in `dir`, its stderr collected line by line.
struct FromCopy {
    child: std::process::Child,
    binary: std::path::PathBuf,
    url: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FromCopy {
    fn start(dir: &std::path::Path, args: &[&str]) -> Self {
        use std::io::BufRead as _;
        let binary = dir.join("exec-server");
        std::fs::copy(env!("CARGO_BIN_EXE_exec-server"), &binary).unwrap();
        let mut command = std::process::Command::new(&binary);
        command
            .args(["--listen", "ws://127.0.0.1:0"])
            .args(args)
            .env(STATE_DIR_VAR, "none")
            .env("EXEC_SERVER_LOG", "warn")
            .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
            .env_remove("CODEX_EXEC_SERVER_CONNECTION_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // The copy may still be open for writing in a child another test forked meanwhile.
        let mut child = loop {
            match command.spawn() {
                Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                spawned => break spawned.unwrap(),
            }
        };
        let mut url = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let collected = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            binary,
            url: url.trim().to_owned(),
            log,
        }
    }

    /// Puts a shell script that creates `marker` at the binary's path, renamed over it as an
    /// attacker with write access to the directory would.
    fn plant(&self, marker: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt as _;
        let staged = self.binary.with_extension("new");
        let script = format!("#!/bin/sh\ntouch {}\n", marker.display());
        std::fs::write(&staged, script).unwrap();
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&staged, &self.binary).unwrap();
    }

    fn refusals(&self) -> usize {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|line| line.contains("refusing to run the successor"))
            .count()
    }

    /// `exec-server upgrade` of this daemon: the successor's pid, or the exit code and stderr.
    async fn upgrade(&self) -> Result<i32, (i32, String)> {
        let (pid, url) = (self.child.id().to_string(), self.url.clone());
        let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
            exec_server(&["upgrade", "--pid", &pid, "--url", &url, "--timeout", "5s"])
        })
        .await
        .unwrap();
        match code {
            0 => Ok(stdout.trim().parse().unwrap()),
            _ => Err((code, stderr)),
        }
    }
}

/// Ends a daemon that is not this test's child (a successor).
fn stop(pid: i32) {
    // SAFETY: plain syscall on the test's own daemon.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[tokio::test]
async fn an_upgrade_refuses_a_binary_another_user_could_have_placed() {
    use std::os::unix::fs::PermissionsExt as _;
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("bin");
    std::fs::create_dir(&dir).unwrap();
    let mut daemon = FromCopy::start(&dir, &[]);
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let attacks = [
        "a directory others may write",
        "a binary its group may write",
        "a binary another uid owns",
        "an ancestor another uid owns",
    ];
    for (n, what) in attacks.into_iter().enumerate() {
        let marker = top.path().join(format!("ran-{n}"));
        daemon.plant(&marker);
        match n {
            0 => mode(&dir, 0o777),
            1 => mode(&daemon.binary, 0o775),
            2 => std::os::unix::fs::chown(&daemon.binary, Some(65534), None).unwrap(),
            _ => std::os::unix::fs::chown(top.path(), Some(65534), None).unwrap(),
        }
        // SAFETY: plain syscall on this test's daemon.
        unsafe { libc::kill(daemon.child.id() as i32, libc::SIGUSR2) };
        eventually(&format!("{what}: the refusal in the log"), || {
            daemon.refusals() == n + 1 || marker.exists()
        })
        .await;
        assert!(!marker.exists(), "{what}: the planted binary ran");
        // Still the one serving.
        assert!(daemon.child.try_wait().unwrap().is_none(), "{what}");
        let client = Client::connect(&daemon.url).await;
        client.initialize(None).await.unwrap();
        // Back to a place only root writes, for the next attack.
        std::os::unix::fs::chown(top.path(), Some(0), None).unwrap();
        mode(&dir, 0o755);
    }
    // The checks let a binary only root could have placed through (under the sticky /tmp).
    std::fs::copy(env!("CARGO_BIN_EXE_exec-server"), dir.join("good")).unwrap();
    std::fs::rename(dir.join("good"), &daemon.binary).unwrap();
    let successor = daemon.upgrade().await.unwrap();
    assert!(daemon.child.wait().unwrap().success());
    stop(successor);
}

#[tokio::test]
async fn an_upgrade_from_the_start_binary_never_runs_what_is_at_the_path() {
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = FromCopy::start(dir.path(), &["--upgrade-from-start-binary"]);
    let started = std::fs::metadata(&daemon.binary).unwrap().ino();
    // A directory anyone may write, and what an attacker put there.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = dir.path().join("ran");
    daemon.plant(&marker);
    let successor = daemon.upgrade().await.unwrap();
    assert!(daemon.child.wait().unwrap().success());
    let running = std::fs::metadata(format!("/proc/{successor}/exe")).unwrap();
    stop(successor);
    assert_eq!(
        running.ino(),
        started,
        "the successor is the binary started from"
    );
    assert!(!marker.exists(), "the planted binary ran");
}

/// Python that tries each Unix socket address it is given and prints `NAME OK` or, as `nc -U`
/// does, `NAME connect failed: <strerror>`, after running `setup`; it exits 3 (a failure the
/// classifier may explain).
fn unix_probe(setup: &str, attempts: &[(&str, &str, &str)]) -> String {
    let mut code = String::from(
        "import socket, sys\n\
         def attempt(name, kind, address):\n\
         \x20   s = socket.socket(socket.AF_UNIX, kind)\n\
         \x20   try:\n\
         \x20       s.sendto(b'x', address) if kind == socket.SOCK_DGRAM else s.connect(address)\n\
         \x20       print(name, 'OK')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'connect failed:', e.strerror)\n",
    );
    code.push_str(setup);
    for (name, kind, address) in attempts {
        code.push_str(&format!("attempt('{name}', socket.{kind}, '{address}')\n"));
    }
    code.push_str("sys.exit(3)\n");
    code
}

#[tokio::test]
async fn host_unix_sockets_are_out_of_reach_of_a_sandbox_without_network() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = sandbox_support::Dirs::new();
    // The host's services (a docker.sock, a journal socket): in /tmp, which the sandbox reads.
    let host = tempfile::tempdir().unwrap();
    let stream = host.path().join("service.sock");
    let listener = UnixListener::bind(&stream).unwrap();
    listener.set_nonblocking(true).unwrap();
    let datagram = host.path().join("journal.sock");
    let journal = UnixDatagram::bind(&datagram).unwrap();
    journal.set_nonblocking(true).unwrap();
    let name = format!("exec-server-hardening-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let abstract_listener = UnixListener::bind_addr(&addr).unwrap();
    abstract_listener.set_nonblocking(true).unwrap();
    // The sandbox's own socket, in its write root: local IPC keeps working.
    let own = d.ws("own.sock");
    let own_listener = format!(
        "o = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); o.bind('{}'); o.listen()\n",
        own.display()
    );
    let (stream_text, datagram_text) = (stream.display(), datagram.display());
    let attempts = [
        ("stream", "SOCK_STREAM", stream_text.to_string()),
        ("datagram", "SOCK_DGRAM", datagram_text.to_string()),
        ("abstract", "SOCK_STREAM", format!("\\0{name}")),
        ("own", "SOCK_STREAM", own.display().to_string()),
    ];
    let attempts: Vec<(&str, &str, &str)> = attempts
        .iter()
        .map(|(n, k, a)| (*n, *k, a.as_str()))
        .collect();
    let code = unix_probe(&own_listener, &attempts);
    let sandbox = sandbox_support::workspace_write(&d.ws, "restricted");
    let outcome = sandbox_support::py(&client, "confined", &d.ws, &sandbox, &code).await;
    for refused in ["stream", "datagram"] {
        let line = format!("{refused} connect failed: Permission denied");
        assert!(outcome.output.contains(&line), "{outcome:?}");
    }
    assert!(
        outcome.output.contains("abstract connect failed"),
        "{outcome:?}"
    );
    assert!(outcome.output.contains("own OK"), "{outcome:?}");
    assert!(outcome.denied, "not reported as sandboxDenied: {outcome:?}");
    assert!(listener.accept().is_err(), "the host listener was reached");
    assert!(
        journal.recv(&mut [0; 8]).is_err(),
        "the host's datagram socket was reached"
    );
    assert!(
        abstract_listener.accept().is_err(),
        "the abstract listener was reached"
    );

    // Told apart: failing to reach a socket that is not there is no sandbox denial.
    let missing = d.ws("missing.sock");
    let code = unix_probe(
        "",
        &[("missing", "SOCK_STREAM", &missing.display().to_string())],
    );
    let outcome = sandbox_support::py(&client, "missing", &d.ws, &sandbox, &code).await;
    assert!(
        outcome.output.contains("missing connect failed"),
        "{outcome:?}"
    );
    assert!(!outcome.denied, "{outcome:?}");

    // Unsandboxed, the same socket is reached.
    let code = unix_probe("", &[("stream", "SOCK_STREAM", &stream_text.to_string())]);
    let mut params = start_params("host", &[sandbox_support::python(), "-c", &code]);
    params["cwd"] = json!(sandbox_support::uri(&d.ws));
    client.call("process/start", params).await;
    let (bytes, _) = read_all(&client, "host").await;
    assert!(String::from_utf8_lossy(&bytes).contains("stream OK"));
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok());
}
