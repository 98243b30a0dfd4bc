//! `--listen unix:///PATH`: the WebSocket protocol on a Unix socket, for the daemon's own uid
//! and `--allow-uid`s, never for a sandbox; a live socket is not taken over, a stale one is.

use crate::common;
use crate::sandbox_support;

use common::Daemon;
use exec_server_client::{Client, ClientOptions, Command, ProcessEvent};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");

pub(crate) fn unix_daemon(socket: &Path, args: &[&str]) -> Daemon {
    let mut command = std::process::Command::new(BIN);
    command
        .arg("--listen")
        .arg(format!("unix://{}", socket.display()))
        .args(args)
        .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
        .env("EXEC_SERVER_LOG", "warn")
        .stdout(Stdio::piped());
    Daemon::launch(command)
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

/// Runs `argv` through the client crate and returns its output and exit code.
async fn run(client: &Client, mut command: Command) -> (String, i32) {
    command = command.cwd("/tmp").unwrap().env("PATH", "/usr/bin:/bin");
    let mut process = client.start(command).await.unwrap();
    let (mut output, mut code) = (Vec::new(), -1);
    while let Some(event) = process.next_event().await {
        match event {
            ProcessEvent::Output { data, .. } => output.extend_from_slice(&data),
            ProcessEvent::Exited { exit_code, .. } => code = exit_code,
            _ => {}
        }
    }
    (String::from_utf8_lossy(&output).into_owned(), code)
}

#[tokio::test]
async fn the_protocol_the_client_and_the_cli_work_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/exec.sock");
    let daemon = unix_daemon(&socket, &[]);
    assert_eq!(daemon.url, format!("unix://{}", socket.display()));
    // The missing directory is made for the daemon alone; the socket is the owner's.
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    assert_eq!(mode(&socket), 0o600);
    let client = Client::connect(ClientOptions::new(daemon.url.clone()))
        .await
        .unwrap();
    let (output, code) = run(&client, Command::new(["echo", "over unix"])).await;
    assert_eq!((output.as_str(), code), ("over unix\n", 0));
    assert_eq!(common::exec_server(&["ready", "--url", &daemon.url]).0, 0);
    let (code, stdout, stderr) =
        common::exec_server(&["run", "--url", &daemon.url, "--", "echo", "cli"]);
    assert_eq!((code, stdout.as_str()), (0, "cli\n"), "{stderr}");
}

#[tokio::test]
async fn a_live_socket_is_not_taken_over_a_stale_one_is_and_the_socket_goes_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("exec.sock");
    let mut first = unix_daemon(&socket, &[]);
    let url = first.url.clone();
    let (code, _, stderr) = common::exec_server(&["--listen", &url]);
    assert_eq!(code, 1);
    assert!(stderr.contains("another daemon is serving"), "{stderr}");
    assert_eq!(
        common::exec_server(&["ready", "--url", &url]).0,
        0,
        "the first one serves on"
    );
    first.send_signal(libc::SIGTERM);
    assert!(first.wait_exit(common::TIMEOUT).is_some());
    assert!(!socket.exists(), "the socket is removed at exit");

    // A socket file nothing serves (a daemon that was killed) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(std::fs::symlink_metadata(&socket)
        .unwrap()
        .file_type()
        .is_socket());
    let second = unix_daemon(&socket, &[]);
    assert_eq!(common::exec_server(&["ready", "--url", &second.url]).0, 0);
    drop(second);

    // Anything else at the path is not the daemon's to remove.
    let other = dir.path().join("not-a-socket");
    std::fs::write(&other, "data").unwrap();
    let (code, _, stderr) =
        common::exec_server(&["--listen", &format!("unix://{}", other.display())]);
    assert_eq!(code, 1);
    assert!(stderr.contains("is not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "data");
}

/// A directory other uids may enter, with a copy of the binary they can execute (the build
/// directory may not be), and a path for a socket in it.
pub(crate) fn shared_dir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.path().join("exec-server");
    std::fs::copy(BIN, &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("exec.sock");
    (dir, binary, socket)
}

pub(crate) fn ready_as(binary: &Path, uid: u32, url: &str) -> i32 {
    use std::os::unix::process::CommandExt as _;
    std::process::Command::new(binary)
        .args(["ready", "--timeout", "5s", "--url", url])
        .uid(uid)
        .gid(65534)
        .current_dir("/")
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

#[tokio::test]
async fn only_the_daemons_uid_and_allowed_uids_are_admitted() {
    // The directory exists (and others may enter it), so the daemon leaves its mode alone; the
    // socket is open to all with an --allow-uid, and the credentials decide.
    let (dir, binary, socket) = shared_dir();
    let daemon = unix_daemon(&socket, &["--allow-uid", "1234"]);
    assert_eq!(mode(dir.path()), 0o755);
    assert_eq!(mode(&socket), 0o666);
    assert_eq!(ready_as(&binary, 1234, &daemon.url), 0, "an allowed uid");
    assert_eq!(ready_as(&binary, 65534, &daemon.url), 1, "a foreign uid");
    assert_eq!(ready_as(&binary, 0, &daemon.url), 0, "the daemon's own uid");
}

/// A sandbox runs as the daemon's uid and may see the socket's path: with the daemon's own
/// CLI it would run an unsandboxed command. The same command from outside a sandbox does run.
#[tokio::test]
async fn a_sandbox_cannot_drive_the_daemon_over_its_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("exec.sock");
    let daemon = unix_daemon(&socket, &[]);
    let client = Client::connect(ClientOptions::new(daemon.url.clone()))
        .await
        .unwrap();
    let dirs = sandbox_support::Dirs::new();
    let marker = dir.path().join("escaped");
    let attack = |id: &str| {
        Command::new([
            BIN,
            "run",
            "--url",
            &daemon.url,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ])
        .process_id(id)
    };

    let mut sandboxed = attack("sandboxed");
    sandboxed.params_mut().sandbox = Some(
        serde_json::from_value(sandbox_support::workspace_write(&dirs.ws, "restricted")).unwrap(),
    );
    let (output, code) = run(&client, sandboxed).await;
    assert_ne!(code, 0, "{output}");
    assert!(
        !marker.exists(),
        "the sandbox ran a command outside it: {output}"
    );

    let (output, code) = run(&client, attack("plain")).await;
    assert_eq!(code, 0, "{output}");
    assert!(
        marker.exists(),
        "the same command from outside a sandbox runs"
    );
    tokio::time::sleep(Duration::ZERO).await;
}
