//! Upgrading without a restart (`exec-server upgrade --pid`, docs/operations.md): the daemon
//! hands its listener to a successor started from the binary now at its path, and not one
//! connection attempt made meanwhile fails; a successor that cannot start leaves it serving.

use crate::common::{self, Client, TIMEOUT};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");

/// A daemon run from a copy of the binary in its own directory, so that the copy can be
/// replaced as an upgrade does; its stdout stays open for a successor's banner.
struct Upgradable {
    child: Child,
    stdout: BufReader<ChildStdout>,
    url: String,
    /// For wss://, the CA that signed its certificate.
    ca: Option<PathBuf>,
    binary: PathBuf,
    /// Every successor so far: none is this test's child, so each is stopped by hand.
    successors: Vec<i32>,
    dir: tempfile::TempDir,
    /// The state dir every daemon of the line shares, one after the other.
    state_dir: tempfile::TempDir,
}

impl Upgradable {
    /// A daemon on ws://127.0.0.1:0.
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, &["--listen", "ws://127.0.0.1:0"], &[])
    }

    /// A daemon run from `dir` with `args`.
    fn start_in(dir: tempfile::TempDir, args: &[&str], env: &[(&str, &str)]) -> Self {
        let binary = dir.path().join("exec-server");
        std::fs::copy(BIN, &binary).unwrap();
        let state_dir = common::private_tempdir();
        let mut command = Command::new(&binary);
        command
            .args(args)
            .env(common::STATE_DIR_VAR, state_dir.path())
            .envs(env.iter().copied())
            .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
            .env_remove("CODEX_EXEC_SERVER_CONNECTION_TOKEN")
            .env("EXEC_SERVER_LOG", "warn")
            .stdout(Stdio::piped());
        // The copy may still be open for writing in a child another test forked meanwhile,
        // until that child's exec.
        let mut child = loop {
            match command.spawn() {
                Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                spawned => break spawned.unwrap(),
            }
        };
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let url = banner(&mut stdout);
        Self {
            child,
            stdout,
            url,
            ca: None,
            binary,
            successors: Vec::new(),
            dir,
            state_dir,
        }
    }

    /// Puts `content` (a file) at the binary's path the way a package manager does: a new
    /// file renamed over the old (which the running daemon still executes).
    fn replace_binary(&self, content: &Path) {
        let staged = self.binary.with_extension("new");
        std::fs::copy(content, &staged).unwrap();
        std::fs::rename(&staged, &self.binary).unwrap();
    }

    /// `exec-server upgrade --pid PID ARGS`: its exit code, stdout and stderr.
    async fn upgrade(&self, pid: i32, args: &[&str]) -> (i32, String, String) {
        let mut argv = vec!["upgrade".to_owned(), "--pid".to_owned(), pid.to_string()];
        argv.extend(args.iter().map(|arg| arg.to_string()));
        tokio::task::spawn_blocking(move || {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            common::exec_server(&argv)
        })
        .await
        .unwrap()
    }

    /// Upgrades the daemon of `pid` (with --url) and returns its successor's pid.
    async fn upgraded(&mut self, pid: i32) -> i32 {
        let mut args = vec!["--url".to_owned(), self.url.clone()];
        if let Some(ca) = &self.ca {
            args.extend(["--ca-file".to_owned(), ca.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = self.upgrade(pid, &args).await;
        assert_eq!(code, 0, "{stderr}");
        let successor: i32 = stdout.trim().parse().unwrap();
        self.successors.push(successor);
        assert_ne!(successor, pid);
        assert!(!common::pid_alive(pid), "the old daemon exited");
        // The binary now at the path runs, not the one the daemon was started from.
        let running = std::fs::metadata(format!("/proc/{successor}/exe")).unwrap();
        let installed = std::fs::metadata(&self.binary).unwrap();
        assert_eq!(running.ino(), installed.ino());
        // The successor announces the same address on the same stdout.
        assert_eq!(banner(&mut self.stdout), self.url);
        successor
    }

    /// The first daemon's exit status (it is this test's child).
    fn first_exit(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Upgradable {
    /// SIGTERM to the daemon of the moment, which ends its trees (a SIGKILL would leave them
    /// to a successor on the state dir); SIGKILL to every one still there after that.
    fn drop(&mut self) {
        let first = self.child.id() as i32;
        let current = self.successors.last().copied().unwrap_or(first);
        // SAFETY (here and below): plain syscalls; a successor is not reaped by this process,
        // and its parent (init) reaps it only once it has exited.
        unsafe { libc::kill(current, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while common::pid_alive(current) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in &self.successors {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn banner(stdout: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read banner");
    line.trim().to_owned()
}

/// How one connection attempt ended.
enum Attempt {
    /// `initialize` answered: a session.
    Served,
    /// Closed with 1012 (service restart) by a daemon handing over: a client reconnects.
    Restarted,
    Failed(String),
}

type WebSocket = tokio_tungstenite::WebSocketStream<Box<dyn exec_server_client::Io>>;

/// Connects (TCP or Unix), upgrades to a WebSocket and initializes.
async fn attempt(url: &str, ca: Option<&Path>) -> Attempt {
    let run = async {
        let mut ws = connect(url, ca).await?;
        let initialize = json!({"id": 1, "method": "initialize", "params": {"clientName": "e2e"}});
        ws.send(Message::text(initialize.to_string()))
            .await
            .map_err(|err| format!("send: {err}"))?;
        match next_message(&mut ws).await {
            Some(Ok(Message::Text(text))) => {
                let reply: Value = serde_json::from_str(&text).unwrap();
                if reply["result"]["sessionId"].is_string() {
                    let _ = ws.close(None).await;
                    return Ok(Attempt::Served);
                }
                Err(format!("initialize: {reply}"))
            }
            Some(Ok(Message::Close(Some(frame)))) if frame.code == CloseCode::Restart => {
                Ok(Attempt::Restarted)
            }
            other => Err(format!("before the reply: {other:?}")),
        }
    };
    match tokio::time::timeout(TIMEOUT, run).await {
        Ok(Ok(attempt)) => attempt,
        Ok(Err(why)) => Attempt::Failed(why),
        Err(_) => Attempt::Failed("no answer in time".into()),
    }
}

async fn connect(url: &str, ca: Option<&Path>) -> Result<WebSocket, String> {
    let (stream, uri) = exec_server_client::open_stream(url, ca)
        .await
        .map_err(|err| format!("connect: {err}"))?;
    let (ws, _) = tokio_tungstenite::client_async(uri, stream)
        .await
        .map_err(|err| format!("websocket: {err}"))?;
    Ok(ws)
}

/// The next message other than a ping or pong.
async fn next_message(
    ws: &mut WebSocket,
) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => return other,
        }
    }
}

/// A connection that stays open across the upgrade, initialized.
async fn idle_connection(daemon: &Upgradable) -> WebSocket {
    let mut ws = connect(&daemon.url, daemon.ca.as_deref()).await.unwrap();
    let initialize = json!({"id": 1, "method": "initialize", "params": {"clientName": "e2e"}});
    ws.send(Message::text(initialize.to_string()))
        .await
        .unwrap();
    let reply = next_message(&mut ws).await.unwrap().unwrap();
    assert!(reply.to_text().unwrap().contains("sessionId"), "{reply:?}");
    ws
}

/// Asserts that the daemon closed `ws` with 1012 (service restart).
async fn assert_restarted(mut ws: WebSocket) {
    let closed = tokio::time::timeout(TIMEOUT, next_message(&mut ws))
        .await
        .expect("closed in time");
    match closed {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Restart),
        other => panic!("not closed with 1012: {other:?}"),
    }
}

/// Clients connecting and initializing in tight loops, each one attempt after another.
struct Load {
    attempts: Arc<Mutex<Vec<Attempt>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How many clients attempt at once.
const CLIENTS: usize = 4;

impl Load {
    fn start(daemon: &Upgradable) -> Self {
        let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..CLIENTS)
            .map(|_| {
                let (url, ca) = (daemon.url.clone(), daemon.ca.clone());
                let (attempts, stop) = (Arc::clone(&attempts), Arc::clone(&stop));
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = attempt(&url, ca.as_deref()).await;
                        attempts.lock().unwrap().push(outcome);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
            })
            .collect();
        Self {
            attempts,
            stop,
            tasks,
        }
    }

    fn served(&self) -> usize {
        let attempts = self.attempts.lock().unwrap();
        attempts
            .iter()
            .filter(|a| matches!(a, Attempt::Served))
            .count()
    }

    /// Waits until `more` attempts beyond the present ones were served.
    async fn serves(&self, more: usize) {
        let target = self.served() + more;
        common::eventually("served attempts", || self.served() >= target).await;
    }

    /// Stops the loop; every attempt's outcome, checked: none failed.
    async fn stop(self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let attempts = std::mem::take(&mut *self.attempts.lock().unwrap());
        let failed: Vec<&String> = attempts
            .iter()
            .filter_map(|a| match a {
                Attempt::Failed(why) => Some(why),
                _ => None,
            })
            .collect();
        assert!(failed.is_empty(), "failed attempts: {failed:?}");
        attempts
    }
}

/// Upgrades a daemon on `listen` twice (the successor is upgradable too) under a tight loop of
/// connection attempts: none fails.
async fn upgrade_under_load(mut daemon: Upgradable) -> Upgradable {
    let load = Load::start(&daemon);
    load.serves(20).await;
    let first = daemon.child.id() as i32;
    // Read meanwhile, as a client does: it answers the Close.
    let connected = tokio::spawn(assert_restarted(idle_connection(&daemon).await));
    daemon.replace_binary(Path::new(BIN));
    let second = daemon.upgraded(first).await;
    assert!(daemon.first_exit().success(), "the old daemon exits with 0");
    connected.await.unwrap();
    load.serves(20).await;
    // Read meanwhile, as a client does: it answers the Close.
    let connected = tokio::spawn(assert_restarted(idle_connection(&daemon).await));
    daemon.replace_binary(Path::new(BIN));
    daemon.upgraded(second).await;
    connected.await.unwrap();
    load.serves(20).await;
    let attempts = load.stop().await;
    // An attempt accepted by a daemon handing over is closed with 1012: one per client and
    // upgrade at most.
    let restarted = attempts
        .iter()
        .filter(|a| matches!(a, Attempt::Restarted))
        .count();
    assert!(restarted <= 2 * CLIENTS, "{restarted} closed with 1012");
    daemon
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_over_tcp_refuses_no_connection_attempt() {
    // The metrics port is the successor's once the predecessor let it go.
    let metrics = format!("127.0.0.1:{}", crate::metrics::free_port());
    let args = ["--listen", "ws://127.0.0.1:0", "--metrics-listen", &metrics];
    let dir = tempfile::tempdir().unwrap();
    let _daemon = upgrade_under_load(Upgradable::start_in(dir, &args, &[])).await;
    let (status, _) =
        tokio::task::spawn_blocking(move || crate::metrics::http_get(&metrics, "/metrics", None))
            .await
            .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_over_a_unix_socket_keeps_its_file_and_refuses_no_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("exec.sock");
    let listen = format!("unix://{}", socket.display());
    let daemon = Upgradable::start_in(dir, &["--listen", &listen], &[]);
    let identity = |path: &Path| std::fs::symlink_metadata(path).unwrap().ino();
    let before = identity(&socket);
    let daemon = upgrade_under_load(daemon).await;
    assert_eq!(identity(&socket), before, "the same socket file throughout");
    assert_eq!(daemon.url, format!("unix://{}", socket.display()));
    let found = std::fs::symlink_metadata(&socket).unwrap();
    assert!(found.file_type().is_socket(), "the socket file stays");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successor_that_cannot_start_leaves_the_daemon_serving() {
    let mut daemon = Upgradable::start();
    let load = Load::start(&daemon);
    load.serves(20).await;
    let pid = daemon.child.id() as i32;
    let broken = daemon.dir.path().join("broken");
    std::fs::write(&broken, "#!/bin/sh\necho broken >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    daemon.replace_binary(&broken);
    let (code, _, stderr) = daemon.upgrade(pid, &["--timeout", "3s"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("goes on serving"), "{stderr}");
    assert!(common::pid_alive(pid));
    load.serves(20).await;
    // A fixed binary then upgrades it.
    daemon.replace_binary(Path::new(BIN));
    daemon.upgraded(pid).await;
    load.serves(20).await;
    load.stop().await;
}

/// A successor that could not use the state dir (here: one it cannot read, as after an
/// upgrade to a binary with another format) fails before it is ready: the daemon goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_state_dir_the_successor_cannot_use_leaves_the_daemon_serving() {
    let mut daemon = Upgradable::start();
    let load = Load::start(&daemon);
    load.serves(20).await;
    let pid = daemon.child.id() as i32;
    let version = daemon.state_dir.path().join("version");
    let kept = std::fs::read(&version).unwrap();
    std::fs::write(&version, "exec-server state 999\n").unwrap();
    daemon.replace_binary(Path::new(BIN));
    let (code, _, stderr) = daemon.upgrade(pid, &["--timeout", "3s"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(common::pid_alive(pid));
    load.serves(20).await;
    std::fs::write(&version, kept).unwrap();
    daemon.upgraded(pid).await;
    load.serves(20).await;
    load.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_resumes_on_the_successor_with_its_process_and_output() {
    resume_across_an_upgrade("keep").await;
}

/// The connection closed for the hand-over is no disconnect: the session's policy is not
/// applied, its processes go on for the successor.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_on_disconnect_session_also_resumes_on_the_successor() {
    resume_across_an_upgrade("kill").await;
}

/// A counting process in a session with `on_disconnect`, upgraded under it: the session
/// resumes on the successor with the same process, its output without gap or duplicate.
async fn resume_across_an_upgrade(on_disconnect: &str) {
    let mut daemon = Upgradable::start();
    let client = Client::connect(&daemon.url).await;
    let params = json!({"clientName": "e2e", "onDisconnect": on_disconnect});
    let session = client.call("initialize", params).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    client.notify("initialized", json!({})).await;
    let script = "for i in $(seq 1 100000); do echo $i; sleep 0.01; done";
    client
        .call(
            "process/start",
            common::start_params("count", &["sh", "-c", script]),
        )
        .await;
    let pid_of = |list: Value| list["processes"][0]["pid"].clone();
    let pid = pid_of(client.call("process/list", json!({})).await);
    let mut count = Counting::default();
    while count.numbers.len() < 20 {
        count.read(&client).await;
    }
    let first = daemon.child.id() as i32;
    daemon.upgraded(first).await;
    let resumed = loop {
        let client = Client::connect(&daemon.url).await;
        match client.initialize(Some(&session)).await {
            Ok(_) => break client,
            Err(error) if error["code"] == -32010 => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(error) => panic!("resume failed: {error}"),
        }
    };
    let before = count.numbers.len();
    while count.numbers.len() < before + 20 {
        count.read(&resumed).await;
    }
    let expected: Vec<u64> = (1..=count.numbers.len() as u64).collect();
    assert_eq!(count.numbers, expected, "no gap, no duplicate");
    assert_eq!(pid_of(resumed.call("process/list", json!({})).await), pid);
    resumed
        .call("process/terminate", json!({"processId": "count"}))
        .await;
}

/// What was read of the counting process: its numbers, a line not complete yet, the seq to
/// read after.
#[derive(Default)]
struct Counting {
    numbers: Vec<u64>,
    partial: String,
    after: u64,
}

impl Counting {
    async fn read(&mut self, client: &Client) {
        let read = client
            .call(
                "process/read",
                json!({"processId": "count", "afterSeq": self.after, "waitMs": 1000}),
            )
            .await;
        for chunk in read["chunks"].as_array().unwrap() {
            self.partial
                .push_str(std::str::from_utf8(&common::unb64(&chunk["chunk"])).unwrap());
        }
        while let Some((line, rest)) = self.partial.split_once('\n') {
            self.numbers.push(line.parse().unwrap());
            self.partial = rest.to_owned();
        }
        self.after = read["nextSeq"].as_u64().unwrap() - 1;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn over_wss_a_successor_whose_configuration_fails_leaves_the_daemon_serving() {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::tls::issue(dir.path(), "upgrade");
    let (cert, key) = (pki.join("cert.pem"), pki.join("key.pem"));
    let (cert_arg, key_arg) = (cert.display().to_string(), key.display().to_string());
    let args = [
        "--listen",
        "wss://127.0.0.1:0",
        "--tls-cert",
        &cert_arg,
        "--tls-key",
        &key_arg,
    ];
    let mut daemon = Upgradable::start_in(dir, &args, &[]);
    daemon.ca = Some(pki.join("ca.pem"));
    let load = Load::start(&daemon);
    load.serves(20).await;
    let pid = daemon.child.id() as i32;
    // The successor reads the key itself, and finds none: it must not take over.
    let away = key.with_extension("away");
    std::fs::rename(&key, &away).unwrap();
    daemon.replace_binary(Path::new(BIN));
    let (code, _, stderr) = daemon.upgrade(pid, &["--timeout", "3s"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(common::pid_alive(pid));
    load.serves(20).await;
    std::fs::rename(&away, &key).unwrap();
    daemon.upgraded(pid).await;
    load.serves(20).await;
    load.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn systemd_hears_ready_and_follows_the_new_main_pid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let notify = tokio::net::UnixDatagram::bind(&path).unwrap();
    let path = path.display().to_string();
    let args = ["--listen", "ws://127.0.0.1:0"];
    let mut daemon = Upgradable::start_in(dir, &args, &[("NOTIFY_SOCKET", &path)]);
    let next = || async {
        let mut buffer = [0; 256];
        let read = tokio::time::timeout(TIMEOUT, notify.recv(&mut buffer))
            .await
            .expect("a notification in time")
            .unwrap();
        String::from_utf8(buffer[..read].to_vec()).unwrap()
    };
    assert_eq!(next().await, "READY=1\n");
    let first = daemon.child.id() as i32;
    let second = daemon.upgraded(first).await;
    // The predecessor names its successor (NotifyAccess=main accepts that from it), which then
    // says it is ready.
    assert_eq!(next().await, format!("MAINPID={second}\n"));
    assert_eq!(next().await, format!("MAINPID={second}\nREADY=1\n"));
}

#[test]
fn a_daemon_on_stdio_is_not_upgraded_and_survives_sigusr2() {
    use std::io::Write as _;
    let mut child = Command::new(BIN)
        .args(["--listen", "stdio"])
        .env(common::STATE_DIR_VAR, "none")
        .env("EXEC_SERVER_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |id: u32| {
        let request = json!({"id": id, "method": "initialize", "params": {"clientName": "e2e"}});
        writeln!(stdin, "{request}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    assert!(ask(1)["result"]["sessionId"].is_string(), "serving");
    let pid = child.id().to_string();
    let (code, _, stderr) = common::exec_server(&["upgrade", "--pid", &pid]);
    assert_eq!(code, 255, "{stderr}");
    assert!(stderr.contains("listens on no socket"), "{stderr}");
    // SIGUSR2's default action would end it.
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR2) };
    assert_eq!(ask(2)["id"], 2, "still serving");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn only_an_exec_server_is_sent_the_upgrade_signal() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let (code, _, stderr) = common::exec_server(&["upgrade", "--pid", &pid]);
    assert_eq!(code, 255, "{stderr}");
    assert!(stderr.contains("is sleep, not exec-server"), "{stderr}");
    assert!(sleeper.try_wait().unwrap().is_none(), "not signalled");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// deploy/exec-server-keeper, a container's main process: SIGUSR2 upgrades the daemon, SIGTERM
/// reaches the daemon of the moment (no longer the keeper's child), and the keeper then ends.
#[tokio::test(flavor = "multi_thread")]
async fn the_container_keeper_upgrades_on_sigusr2_and_stops_the_successor() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("exec-server");
    std::fs::copy(BIN, &binary).unwrap();
    let keeper = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/exec-server-keeper");
    let state_dir = common::private_tempdir();
    let mut child = Command::new("sh")
        .arg(keeper)
        .arg(&binary)
        .args(["--listen", "ws://127.0.0.1:0"])
        .env(common::STATE_DIR_VAR, state_dir.path())
        .env("EXEC_SERVER_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let keeper_pid = child.id() as i32;
    let url = banner(&mut BufReader::new(child.stdout.take().unwrap()));
    let daemons_of_keeper = || {
        common::children_of(keeper_pid)
            .iter()
            .filter(|stat| stat.contains("(exec-server)"))
            .count()
    };
    assert_eq!(daemons_of_keeper(), 1, "the daemon is the keeper's child");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let staged = binary.with_extension("new");
    std::fs::copy(BIN, &staged).unwrap();
    std::fs::rename(&staged, &binary).unwrap();
    unsafe { libc::kill(keeper_pid, libc::SIGUSR2) };
    let successor: i32 = tokio::task::spawn_blocking(move || {
        let said = stderr
            .lines()
            .map(Result::unwrap)
            .find(|line| line.contains("handed over to pid"))
            .expect("the upgrade's report");
        said.rsplit(' ').next().unwrap().parse().unwrap()
    })
    .await
    .unwrap();
    assert!(common::pid_alive(successor));
    common::eventually("the first daemon reaped", || daemons_of_keeper() == 0).await;
    assert_eq!(common::exec_server(&["ready", "--url", &url]).0, 0);
    unsafe { libc::kill(keeper_pid, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            unsafe { libc::kill(successor, libc::SIGKILL) };
            let _ = child.kill();
            panic!("the keeper did not end after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success());
    assert!(
        !common::pid_alive(successor),
        "SIGTERM reached the successor"
    );
}

/// Remote mode beside a listener: an upgrade closes the dialed socket, the successor
/// registers again and dials the URL it is given, and the session resumes over that socket
/// with all its process's output.
#[tokio::test]
async fn remote_mode_registers_again_after_an_upgrade_and_resumes() {
    use crate::support::registry::{self, Registry, ENVIRONMENT};
    let mut registry = Registry::start().await;
    let args = [
        "--listen",
        "ws://127.0.0.1:0",
        "--remote",
        &registry.url,
        "--environment-id",
        ENVIRONMENT,
        "--remote-transport",
        "direct",
        "--aws-sigv4",
    ];
    let mut daemon =
        Upgradable::start_in(tempfile::tempdir().unwrap(), &args, &registry::SIGV4_ENV);
    registry
        .registration(TIMEOUT)
        .await
        .expect("a registration");
    let (_, socket) = registry.dial(TIMEOUT).await.expect("a dial");
    let client = Client::from_stream(socket.expect("accepted"));
    let session = client.initialize(None).await.unwrap();
    let script = "echo before; sleep 2; echo after";
    client
        .call(
            "process/start",
            common::start_params("p", &["sh", "-c", script]),
        )
        .await;
    let first = daemon.child.id() as i32;
    daemon.upgraded(first).await;
    registry
        .registration(TIMEOUT)
        .await
        .expect("the successor registers");
    let resumed = loop {
        let (_, socket) = registry.dial(TIMEOUT).await.expect("the successor dials");
        let client = Client::from_stream(socket.expect("accepted"));
        match client.initialize(Some(&session)).await {
            Ok(_) => break client,
            // The predecessor's connection may not be seen as gone yet: the next dial.
            Err(error) if error["code"] == -32010 => client.close().await,
            Err(error) => panic!("resume failed: {error}"),
        }
    };
    let (output, _) = crate::remote::read_closed(&resumed, "p").await;
    assert_eq!(output, b"before\nafter\n");
}
