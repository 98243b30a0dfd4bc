//! Test harness: starts the real `exec-server` binary and speaks to it over a real WebSocket.

pub mod codex_peer;
pub mod http_server;

use base64::Engine as _;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A daemon started with `soft`/`hard` limits of open files.
pub fn daemon_with_fd_limits(args: &[&str], soft: u64, hard: u64) -> Daemon {
    use std::os::unix::process::CommandExt as _;
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), args, &[]);
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Daemon::launch(command)
}

/// Set in the test process's environment, every daemon a test starts runs as on another host:
/// `none` (a seccomp filter answers the Landlock syscalls with ENOSYS, as gVisor does), an ABI
/// number (the daemon uses no newer one), or `mount-view` (the operator's choice of backend).
/// The sandbox suites run again in each (`.ci/run`), asserting the same outcomes.
pub const LANDLOCK_MODE_VAR: &str = "EXEC_SERVER_TEST_LANDLOCK";

/// Whether the daemons of this run give each sandboxed launch a PID namespace (Landlock has
/// no signal scope in their [`LANDLOCK_MODE_VAR`] mode): pids inside are the namespace's, and
/// another process is not there to signal (ESRCH rather than EPERM).
pub fn own_pid_namespaces() -> bool {
    landlock_abi() < 6
}

/// The Landlock ABI the daemons of this run use (0: none), and whether Landlock carries their
/// file-system rules (else the mount view alone does: what is not granted is not there, and
/// reads as missing).
pub fn landlock_abi() -> i32 {
    match std::env::var(LANDLOCK_MODE_VAR).as_deref() {
        Ok("none") => 0,
        Ok(abi) => abi.parse().unwrap_or(7),
        Err(_) => 7,
    }
}

pub fn landlock_fs() -> bool {
    landlock_abi() >= 2 && std::env::var(LANDLOCK_MODE_VAR).as_deref() != Ok("mount-view")
}

fn landlock_mode(command: &mut Command) {
    if let Ok(mode) = std::env::var(LANDLOCK_MODE_VAR) {
        in_landlock_mode(command, &mode);
    }
}

/// Makes `command` start its daemon as in Landlock `mode` (see [`LANDLOCK_MODE_VAR`]).
pub fn in_landlock_mode(command: &mut Command, mode: &str) {
    use std::os::unix::process::CommandExt as _;
    match mode {
        "" => {}
        "none" => {
            let calls = [
                libc::SYS_landlock_create_ruleset,
                libc::SYS_landlock_add_rule,
                libc::SYS_landlock_restrict_self,
            ];
            let filter = seccompiler::SeccompFilter::new(
                calls.into_iter().map(|call| (call, vec![])).collect(),
                seccompiler::SeccompAction::Allow,
                seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
                std::env::consts::ARCH.try_into().unwrap(),
            )
            .unwrap();
            let program: seccompiler::BpfProgram = filter.try_into().unwrap();
            // SAFETY: applying a filter is a prctl and a seccomp call, no allocation.
            unsafe {
                command.pre_exec(move || {
                    seccompiler::apply_filter(&program).map_err(std::io::Error::other)
                });
            }
        }
        "mount-view" => {
            command.env("EXEC_SERVER_SANDBOX_BACKEND", "mount-view");
        }
        abi => {
            assert!(abi.parse::<u8>().is_ok(), "{LANDLOCK_MODE_VAR}={abi}");
            command.env("EXEC_SERVER_LANDLOCK_ABI_MAX", abi);
        }
    }
}

pub struct Daemon {
    child: Child,
    pub url: String,
    /// The daemon's own state dir, unless its command named one.
    _state_dir: Option<tempfile::TempDir>,
}

/// Every daemon a test starts sets it (to its own directory, or `none`), so that none falls back
/// to the host's default, which they would all share.
pub const STATE_DIR_VAR: &str = "EXEC_SERVER_STATE_DIR";

