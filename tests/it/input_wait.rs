//! Input waits: `process/inputWait` once per wait when the process's tree is blocked reading its
//! stdin, `waitingForInput` on `process/read` until input or output comes; never for a process
//! that sleeps or is blocked on something else.

use crate::common;
use crate::sandbox_support::{uri, workspace_write, Dirs};

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// The quiet period the tests ask for, to stay fast.
const QUIET_MS: u64 = 300;

fn waiting_start(id: &str, argv: &[&str], tty: bool) -> Value {
    let mut params = start_params(id, argv);
    params["pipeStdin"] = json!(true);
    params["tty"] = json!(tty);
    params["inputWaitMs"] = json!(QUIET_MS);
    params
}

/// The next notification of `id`: output is collected into `output`, and its last seq kept.
async fn next_of(client: &Client, id: &str, output: &mut Vec<u8>, last_seq: &mut u64) -> Value {
    loop {
        let event = client.next_notification().await;
        assert_eq!(event["params"]["processId"], id, "{event}");
        if let Some(seq) = event["params"]["seq"].as_u64() {
            *last_seq = seq;
        }
        if event["method"] == "process/output" {
            output.extend(unb64(&event["params"]["chunk"]));
            continue;
        }
        return event;
    }
}

async fn waiting_for_input(client: &Client, id: &str) -> bool {
    let read = client
        .call("process/read", json!({"processId": id, "afterSeq": 0}))
        .await;
    read.get("waitingForInput") == Some(&json!(true))
}

/// Starts `argv`, which prints `ready`, waits for a line and prints it back: the wait is
/// reported once, after the last output, and ends with the input.
async fn fires_once_then_clears(daemon: &Daemon, params: Value) {
    let id = params["processId"].as_str().unwrap();
    let (client, _) = daemon.session().await;
    client.call("process/start", params.clone()).await;
    let (mut output, mut last_seq) = (Vec::new(), 0);
    let event = next_of(&client, id, &mut output, &mut last_seq).await;
    assert_eq!(event["method"], "process/inputWait", "{id}: {event}");
    assert!(
        String::from_utf8_lossy(&output).contains("ready"),
        "{id}: {output:?}"
    );
    assert_eq!(event["params"]["afterSeq"], last_seq, "{id}: {event}");
    assert!(event["params"].get("seq").is_none(), "{id}: {event}");
    assert!(waiting_for_input(&client, id).await, "{id}");
    // Once per wait: still waiting, and nothing more said.
    let again = client
        .try_next_notification(Duration::from_millis(6 * QUIET_MS))
        .await;
    assert!(again.is_none(), "{id}: {again:?}");
    assert!(waiting_for_input(&client, id).await, "{id}");
    let write = client
        .call(
            "process/write",
            json!({"processId": id, "chunk": b64(b"hello\n"), "writeId": "w1"}),
        )
        .await;
    assert_eq!(write["status"], "accepted");
    assert!(!waiting_for_input(&client, id).await, "{id}");
    let events = client.events_until_closed(id).await;
    output.extend(output_of(&events));
    assert!(
        String::from_utf8_lossy(&output).contains("got hello"),
        "{id}: {:?}",
        String::from_utf8_lossy(&output)
    );
    assert!(
        events.iter().all(|e| e["method"] != "process/inputWait"),
        "{id}: {events:?}"
    );
    let exited = events.iter().find(|e| e["method"] == "process/exited");
    assert_eq!(exited.unwrap()["params"]["exitCode"], 0, "{id}");
}

const SH_READ: &[&str] = &["sh", "-c", "echo ready; read line; echo got $line"];
const PYTHON_INPUT: &[&str] = &[
    "python3",
    "-c",
    "print('ready', flush=True); print('got', input())",
];
/// With readline on a terminal, `input()` waits in `select` (a poll-family wait), not `read`.
const PYTHON_READLINE: &[&str] = &[
    "python3",
    "-c",
    "import readline; print('ready', flush=True); print('got', input())",
];

