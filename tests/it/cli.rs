//! The human CLI (`exec-server run`, `exec-server fs`, `exec-server ps`) against a real daemon.

use crate::common;

use common::Daemon;
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// The CLI against `daemon` (`EXEC_SERVER_URL`), through pipes, `stdin` fed to it.
pub(crate) fn cli(daemon: &Daemon, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(args)
        .env("EXEC_SERVER_URL", &daemon.url)
        .env_remove("EXEC_SERVER_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    output
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sessions (attached and detached) and processes (any state) the daemon holds, from its
/// `/metrics` gauges.
pub(crate) fn census(daemon: &Daemon) -> (u64, u64) {
    let addr = daemon.url.trim_start_matches("ws://");
    let (status, text) = crate::metrics::http_get(addr, "/metrics", None);
    assert_eq!(status, 200, "{text}");
    let sum = |name: &str| {
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    (sum("exec_server_sessions"), sum("exec_server_processes"))
}

/// Waits until the daemon holds no session and no process.
pub(crate) fn assert_nothing_left(daemon: &Daemon) {
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    while census(daemon) != (0, 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "left behind (sessions, processes): {:?}",
            census(daemon)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn run_streams_output_and_exits_with_the_remote_code() {
    let daemon = Daemon::start();
    let output = cli(
        &daemon,
        &["run", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"],
        b"",
    );
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(text(&output.stdout), "hi\n");
    assert_eq!(text(&output.stderr), "oops\n");
    assert_nothing_left(&daemon);
}

#[test]
fn run_forwards_stdin_env_and_cwd() {
    let daemon = Daemon::start();
    let output = cli(
        &daemon,
        &[
            "run",
            "--cwd",
            "/tmp",
            "--env",
            "GREETING=hello",
            "--",
            "sh",
            "-c",
            r#"read a; read b; echo "$b $a $GREETING $(pwd)""#,
        ],
        b"first\nsecond\n",
    );
    assert_eq!(
        text(&output.stdout),
        "second first hello /tmp\n",
        "{output:?}"
    );
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn run_streams_megabytes_both_ways() {
    let daemon = Daemon::start();
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let output = cli(&daemon, &["run", "--", "cat"], &input);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        output.stdout == input,
        "cat must return the input byte for byte"
    );
}

/// The CLI with its stdout on a pipe that `reader` drains; returns its exit status.
fn run_into_pipe(
    daemon: &Daemon,
    args: &[&str],
    nonblocking: bool,
    reader: impl FnOnce(std::fs::File) -> Vec<u8> + Send + 'static,
) -> (Option<i32>, Vec<u8>) {
    // Close-on-exec: a child another test spawns meanwhile must not hold the read end open.
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    if nonblocking {
        let flags = nix::fcntl::fcntl(&write_end, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&write_end, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(args)
        .env("EXEC_SERVER_URL", &daemon.url)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || reader(std::fs::File::from(read_end)));
    let status = child.wait().unwrap();
    (status.code(), reader.join().unwrap())
}

#[test]
fn run_writes_all_output_to_a_non_blocking_stdout_read_slowly() {
    let daemon = Daemon::start();
    let (code, output) = run_into_pipe(
        &daemon,
        &["run", "--", "seq", "1", "400000"],
        true,
        |mut pipe| {
            // The pipe fills while nobody reads: the CLI's writes find it full (EAGAIN).
            std::thread::sleep(std::time::Duration::from_millis(500));
            let mut output = Vec::new();
            let mut buffer = [0u8; 4096];
            while let Ok(read) = std::io::Read::read(&mut pipe, &mut buffer) {
                if read == 0 {
                    break;
                }
                output.extend_from_slice(&buffer[..read]);
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            output
        },
    );
    let expected: String = (1..=400_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(code, Some(0));
    assert!(output == expected.as_bytes(), "{} bytes", output.len());
}

#[test]
fn run_ends_the_command_when_its_local_stdout_closes() {
    let daemon = Daemon::start();
    let (code, output) = run_into_pipe(
        &daemon,
        &["run", "--", "sh", "-c", "while :; do echo y; done"],
        false,
        |mut pipe| {
            let mut first = [0u8; 2];
            std::io::Read::read_exact(&mut pipe, &mut first).unwrap();
            first.to_vec()
        },
    );
    assert_eq!(output, b"y\n");
    assert_eq!(code, Some(255), "as a pipe's writer would fail");
    assert_nothing_left(&daemon);
}

#[test]
fn run_with_tty_gets_a_terminal() {
    let daemon = Daemon::start();
    let output = cli(
        &daemon,
        &[
            "run",
            "--tty",
            "--",
            "sh",
            "-c",
            "test -t 0 && echo on-a-tty",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(text(&output.stdout).contains("on-a-tty"), "{output:?}");
}

#[test]
fn run_names_a_missing_working_directory() {
    let daemon = Daemon::start();
    let output = cli(
        &daemon,
        &["run", "--cwd", "/nonexistent", "--", "true"],
        b"",
    );
    assert_eq!(output.status.code(), Some(255), "{output:?}");
    assert!(
        text(&output.stderr).contains(
            "failed to start `true`: the working directory `/nonexistent` does not exist"
        ),
        "{output:?}"
    );
}

#[test]
fn run_reports_an_unreachable_daemon() {
    let output = Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["run", "--url", "ws://127.0.0.1:1", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(255));
    assert!(
        text(&output.stderr).contains("cannot connect"),
        "{output:?}"
    );
}

#[test]
fn fs_put_get_and_ls_round_trip_a_multi_megabyte_file() {
    let daemon = Daemon::start();
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let source = local.path().join("source.bin");
    std::fs::write(&source, &data).unwrap();
    let remote_file = remote.path().join("big.bin");
    let remote_uri = format!("file://{}", remote_file.display());

    let put = cli(
        &daemon,
        &["fs", "put", source.to_str().unwrap(), &remote_uri],
        b"",
    );
    assert!(put.status.success(), "{put:?}");
    assert!(std::fs::read(&remote_file).unwrap() == data);

    std::fs::create_dir(remote.path().join("sub")).unwrap();
    let ls = cli(&daemon, &["fs", "ls", remote.path().to_str().unwrap()], b"");
    assert!(ls.status.success(), "{ls:?}");
    assert_eq!(text(&ls.stdout), "big.bin\nsub/\n");

    let copy = local.path().join("copy.bin");
    let get = cli(
        &daemon,
        &[
            "fs",
            "get",
            remote_file.to_str().unwrap(),
            copy.to_str().unwrap(),
        ],
        b"",
    );
    assert!(get.status.success(), "{get:?}");
    assert!(
        std::fs::read(&copy).unwrap() == data,
        "get returns the same bytes"
    );

    let missing = cli(&daemon, &["fs", "get", "/nonexistent/x", "-"], b"");
    assert_eq!(missing.status.code(), Some(255));
    assert!(!missing.stderr.is_empty());
}

fn ready(url: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["ready", "--url", url])
        .args(extra)
        .env_remove("EXEC_SERVER_TOKEN")
        .output()
        .unwrap()
}

#[test]
fn ready_passes_against_a_daemon_even_one_that_requires_a_token() {
    let daemon = Daemon::start_with(&[], &[("EXEC_SERVER_CONNECTION_TOKEN", "s3cret")]);
    let output = ready(&daemon.url, &[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
}

#[test]
fn ready_fails_with_the_reason_when_nothing_ready_answers() {
    // Nothing listens on a port just released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    let output = ready(&closed_url, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        text(&output.stderr).contains("cannot connect"),
        "{output:?}"
    );

    // A server that answers, but not 200, and one that never answers.
    let unready = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let unready_url = format!("ws://{}", unready.local_addr().unwrap());
    let silent_url = format!("ws://{}", silent.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::Read as _;
        let (mut stream, _) = unready.accept().unwrap();
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
    });
    let output = ready(&unready_url, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        text(&output.stderr).contains("answered `HTTP/1.1 503 Service Unavailable`"),
        "{output:?}"
    );
    let output = ready(&silent_url, &["--timeout", "300ms"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        text(&output.stderr).contains("no answer from"),
        "{output:?}"
    );
    drop(silent);
}

/// `ps --session` lists that session's processes; the token comes from `--token-file`.
#[test]
fn ps_lists_a_sessions_processes_as_a_table() {
    use crate::process_tree::{sleeps, tags};
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = common::scratch_dir();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_path = token_file.to_str().unwrap();
    let daemon = Daemon::start_with(&["--connection-token-file", token_path], &[]);
    let tag = tags(109)[0].clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let session = runtime.block_on(async {
        let client = common::Client::connect_with_token(&daemon.url, "s3cret").await;
        let session = client.initialize(None).await.unwrap();
        let mut slow = common::start_params("slow", &["sleep", &tag]);
        slow["limits"] = json!({"timeoutMs": 600_000, "maxOpenFiles": 64});
        client.call("process/start", slow).await;
        client
            .call("process/start", common::start_params("quick", &["true"]))
            .await;
        common::read_all(&client, "quick").await;
        common::eventually("the sleep", || sleeps(&tag).len() == 1).await;
        session
    });
    // Its tasks go with it: the connection closes and the session is detached.
    drop(runtime);
    let ps = |extra: &[&str]| {
        let mut args = vec!["ps", "--token-file", token_path];
        args.extend(extra);
        cli(&daemon, &args, b"")
    };
    let output = ps(&["--session", &session]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let table = text(&output.stdout);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert_eq!(
        lines[0],
        [
            "PROCESS", "ID", "PID", "STATE", "EXIT", "SANDBOX", "STARTED", "CHILDREN", "PAUSED",
            "LIMITS", "USAGE", "COMMAND"
        ]
    );
    let pid = sleeps(&tag)[0].to_string();
    assert_eq!(lines[1][0], "quick");
    assert_eq!(lines[1][2..5], ["closed", "0", "none"], "{table}");
    assert_eq!(lines[1].last(), Some(&"true"));
    // What the exited one used; no limits given.
    assert_eq!(lines[1][8], "-", "{table}");
    assert!(lines[1][9].starts_with("cpu="), "{table}");
    assert_eq!(
        lines[2][..5],
        ["slow", pid.as_str(), "running", "-", "none"]
    );
    assert_eq!(
        lines[2][6..],
        [
            "0",
            "no",
            "timeout=600s,files=64",
            "-",
            "sleep",
            tag.as_str()
        ],
        "{table}"
    );
    // Without --session: a session of its own, empty; and no token, no listing.
    let output = ps(&[]);
    assert_eq!(text(&output.stdout).lines().count(), 1, "{output:?}");
    let output = cli(&daemon, &["ps", "--session", &session], b"");
    assert_eq!(output.status.code(), Some(255), "{output:?}");
    // The listed session is detached again and can be resumed.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let resumed = loop {
            let client = common::Client::connect_with_token(&daemon.url, "s3cret").await;
            match client.initialize(Some(&session)).await {
                Ok(_) => break client,
                // ps's connection may not be noticed gone yet.
                Err(error) if error["code"] == -32010 => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await
                }
                Err(error) => panic!("{error}"),
            }
        };
        resumed
            .call("process/terminate", json!({"processId": "slow"}))
            .await;
    });
}