impl Daemon {
    pub fn start() -> Self {
        Self::start_with(&[], &[])
    }

    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::launch(Self::command(env!("CARGO_BIN_EXE_exec-server"), args, env))
    }

    /// A daemon running as `nobody`, from a copy of the binary that user can reach (the build
    /// directory may not be), which lives as long as the daemon.
    pub fn start_unprivileged() -> (Self, tempfile::TempDir) {
        Self::start_unprivileged_with(&[])
    }

    /// [`Daemon::start_unprivileged`] with `env` added.
    pub fn start_unprivileged_with(env: &[(&str, &str)]) -> (Self, tempfile::TempDir) {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let binary = dir.path().join("exec-server");
        std::fs::copy(env!("CARGO_BIN_EXE_exec-server"), &binary).unwrap();
        // Its state dir must be nobody's, and the temporary ones are root's.
        let state_dir = dir.path().join("state");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&state_dir)
            .unwrap();
        std::os::unix::fs::chown(&state_dir, Some(65534), Some(65534)).unwrap();
        let mut command = Self::command(binary.to_str().unwrap(), &[], env);
        command
            .env(STATE_DIR_VAR, &state_dir)
            .uid(65534)
            .gid(65534)
            .current_dir("/");
        (Self::launch(command), dir)
    }

    /// The command that starts `binary` as a daemon, for [`Daemon::launch`], in the Landlock
    /// mode of [`LANDLOCK_MODE_VAR`].
    pub fn command(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(binary);
        landlock_mode(&mut command);
        command
            .args(["--listen", "ws://127.0.0.1:0"])
            .args(args)
            .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
            .env_remove("CODEX_EXEC_SERVER_CONNECTION_TOKEN")
            .env("EXEC_SERVER_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        command
    }

    /// Starts `command` and reads its banner. A command that sets no state dir gets a fresh one,
    /// removed with the `Daemon`.
    pub fn launch(mut command: Command) -> Self {
        let state_dir = (!command.get_envs().any(|(key, _)| key == STATE_DIR_VAR)).then(|| {
            let dir = private_tempdir();
            command.env(STATE_DIR_VAR, dir.path());
            dir
        });
        let mut child = command.spawn().expect("spawn exec-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read banner");
        let url = line.trim().to_owned();
        assert!(
            ["ws://", "wss://", "unix://"]
                .iter()
                .any(|scheme| url.starts_with(scheme)),
            "unexpected banner {url:?}"
        );
        Self {
            child,
            url,
            _state_dir: state_dir,
        }
    }

    /// The daemon's stderr, when its command piped it.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn send_signal(&self, signal: i32) {
        unsafe { libc::kill(self.pid(), signal) };
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.url).await
    }

    /// A connected client that finished the handshake.
    /// Resumes `session` on a new connection, retrying while the daemon has not yet noticed
    /// that the old connection is gone (-32010), as the codex client does.
    pub async fn resume(&self, session: &str) -> Client {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let client = self.client().await;
            match client.initialize(Some(session)).await {
                Ok(resumed) => {
                    assert_eq!(resumed, session);
                    return client;
                }
                Err(error) if error["code"] == -32010 && tokio::time::Instant::now() < deadline => {
                    client.close().await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("resume failed: {error}"),
            }
        }
    }

    pub async fn session(&self) -> (Client, String) {
        let client = self.client().await;
        let session = client.initialize(None).await.expect("initialize");
        (client, session)
    }
}