#[tokio::test]
async fn a_read_of_stdin_is_reported_once_on_pipes_and_on_a_pty() {
    let daemon = Daemon::start();
    // In a sandbox too: its helper supervises the tree.
    let dirs = Dirs::new();
    let mut sandboxed = waiting_start("sh-sandboxed", SH_READ, false);
    sandboxed["sandbox"] = workspace_write(&dirs.ws, "restricted");
    sandboxed["cwd"] = json!(uri(&dirs.ws));
    tokio::join!(
        fires_once_then_clears(&daemon, waiting_start("sh-pipe", SH_READ, false)),
        fires_once_then_clears(&daemon, waiting_start("python-pipe", PYTHON_INPUT, false)),
        fires_once_then_clears(&daemon, waiting_start("sh-pty", SH_READ, true)),
        fires_once_then_clears(&daemon, waiting_start("python-pty", PYTHON_INPUT, true)),
        fires_once_then_clears(
            &daemon,
            waiting_start("readline-pty", PYTHON_READLINE, true)
        ),
        fires_once_then_clears(&daemon, sandboxed),
    );
}

/// Starts `argv` with its stdin open and a short quiet period: no input wait is reported,
/// well past the quiet period.
async fn never_fires(daemon: &Daemon, id: &str, argv: &[&str]) {
    let (client, _) = daemon.session().await;
    client
        .call("process/start", waiting_start(id, argv, false))
        .await;
    let event = client
        .try_next_notification(Duration::from_millis(8 * QUIET_MS))
        .await;
    assert!(event.is_none(), "{id}: {event:?}");
    let read = client
        .call("process/read", json!({"processId": id, "afterSeq": 0}))
        .await;
    // Still blocked where it was, so the test saw what it meant to.
    assert_eq!(read["exited"], false, "{id}: {read}");
    assert!(read.get("waitingForInput").is_none(), "{id}: {read}");
    client
        .call("process/terminate", json!({"processId": id}))
        .await;
}

#[tokio::test]
async fn a_sleep_a_network_read_or_a_lock_is_not_an_input_wait() {
    let daemon = Daemon::start();
    // A server that accepts and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/",
        listener.local_addr().unwrap().port()
    );
    let accepted = std::thread::spawn(move || listener.accept().map(|(stream, _)| stream));
    // A lock held by this test.
    let dir = scratch_dir();
    let lock = dir.path().join("lock");
    let held = std::fs::File::create(&lock).unwrap();
    // SAFETY: flock on a file we own.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) },
        0
    );
    let lock = lock.display().to_string();
    let (curl, flock) = (["curl", "-s", &url], ["flock", &lock, "true"]);
    tokio::join!(
        never_fires(&daemon, "sleep", &["sleep", "5"]),
        never_fires(&daemon, "shell-sleep", &["sh", "-c", "sleep 5; echo done"]),
        never_fires(&daemon, "curl", &curl),
        never_fires(&daemon, "flock", &flock),
    );
    drop(accepted);
}

#[tokio::test]
async fn input_wait_ms_is_validated_and_zero_turns_waits_off() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    for bad in [json!(-1), json!(86_400_001)] {
        let mut params = waiting_start("bad", SH_READ, false);
        params["inputWaitMs"] = bad;
        let err = client.request("process/start", params).await.unwrap_err();
        assert_eq!(err["code"], -32602, "{err}");
    }
    let mut params = waiting_start("off", &["sh", "-c", "read line"], false);
    params["inputWaitMs"] = json!(0);
    client.call("process/start", params).await;
    let event = client
        .try_next_notification(Duration::from_millis(6 * QUIET_MS))
        .await;
    assert!(event.is_none(), "{event:?}");
    assert!(!waiting_for_input(&client, "off").await);
    let info = client.call("environment/info", json!({})).await;
    assert_eq!(info["capabilities"]["processInputWait"], true);
}

#[tokio::test]
async fn the_client_crate_surfaces_input_waits() {
    let daemon = Daemon::start();
    let client = exec_server_client::Client::connect(exec_server_client::ClientOptions::new(
        daemon.url.clone(),
    ))
    .await
    .unwrap();
    let command = exec_server_client::Command::new(["sh", "-c", "echo ready; read line"])
        .stdin()
        .input_wait(Duration::from_millis(QUIET_MS));
    let mut process = client.start(command).await.unwrap();
    let mut last_seq = 0;
    loop {
        match process.next_event().await.unwrap() {
            exec_server_client::ProcessEvent::Output { seq, .. } => last_seq = seq,
            exec_server_client::ProcessEvent::InputWait { after_seq } => {
                assert_eq!(after_seq, last_seq);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    process.write(b"line\n").await.unwrap();
    assert_eq!(process.collect().await.exit_code, Some(0));
}