impl Drop for Daemon {
    /// A shutdown (SIGTERM) ends the daemon's trees; a SIGKILL would leave them running for a
    /// successor on its state dir. SIGKILL only for a daemon that does not stop.
    fn drop(&mut self) {
        self.send_signal(libc::SIGTERM);
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

pub struct Client {
    sink: tokio::sync::Mutex<
        futures::stream::SplitSink<
            tokio_tungstenite::WebSocketStream<
                tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
            >,
            Message,
        >,
    >,
    pending: Pending,
    notifications: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    /// Messages that are neither replies to our requests nor notifications (e.g. id -1 errors).
    unsolicited: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    /// Notifications of other processes set aside by `events_until_closed`.
    set_aside: Mutex<std::collections::VecDeque<Value>>,
    next_id: AtomicI64,
    reader: tokio::task::JoinHandle<()>,
}

impl Client {
    pub async fn connect(url: &str) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        Self::from_stream(ws)
    }

    /// Connects with `Authorization: Bearer <token>`.
    pub async fn connect_with_token(url: &str, token: &str) -> Self {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let mut request = url.into_client_request().unwrap();
        let value = format!("Bearer {token}").parse().unwrap();
        request.headers_mut().insert("authorization", value);
        let (ws, _) = tokio_tungstenite::connect_async(request)
            .await
            .expect("connect");
        Self::from_stream(ws)
    }

    pub fn from_stream(
        ws: tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
    ) -> Self {
        let (sink, mut stream) = ws.split();
        let pending: Pending = Arc::default();
        let (notify_tx, notify_rx) = mpsc::unbounded_channel();
        let (other_tx, other_rx) = mpsc::unbounded_channel();
        let routes = pending.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                let value = match message {
                    Message::Text(text) => {
                        serde_json::from_str(&text).expect("server sent valid JSON")
                    }
                    Message::Binary(bytes) => binary_message(&bytes),
                    _ => continue,
                };
                if value.get("method").is_some() {
                    let _ = notify_tx.send(value);
                    continue;
                }
                let key = value.get("id").map(|id| id.to_string()).unwrap_or_default();
                match routes.lock().unwrap().remove(&key) {
                    Some(waiter) => {
                        let _ = waiter.send(value);
                    }
                    None => {
                        let _ = other_tx.send(value);
                    }
                }
            }
        });
        Self {
            sink: tokio::sync::Mutex::new(sink),
            pending,
            notifications: tokio::sync::Mutex::new(notify_rx),
            unsolicited: tokio::sync::Mutex::new(other_rx),
            set_aside: Mutex::default(),
            next_id: AtomicI64::new(1),
            reader,
        }
    }

    pub async fn send_text(&self, text: impl Into<String>) {
        self.sink
            .lock()
            .await
            .send(Message::text(text.into()))
            .await
            .expect("send");
    }

    pub async fn send_message(&self, message: Message) {
        self.sink.lock().await.send(message).await.expect("send");
    }

    /// Sends a raw request value (its `id` must be set) and waits for the reply envelope.
    pub async fn raw_request(&self, request: Value) -> Value {
        self.raw_request_within(request, TIMEOUT).await
    }

    /// [`Self::raw_request`] with its own patience, for replies that take long by design.
    pub async fn raw_request_within(&self, request: Value, patience: Duration) -> Value {
        let key = request["id"].to_string();
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(key, tx);
        self.send_text(request.to_string()).await;
        tokio::time::timeout(patience, rx)
            .await
            .expect("reply in time")
            .expect("connection open")
    }

    /// A request in the Codex dialect; Ok(result) or Err(error object).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let reply = self
            .raw_request(json!({"id": id, "method": method, "params": params}))
            .await;
        match reply.get("error") {
            Some(error) => Err(error.clone()),
            None => Ok(reply["result"].clone()),
        }
    }

    pub async fn call(&self, method: &str, params: Value) -> Value {
        self.request(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.send_text(json!({"method": method, "params": params}).to_string())
            .await;
    }

    pub async fn initialize(&self, resume: Option<&str>) -> Result<String, Value> {
        let mut params = json!({"clientName": "e2e"});
        if let Some(id) = resume {
            params["resumeSessionId"] = json!(id);
        }
        let result = self.request("initialize", params).await?;
        self.notify("initialized", json!({})).await;
        Ok(result["sessionId"].as_str().unwrap().to_owned())
    }

    pub async fn next_notification(&self) -> Value {
        tokio::time::timeout(TIMEOUT, self.notifications.lock().await.recv())
            .await
            .expect("notification in time")
            .expect("connection open")
    }

    pub async fn try_next_notification(&self, wait: Duration) -> Option<Value> {
        tokio::time::timeout(wait, self.notifications.lock().await.recv())
            .await
            .ok()
            .flatten()
    }

    pub async fn next_unsolicited(&self) -> Value {
        tokio::time::timeout(TIMEOUT, self.unsolicited.lock().await.recv())
            .await
            .expect("message in time")
            .expect("connection open")
    }

    /// Collects `process/*` notifications of one process until `process/closed`.
    /// Collects `process/*` notifications of one process until `process/closed`. Those of
    /// other processes are kept for later calls, so processes can be awaited in any order.
    pub async fn events_until_closed(&self, process_id: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let mine = |e: &Value| e["params"]["processId"] == process_id;
            let kept = {
                let mut set_aside = self.set_aside.lock().unwrap();
                set_aside
                    .iter()
                    .position(mine)
                    .and_then(|at| set_aside.remove(at))
            };
            let event = match kept {
                Some(event) => event,
                None => {
                    let event = self.next_notification().await;
                    if !mine(&event) {
                        self.set_aside.lock().unwrap().push_back(event);
                        continue;
                    }
                    event
                }
            };
            let closed = event["method"] == "process/closed";
            events.push(event);
            if closed {
                return events;
            }
        }
    }

    pub async fn close(self) {
        let _ = self.sink.lock().await.close().await;
        self.reader.abort();
    }

    /// Drops the TCP connection without a close handshake.
    pub fn abort(self) {
        self.reader.abort();
    }

    /// Waits until the server closes this connection.
    pub async fn wait_closed(&mut self) {
        tokio::time::timeout(TIMEOUT, &mut self.reader)
            .await
            .expect("server closed in time")
            .ok();
    }
}

/// A binary-payload message (`HEADER NUL PAYLOAD`, docs/protocol.md) as the text form would
/// carry it: the payload in base64 under `chunk` of `params` or `result`, plus a top-level
/// `"$binary": true` for tests to check how it came.
fn binary_message(bytes: &[u8]) -> Value {
    let at = bytes
        .iter()
        .position(|&byte| byte == 0)
        .expect("a binary message has a NUL after its header");
    let mut value: Value = serde_json::from_slice(&bytes[..at]).expect("the header is JSON");
    let member = if value.get("method").is_some() {
        "params"
    } else {
        "result"
    };
    let object = value[member].as_object_mut().expect("params or result");
    assert!(
        !object.contains_key("chunk"),
        "the payload stands for the chunk"
    );
    object.insert("chunk".into(), json!(b64(&bytes[at + 1..])));
    value["$binary"] = json!(true);
    value
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(text: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text.as_str().unwrap())
        .unwrap()
}

pub fn cwd_uri() -> String {
    format!("file://{}", std::env::temp_dir().display())
}

pub fn start_params(id: &str, argv: &[&str]) -> Value {
    json!({
        "processId": id,
        "argv": argv,
        "cwd": cwd_uri(),
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        "tty": false,
    })
}

/// Output bytes of all `process/output` notifications, in order.
pub fn output_of(events: &[Value]) -> Vec<u8> {
    events
        .iter()
        .filter(|e| e["method"] == "process/output")
        .flat_map(|e| unb64(&e["params"]["chunk"]))
        .collect()
}

/// Reads a process by long-polling until it is closed; returns (bytes, final read result).
pub async fn read_all(client: &Client, id: &str) -> (Vec<u8>, Value) {
    let read = read_until(client, id, 0, |_| false).await;
    (read.bytes, read.last)
}

/// What [`read_until`] read.
pub struct Read {
    pub bytes: Vec<u8>,
    /// The last seq read.
    pub after: u64,
    /// The last `process/read` result.
    pub last: Value,
    /// Some read said output was evicted.
    pub truncated: bool,
}

/// Reads `id` by long-polling from `after` until it is closed or `enough` says the bytes so
/// far suffice.
pub async fn read_until(
    client: &Client,
    id: &str,
    mut after: u64,
    enough: impl Fn(&[u8]) -> bool,
) -> Read {
    let (mut bytes, mut truncated) = (Vec::new(), false);
    loop {
        let result = client
            .call(
                "process/read",
                json!({"processId": id, "afterSeq": after, "waitMs": 5000}),
            )
            .await;
        truncated |= result["truncated"] == true;
        for chunk in result["chunks"].as_array().unwrap() {
            bytes.extend(unb64(&chunk["chunk"]));
        }
        after = result["nextSeq"].as_u64().unwrap() - 1;
        if result["closed"] == true || enough(&bytes) {
            return Read {
                bytes,
                after,
                last: result,
                truncated,
            };
        }
    }
}

/// `exec-server ARGS` run to its end: the exit code (-1 if killed), stdout and stderr. A
/// subcommand, or a daemon that must refuse to start, so it keeps no state.
pub fn exec_server(args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(args)
        .env(STATE_DIR_VAR, "none")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub fn pid_alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at the state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Field 3: the state.
        Ok(stat) => !stat_fields(&stat)
            .first()
            .is_some_and(|state| state.starts_with('Z')),
        Err(_) => false,
    }
}

pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `file:` URI of an absolute host path, as the protocol spells it.
pub fn file_uri(path: &std::path::Path) -> String {
    exec_server_protocol::PathUri::from_path(path)
        .unwrap()
        .to_string()
}

/// A fresh temporary directory only its owner may access (a plain one is 0777 less the umask),
/// as a state dir must be.
pub fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap()
}

/// A fresh temporary directory, on tmpfs when the machine has one: file-heavy tests then
/// measure the daemon, not the disk.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

/// The fields of `/proc/.../stat` after the command name (which may contain spaces), so that
/// field N of proc(5) is at index N - 3.
pub fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect()
}

/// Processes (zombies included) whose parent is `pid`.
pub fn children_of(pid: i32) -> Vec<String> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let fields = stat_fields(&stat);
        // Field 4: the parent.
        if fields.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(pid) {
            children.push(stat);
        }
    }
    children
}

/// Children of `pid` other than idle supervisors and sandbox helpers (the daemon keeps a few
/// waiting, and a fork server of supervisors whose children are those waiting ones): what a
/// daemon must not leave behind (zombies included).
pub fn workload_children_of(pid: i32) -> Vec<String> {
    children_of(pid)
        .into_iter()
        .filter(|stat| !idle_helper(stat))
        .collect()
}

/// A helper (`/proc/PID/stat` text) that runs nothing: none of its children does either.
fn idle_helper(stat: &str) -> bool {
    let Some(pid) = stat
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return false;
    };
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"__supervise"))
        && children_of(pid).iter().all(|child| idle_helper(child))
}

/// Processes kept in a state directory's `processes` (not the spare directories made ahead).
pub fn kept_processes(processes: &std::path::Path) -> usize {
    std::fs::read_dir(processes)
        .unwrap()
        .flatten()
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .count()
}

/// The inotify instances `pid` holds.
pub fn inotify_instances(pid: i32) -> usize {
    (std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap())
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target == std::path::Path::new("anon_inode:inotify"))
        .count()
}

/// Process `pid`'s resident memory (`VmRSS`), in KiB.
pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
